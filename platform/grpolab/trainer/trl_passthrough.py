"""``train.trl:``: any GRPOConfig / TrainingArguments field grpolab does not own, checked at parse
time against the field list generated from the pinned TRL (``grpo_config_fields.py``), without
importing TRL or torch, and handed to GRPOConfig unchanged.

A field grpolab owns is refused with the grpolab key that sets it; a misspelled field names the
closest one. Each field's accepted YAML types come from its annotation (``accepted_kinds``); a field
whose annotation is not a plain union of bool/int/float/str/dict/list/None is not type-checked here
(GRPOConfig's own ``__post_init__`` checks it when the trainer is built).

Regenerate the list after a TRL or transformers upgrade: ``python -m grpolab.trainer.trl_passthrough``.
"""

from __future__ import annotations

import re
from pathlib import Path

from grpolab.errors import ConfigError, did_you_mean
from grpolab.planning import unmet_here
from grpolab.trainer.grpo_config_fields import GRPO_CONFIG_FIELDS, REPORT_TO_NAMES
from grpolab.trainer.trl_fields import AXIS, TRL_FIELDS

# GRPOConfig fields the experiment file sets through grpolab's own keys (the runner builds them).
OWNED = {
    "output_dir": "the run folder (state/runs/<run id>)", "report_to": "tracking.report_to",
    "logging_steps": "one log window per rollout (train.minibatches x train.num_iterations)",
    "logging_strategy": "one log window per rollout (train.minibatches x train.num_iterations)",
    "logging_first_step": "one log window per rollout (train.minibatches x train.num_iterations)",
    "save_only_model": "train.save_every (a checkpoint keeps the optimizer state, so a run can resume)",
    "save_strategy": "train.save_every", "save_steps": "train.save_every", "save_total_limit": "train.keep_checkpoints",
    "max_steps": "train.steps", "num_train_epochs": "train.steps",
    "per_device_train_batch_size": "train.prompts_per_rollout x train.group_size (split over processes)",
    "gradient_accumulation_steps": "train.grad_accum", "steps_per_generation": "train.minibatches",
    "generation_batch_size": "train.prompts_per_rollout", "num_iterations": "train.num_iterations",
    "num_generations": "train.group_size", "max_completion_length": "train.max_completion_length",
    "temperature": "train.temperature", "learning_rate": "train.learning_rate", "max_grad_norm": "train.max_grad_norm",
    "seed": "seed", "data_seed": "seed", "use_cpu": "the machine (CUDA when available)",
    "remove_unused_columns": "nothing: grpolab's reward functions need the prompt index column",
    "bf16": "train.dtype", "fp16": "train.dtype", "activation_checkpointing": "train.gradient_checkpointing",
    "activation_checkpointing_kwargs": "train.gradient_checkpointing (non-reentrant)",
    # transformers' deprecated aliases: __post_init__ copies them into the field above when it is unset
    "gradient_checkpointing": "train.gradient_checkpointing",
    "gradient_checkpointing_kwargs": "train.gradient_checkpointing (non-reentrant)",
    "cast_lm_head_to_fp32": "train.cast_lm_head_to_fp32", "resume_from_checkpoint": "grpolab run --resume",
    "use_vllm": "generation.backend", "vllm_mode": "generation.mode",
    "vllm_gpu_memory_utilization": "generation.gpu_memory_utilization",
    "vllm_tensor_parallel_size": "generation.tensor_parallel_size",
    "vllm_server_base_url": "generation.server_base_url", "vllm_enable_sleep_mode": "generation.enable_sleep_mode",
    "vllm_importance_sampling_correction": "generation.is_correction",
    "vllm_importance_sampling_mode": "generation.is_correction",
    "vllm_importance_sampling_clip_max": "generation.is_max", "vllm_importance_sampling_clip_min": "generation.is_min",
    "vllm_importance_sampling_cap": "generation.is_max",   # TRL's deprecated alias of vllm_importance_sampling_clip_max
    "reward_weights": "task.rewards[].weight", "eval_strategy": "eval.every (grpolab's held-out evaluation)",
    "eval_steps": "eval.every", "do_eval": "eval.every",
}
# Fields train.trl must not set, though grpolab has no single key for them: why, and where instead.
_EVAL = "grpolab runs its own held-out evaluation; use eval.*"
REFUSED = {
    "model_init_kwargs": "grpolab loads the policy itself (TRL would apply this to the reference model only); "
                         "use model.* for model loading",
    "trust_remote_code": "grpolab loads the policy itself (TRL would apply this to the reference model only); "
                         "use model.* for model loading",
    "chat_template_kwargs": "grpolab renders prompts to text before TRL sees them, so this would do nothing; "
                            "the prompt format is task.*",
    "hub_token": "a secret would be logged in clear with the run's params; set the HF_TOKEN environment variable",
    "load_best_model_at_end": _EVAL, "eval_on_start": _EVAL, "num_generations_eval": _EVAL,
    "per_device_eval_batch_size": _EVAL,
    "auto_find_batch_size": "it retries with smaller batches, changing the global batch grpolab's train.* keys fix",
    "enable_jit_checkpoint": "grpolab handles stop signals and checkpoints itself (train.save_every, grpolab run --resume)",
}
# A field named like a credential is never passed through: every train.trl value is logged as a run param.
_SECRET = re.compile(r"(^|_)(token|secret|password)s?$")
# Names TRL users know from other versions, not fields of the pinned TRL/transformers.
RENAMED = {"warmup_ratio": "warmup_steps (transformers 5 reads a value < 1 as a fraction of the steps)"}


