"""The training checks of ``grpolab doctor --gpu`` (bench/gpu_check.py runs them): what a GPU
machine must do with transformers alone, vLLM or not.

- ``train_method``: one registered method, 2 optimizer steps on the tiny preset in bf16, as the
  contract suite trains it (``method_config``: the same task, regime and per-method settings);
- ``micro_ladder_file``: a 2-rung x 2-seed ladder (GRPO, then + clip-higher) in bf16, with
  transformers generation or vLLM colocate;
- ``timing``: stock TRL ``GRPOTrainer`` against ``GrpoLabTrainer`` (bench/suite.py's
  alternation) on a model of realistic shape: ``SHAPES["qwen2.5-0.5b"]`` is Qwen2.5-0.5B's body
  (hidden 896, 24 layers, 14 query / 2 key-value heads, MLP 4864; about 358 M parameters) with
  random weights and the character vocabulary, 64 completions of exactly 128 tokens a step
  (EOS is held back until then: a random model would stop at random lengths).
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Shape:
    """A Llama body: sizes, and the completion length each timed step generates."""
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    mlp: int
    completion_tokens: int
    fixed_length: bool = True   # hold EOS back so every completion has completion_tokens tokens


SHAPES = {"qwen2.5-0.5b": Shape(896, 24, 14, 2, 4864, 128),
          # heads of 64 as vLLM's FlashAttention needs; what tests run on a CPU
          "tiny-64": Shape(128, 2, 2, 2, 256, 8, fixed_length=False)}

# tasks the contract suite gives the methods that need more than a coin's reward
TASK_FOR = {"gdpo": {"name": "addition_format"}, "gigpo": {"name": "gridworld"}, "tir_otb": {"name": "gridworld"}}


def method_config(key: str):
    """2 optimizer steps of ``key`` on the tiny preset in bf16, tracking off, with the settings
    the contract suite (tests/method/test_contract.py) gives it so that its mechanism acts at toy scale."""
    from grpolab.experiment.config import build_config
    from grpolab.method.registry import METHODS
    task = TASK_FOR.get(key, {"name": "random_reward"})
    train = {"steps": 2, "group_size": 4, "prompts_per_rollout": 8 if key == "spo" else 4, "learning_rate": 0.001,
             "dtype": "bf16", **METHODS[key].regime}
    method = {"clip_cov": {"base": key, "cov_low": -1.0, "cov_fraction": 0.05},
              "dapo": {"base": key, "sampling_filter": "reward"},     # a coin's reward: filter on what varies
              "clip_dapo": {"base": key, "sampling_filter": "reward"},
              "top_entropy_80_20": {"base": key, "sampling_filter": "reward"},
              "intellect2": {"base": key, "dual_clip_c": 1.02},
              "vapo": {"base": key, "critic_warmup": 1}}.get(key, key)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return build_config({"name": f"doctor-{key}", "method": method, "task": task, "model": {"preset": "tiny"},
                             "warm_start": {"enabled": task["name"] != "random_reward"}, "train": train,
                             "eval": {"every": 0, "prompts": 4, "k": 1}, "tracking": {"enabled": False}})


def runnable_methods() -> list[str]:
    from grpolab.method.registry import METHODS
    return [key for key, method in METHODS.items() if not method.missing]


def train_method(key: str, state: Path, use_cpu: bool = False) -> dict:
    """Train ``method_config(key)``; ok when both steps ran with finite losses on a CUDA device
    (``use_cpu``: the CPU stand-in of a faked GPU, which only tests ask for)."""
    from transformers import TrainerCallback

    from grpolab.experiment.runner import run_experiment

    class Seen(TrainerCallback):
        def __init__(self):
            self.losses, self.device = [], None

        def on_train_begin(self, args, state, control, model=None, **kw):
            self.device = str(next(model.parameters()).device)

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "loss" in logs:
                self.losses.append(logs["loss"])

    seen = Seen()
    result = run_experiment(method_config(key), state, callbacks=[seen])
    if result.steps != 2 or not seen.losses or not all(math.isfinite(x) for x in seen.losses):
        raise RuntimeError(f"trained {result.steps} of 2 steps, losses {seen.losses} (want 2 steps, finite losses)")
    if not use_cpu and not str(seen.device).startswith("cuda"):
        raise RuntimeError(f"the model trained on {seen.device}, not on a CUDA device (a GPU check must train on the GPU)")
    return {"steps": result.steps, "loss": seen.losses[-1], "device": seen.device}


def micro_ladder_file(folder: Path, model: dict, steps: int, backend: str = "transformers") -> Path:
    """The ladder's study file: ``backend`` transformers (``model.generate``) or vllm (colocate)."""
    import yaml
    row = {"method": {"base": "grpo"}, "task": {"name": "addition", "digits": 2}, "model": model,
           "warm_start": {"enabled": False},
           "train": {"steps": steps, "group_size": 4, "prompts_per_rollout": 4, "dtype": "bf16", "save_every": 0},
           "eval": {"every": steps, "prompts": 8, "k": 2}, "tracking": {"experiment": "grpolab-doctor"}}
    if backend == "vllm":
        row["generation"] = {"backend": "vllm", "mode": "colocate"}
    # a name of its own each time: a second check runs its rows again rather than finding them done
    name = f"doctor_{backend}_ladder_{time.strftime('%Y%m%d_%H%M%S')}_{folder.name[-6:]}"
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"kind": "ladder", "name": name, "base": row, "seeds": [0, 1],
                                    "rungs": [{"name": "grpo"},
                                              {"name": "+ clip-higher", "changes": {"method.eps_high": 0.28}}]}))
    return path


