"""The MLflow run of a drop-in ``GrpoLabTrainer`` with ``report_to="mlflow"``, as CLI runs have it.

Detail: docs/runs.md, "grpolab.trainer.mlflow_report".
"""

from __future__ import annotations

import json
import os

from transformers.integrations import MLflowCallback
from transformers.utils import ENV_VARS_TRUE_VALUES

from grpolab.errors import warn_at_caller
from grpolab.method.sampler_corrections import logged, trl_sampler_correction
from grpolab.method.spec import MethodSpec
from grpolab.tracking.naming import flat_keys, method_label, method_params


def dropin_params(method_name: str, spec: MethodSpec, args, steps: int, model_path: str, reward_funcs: list[str],
                  correctness: str) -> dict[str, object]:
    """The CLI's params (``naming.run_params``) of a drop-in run, flat: the GRPOConfig read back
    into the CLI's training knobs (``experiment.runner._grpo_args`` is the other direction)."""
    group = args.num_generations
    minibatches = args.steps_per_generation / args.gradient_accumulation_steps
    train = {"steps": steps, "group_size": group, "prompts_per_rollout": args.generation_batch_size // group,
             "minibatches": int(minibatches) if minibatches.is_integer() else minibatches,
             "num_iterations": args.num_iterations, "grad_accum": args.gradient_accumulation_steps,
             "learning_rate": args.learning_rate, "temperature": args.temperature,
             "max_completion_length": args.max_completion_length}
    nested = {"method": {"name": method_name, **method_params(spec)}, "train": train, "model": {"path": model_path},
              "task": {"reward_funcs": list(reward_funcs), "correctness": correctness}, "seed": args.seed}
    if args.use_vllm:   # TRL's sampler correction, under the entry name an experiment file gives it
        name = trl_sampler_correction(args.vllm_importance_sampling_correction, args.vllm_importance_sampling_mode)
        nested["generation"] = logged(name, args.vllm_importance_sampling_clip_min or 0.0,
                                      args.vllm_importance_sampling_clip_max)
    return flat_keys(nested)


def dropin_run_name(method_name: str, spec: MethodSpec, seed: int) -> str:
    """``<method>-s<seed>``: the registered method this update rule equals, else ``name + axes``."""
    return f"{method_label(spec, method_name)}-s{seed}"


class _ArgsAsGrpolabLogsThem:
    """``TrainingArguments`` as ``MLflowCallback.setup`` reads them: ``run_name`` and ``to_dict()``
    answered by grpolab, every other attribute by the trainer's own args."""

    def __init__(self, args, run_name: str, params: dict):
        self._args, self.run_name, self._params = args, run_name, params

    def __getattr__(self, name):
        return getattr(self._args, name)

    def to_dict(self) -> dict:
        return dict(self._params)


class GrpoLabMlflowCallback(MLflowCallback):
    """transformers' MLflow reporting with grpolab's run name, params, tags and config artifact
    (docs/runs.md, "grpolab.trainer.mlflow_report"). ``describe(args, state)`` returns (run name,
    params) at setup, when the number of steps is known."""

    def __init__(self, describe, tags: dict):
        super().__init__()
        self._describe, self._grpolab_tags = describe, tags

    def setup(self, args, state, model):
        if os.getenv("MLFLOW_FLATTEN_PARAMS", "FALSE").upper() in ENV_VARS_TRUE_VALUES:   # as transformers reads it
            warn_at_caller("MLFLOW_FLATTEN_PARAMS has no effect on a GrpoLabTrainer run: its params are grpolab's "
                           "flat 'a.b' keys; the full GRPOConfig is the run's trl_config.json artifact")
        run_name, params = self._describe(args, state)
        # A run the user attaches to (MLFLOW_RUN_ID) or already has open keeps its own name, as with
        # transformers: MLflow renames a resumed run to any run_name it is given.
        nested = os.getenv("MLFLOW_NESTED_RUN", "FALSE").upper() in ENV_VARS_TRUE_VALUES
        attached = os.getenv("MLFLOW_RUN_ID") or (self._ml_flow.active_run() is not None and not nested)
        name = args.run_name if attached else (args.run_name or run_name)
        super().setup(_ArgsAsGrpolabLogsThem(args, name, params), state, None)
        if state.is_world_process_zero and self._ml_flow.active_run() is not None:
            self._ml_flow.set_tags(self._grpolab_tags)
            config = getattr(model, "config", None)
            full = {"args": args.to_dict(), "model_config": config.to_dict() if config is not None else None}
            self._ml_flow.log_text(json.dumps(full, indent=2, default=str), "trl_config.json")


def report_like_the_cli(trainer, describe, tags: dict) -> bool:
    """Put ``GrpoLabMlflowCallback`` where transformers' ``MLflowCallback`` is in the trainer's
    callback list; False when there is none (no ``report_to="mlflow"``). Subclasses such as
    DagsHub's are left as they are: their ``setup`` does more."""
    callbacks = trainer.callback_handler.callbacks
    for i, callback in enumerate(callbacks):
        if type(callback) is MLflowCallback:
            callbacks[i] = GrpoLabMlflowCallback(describe, tags)
            return True
    return False


def describe_dropin_run(trainer, args, state) -> tuple[str, dict]:
    """(run name, params) of a ``GrpoLabTrainer`` run as CLI runs have them, from its public
    method, spec, reward functions and correctness source."""
    kind, key = trainer.correctness.kind, trainer.correctness.key
    correctness = {"reward": lambda: trainer.reward_func_names[key], "column": lambda: key,
                   "callable": lambda: getattr(key, "__name__", repr(key)), "none": lambda: "none"}[kind]()
    config = getattr(trainer.model, "config", None)
    model_path = getattr(config, "name_or_path", None) or type(trainer.model).__name__
    params = dropin_params(trainer.method_name, trainer.spec, args, state.max_steps, model_path,
                           trainer.reward_func_names, correctness)
    return dropin_run_name(trainer.method_name, trainer.spec, args.seed), params