def refusal(name: str) -> str | None:
    """Why ``train.trl`` may not set ``name`` (owned by a grpolab key, or refused), or None."""
    set_by = owner(name)
    if set_by is not None:
        return f"grpolab sets this GRPOConfig field; use {set_by}"
    if name in REFUSED:
        return REFUSED[name]
    if name.startswith("eval_"):
        return _EVAL
    if _SECRET.search(name):
        return "a secret would be logged in clear with the run's params; pass it through the environment"
    return None


def owner(name: str) -> str | None:
    """The grpolab key that sets GRPOConfig field ``name``, or None if ``train.trl`` may set it."""
    if name in OWNED:
        return OWNED[name]
    entry = TRL_FIELDS.get(name)
    if entry is not None and entry.kind == AXIS:
        return f"method (an axis: {entry.note})"
    return None


def check_trl_settings(trl: dict, prefix: str = "train.trl") -> None:
    """Refuse an owned, unknown or mistyped field of ``train.trl`` (a ConfigError naming the key)."""
    for name, value in trl.items():
        key = f"{prefix}.{name}"
        if not isinstance(name, str) or name not in GRPO_CONFIG_FIELDS:
            hint = f"; use {RENAMED[name]}" if name in RENAMED else did_you_mean(name, GRPO_CONFIG_FIELDS)
            raise ConfigError(f"{key}: not a field of TRL 1.16's GRPOConfig / TrainingArguments{hint}")
        why = refusal(name)
        if why is not None:
            raise ConfigError(f"{key}: {why}")
        type_name, kinds, choices = GRPO_CONFIG_FIELDS[name]
        if kinds and _kind(value) not in kinds and not (_kind(value) == "int" and "float" in kinds):
            expected = type_name if type_name != "Union" else " | ".join(kinds)   # a bare Union names no member
            raise ConfigError(f"{key}: expected {expected}, got {type(value).__name__} {value!r}")
        if choices and isinstance(value, str) and value not in choices:
            raise ConfigError(f"{key}: unknown value {value!r}{did_you_mean(value, choices)}; valid: {', '.join(choices)}")


# The module each integration needs (transformers' is_<name>_available), checked before the run starts.
_REPORT_TO_MODULES = {"tensorboard": ("tensorboard", "tensorboardX"), "azure_ml": ("azureml",), "flyte": ("flytekit",)}