def micro_ladder(folder: Path, state: Path, model: dict, steps: int, backend: str = "transformers") -> dict:
    """Run the ladder as ``grpolab study`` runs it (its MLflow runs land in ``state``)."""
    from grpolab.studies.coordinator import run_study
    from grpolab.studies.study_run import StudyRun
    lines: list[str] = []
    path = micro_ladder_file(folder, model, steps, backend)
    code = run_study(StudyRun.of(path, state, workers=1, retry_failed=True, echo=lines.append))
    if code != 0:
        raise RuntimeError(f"the {backend} micro-ladder exited {code}: " + " | ".join(lines[-5:]))
    rows = completed_rows(path, state)
    if rows != LADDER_ROWS:
        raise RuntimeError(f"the {backend} micro-ladder completed {rows} of its {LADDER_ROWS} rows (2 rungs x 2 seeds)")
    return {"study": str(path), "generation": backend, "rows": rows, "steps_per_row": steps, "lines": lines[-3:]}


LADDER_ROWS = 4   # micro_ladder_file: 2 rungs x 2 seeds


def completed_rows(path: Path, state: Path) -> int:
    """The study's rows that completed, as its Optuna storage in ``state`` records them."""
    from optuna.trial import TrialState

    from grpolab.studies.definition import load_study
    from grpolab.studies.storage import default_storage, load_existing
    study = load_existing(load_study(str(path)), default_storage(state))
    return 0 if study is None else len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))


def shape_config(shape: Shape, vocab_size: int):
    """The LlamaConfig of ``shape`` (untied embeddings, 512 positions)."""
    from grpolab.world.models import preset_config
    config = preset_config("tiny", vocab_size, max_positions=512)
    config.hidden_size, config.num_hidden_layers, config.intermediate_size = shape.hidden, shape.layers, shape.mlp
    config.num_attention_heads, config.num_key_value_heads = shape.heads, shape.kv_heads
    config.head_dim = shape.hidden // shape.heads
    return config


def shape_model(folder: Path, shape: Shape) -> Path:
    """A random Llama of ``shape`` on the character vocabulary, saved under ``folder``."""
    import torch
    from transformers import AutoModelForCausalLM
    from grpolab.world.models import save_model
    from grpolab.world.tokenizer import build_char_tokenizer
    tokenizer = build_char_tokenizer()
    config = shape_config(shape, len(tokenizer))
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config.pad_token_id, model.generation_config.eos_token_id = tokenizer.pad_token_id, tokenizer.eos_token_id
    return save_model(model, tokenizer, folder / f"model-{shape.hidden}x{shape.layers}")


def timing(folder: Path, shape_name: str, steps: int, repeats: int, use_cpu: bool, vllm: bool = False) -> dict:
    """Seconds per optimizer step of stock TRL and grpolab, bf16, 64 completions a step, on
    ``SHAPES[shape_name]``; ``vllm``: both generate with vLLM colocate."""
    from grpolab.bench.suite import BothTrainers, bench_trainer
    shape = SHAPES[shape_name]
    extra: dict = {"max_completion_length": shape.completion_tokens}
    if shape.fixed_length:
        extra["generation_kwargs"] = {"min_tokens" if vllm else "min_new_tokens": shape.completion_tokens}
    if vllm:
        extra.update(use_vllm=True, vllm_mode="colocate", vllm_gpu_memory_utilization=0.3, vllm_enable_sleep_mode=False)
    out = bench_trainer(shape_name, steps, repeats, precisions=("bf16",), dropin=False,
                        both=BothTrainers(use_cpu, extra, shape_model(folder, shape)))
    return {"shape": vars(shape), "completions_per_step": 64, "generation": "vllm" if vllm else "transformers", **out}