def check_report_to(names: list) -> None:
    """``tracking.report_to``: transformers' integrations beside grpolab's own MLflow run."""
    import importlib.util
    for name in names:
        if name == "mlflow":
            raise ConfigError("tracking.report_to: mlflow is grpolab's own tracker (one run per row, with its params, "
                              "curves and artifacts), so transformers' MLflow callback would log a second copy of the "
                              "run; leave it out")
        if name not in REPORT_TO_NAMES:
            raise ConfigError(f"tracking.report_to: unknown integration {name!r}{did_you_mean(name, REPORT_TO_NAMES)}; "
                              f"valid: {', '.join(n for n in REPORT_TO_NAMES if n != 'mlflow')}")
        modules = _REPORT_TO_MODULES.get(name, (name,))
        if not any(importlib.util.find_spec(m) is not None for m in modules):
            unmet_here(f"tracking.report_to: {name} needs the {modules[0]} package, which is not installed "
                       f"(pip install {modules[0]})")


def _kind(value) -> str:
    for kind, cls in (("null", type(None)), ("bool", bool), ("int", int), ("float", float), ("str", str),
                      ("dict", dict), ("list", list)):
        if isinstance(value, cls):
            return kind
    return type(value).__name__


def accepted_kinds(annotation) -> tuple[str, ...]:
    """The YAML value kinds a field's annotation accepts, or () when it is not a plain union of
    them (then unchecked). An enum that also accepts str (SchedulerType | str) counts as str."""
    import enum
    import types
    import typing
    args = typing.get_args(annotation) if typing.get_origin(annotation) in (typing.Union, types.UnionType) else (annotation,)
    kinds = []
    for arg in args:
        base = typing.get_origin(arg) or arg
        simple = {type(None): "null", bool: "bool", int: "int", float: "float", str: "str", dict: "dict", list: "list"}
        if base in simple:
            kinds.append(simple[base])
        elif typing.get_origin(arg) is typing.Literal:
            kinds.extend(sorted({_kind(v) for v in typing.get_args(arg)}))
        elif isinstance(base, type) and issubclass(base, enum.Enum):
            continue   # its str values are accepted through the str member of the union
        else:
            return ()
    return tuple(dict.fromkeys(kinds)) if kinds else ()


def enum_choices(annotation) -> tuple[str, ...]:
    """The values of an enum member of the field's union (SchedulerType | str: the scheduler
    names TrainingArguments converts the str to), () when it has none."""
    import enum
    import typing
    for arg in typing.get_args(annotation):
        if isinstance(arg, type) and issubclass(arg, enum.Enum):
            return tuple(str(member.value) for member in arg)
    return ()


def generate_fields() -> dict:
    """{field: (annotation as text, accepted kinds, enum choices)} of the installed TRL's GRPOConfig."""
    import dataclasses
    import typing

    from trl import GRPOConfig
    hints = typing.get_type_hints(GRPOConfig)
    return {f.name: (_annotation_text(hints[f.name]), accepted_kinds(hints[f.name]), enum_choices(hints[f.name]))
            for f in dataclasses.fields(GRPOConfig) if f.init}


def _annotation_text(annotation) -> str:
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


def write_fields_module(path: Path) -> None:
    import trl
    import transformers
    lines = ['"""GRPOConfig\'s fields (TRL %s, transformers %s): name -> (annotation, accepted YAML kinds, enum values).' % (
        trl.__version__, transformers.__version__),
        "", "Generated by ``python -m grpolab.trainer.trl_passthrough``; tests/trainer/test_trl_passthrough.py compares it",
        'with the installed TRL. Data only: parsing an experiment reads it without importing TRL."""', "",
        "GRPO_CONFIG_FIELDS = {"]
    lines += [f"    {name!r}: {_wrapped(entry)}," for name, entry in sorted(generate_fields().items())]
    lines += ["}", "", "# transformers' reporting integrations (report_to names)", f"REPORT_TO_NAMES = {_wrapped(generate_report_to())}"]
    path.write_text("\n".join([*lines, ""]))


def _wrapped(entry) -> str:
    import pprint
    return pprint.pformat(entry, width=110).replace("\n", "\n    ")


def generate_report_to() -> tuple[str, ...]:
    from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK
    return tuple(sorted(INTEGRATION_TO_CALLBACK))


if __name__ == "__main__":
    write_fields_module(Path(__file__).with_name("grpo_config_fields.py"))
