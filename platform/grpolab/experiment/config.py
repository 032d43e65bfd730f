"""Experiment files -> one validated RunConfig: its sections and how a file is read into them.
Everything is checked before any model is loaded or any MLflow run exists (the combinations in
coherence.py, overrides in overrides.py); errors name the key and what is valid.

Detail: docs/runs.md, "grpolab.experiment.config".
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from grpolab.errors import ConfigError, did_you_mean
from grpolab.experiment.coherence import check_coherence, check_task_capacity
from grpolab.experiment.engines import GenerationCfg
from grpolab.experiment.overrides import apply_overrides
from grpolab.method.registry import METHODS, get_method
from grpolab.method.spec import MethodSpec, build_spec
from grpolab.tasks import TASK_NAMES as TASKS
from grpolab.tasks import spec_with_task_weights, task_of
from grpolab.tasks.benchmarks import resolve_benchmarks
from grpolab.validation import typed
from grpolab.yaml_input import read_yaml_mapping


@dataclass(frozen=True)
class ModelCfg:
    preset: str | None = "tiny"        # a built-in size preset (tiny ~0.1M, small ~2M, medium ~20M)
    path: str | None = None            # or a local Hugging Face model directory or .gguf file, or a hub id
                                       # org/name from the Hugging Face cache (hub.py); no warm start
    revision: str | None = None        # hub id only: branch, tag or commit (default main)
    lora: dict | None = None           # {r, alpha, target_modules, dropout}: train a peft LoRA adapter only
    sha256: str | None = None          # a local model.path's content digest (model_files.content_digest), checked
                                       # before the run: a shipped base model is one model on every machine


@dataclass(frozen=True)
class WarmStartCfg:
    enabled: bool = True               # SFT to the edge of competence before RL (presets only)
    band: tuple = (0.2, 0.6)           # target held-out pass@1 interval
    learning_rate: float = 3e-3
    max_steps: int = 4000
    check_every: int = 50
    seed: int = -1                     # warm-start seed; -1 = the run seed (set it to share one warm start)


@dataclass(frozen=True)
class TrainCfg:
    steps: int = 200                   # optimizer steps
    group_size: int = 8                # G completions per prompt
    prompts_per_rollout: int = 8       # prompts per generation batch
    minibatches: int = 1               # optimizer steps per pass over one rollout (> 1 reuses rollouts)
    num_iterations: int = 1            # passes over each rollout (mu; > 1 reuses rollouts)
    grad_accum: int = 1                # micro-batches per optimizer step
    learning_rate: float = 2e-4
    temperature: float = 1.0
    max_completion_length: int = 0     # 0: the task's own limit
    max_grad_norm: float = 1.0
    n_train_prompts: int = 4000        # at most this many (fewer if the task holds fewer); set explicitly,
                                       # the task must hold that many (checked at load time)
    save_every: int = -1               # steps between checkpoints (a multiple of minibatches x num_iterations);
                                       # -1: auto (~50, whole rollouts), 0: at the end only (checkpoints.py)
    keep_checkpoints: int = 2          # newest complete checkpoints kept per run
    dtype: str = "fp32"                # fp32 | bf16 | fp16 mixed precision (fp32 master weights; engines.py)
    gradient_checkpointing: bool = False
    cast_lm_head_to_fp32: bool = False # TRL's ScaleRL option: lm head and log-probs in fp32 under bf16/fp16
    trl: dict = field(default_factory=dict)   # any other GRPOConfig field, passed unchanged (trl_passthrough.py)
    max_empty_updates: int = 20        # update batches in a row without a policy gradient before the run fails (a cold start on a hard task may have a few)
                                       # (all rows masked, or every advantage 0); 0: never fail (warned once)

    @property
    def rollout_steps(self) -> int:
        """Optimizer steps that share one generated rollout (a checkpoint must not split it):
        minibatches x num_iterations."""
        return self.minibatches * self.num_iterations


@dataclass(frozen=True)
class EvalCfg:
    every: int = 50                    # optimizer steps between held-out evaluations (0: start and end only)
    prompts: int = 64
    k: int = 4                         # samples per prompt for pass@k
    final_prompts: int = 0             # prompts of the final evaluation (0: eval.prompts); the evaluations
                                       # before it use the first eval.prompts of them
    final_k: int = 0                   # samples per prompt of the final evaluation, avg@k (0: eval.k)
    seed: int = -1                     # held-out set's seed; -1: the run seed (each seed its own set);
                                       # >= 0: one fixed benchmark for every run (toy tasks; dataset tasks
                                       # keep their own held-out split)
    max_completion_length: int = 0     # 0: the run's training cap (train.max_completion_length or the task's);
                                       # resolved at load time, so the logged param is the cap used
    benchmarks: list[dict] = field(default_factory=list)   # named evaluation sets, each with its own source, size,
                                       # n and decoding, logged as eval/<name>/avg_at_n, pass_at_k, maj_at_n, sd_at_n
                                       # at every evaluation (tasks/benchmarks.py); [] : the held-out set only
    salvage: bool = False              # also continue each truncated held-out sample to twice the cap and log
                                       # the fraction that ends correct, length/truncated_salvageable (the regime
                                       # gate salvage_rate: truncation is noise); costs one more generation call
    param_change: bool = True          # log policy/param_change at each evaluation: keeps theta_0 of the trainable
                                       # parameters in host memory (their bytes: 14 GB for a 7B full fine-tune
                                       # in bf16, on rank 0); false: not kept, not logged, the run tag says so

    @property
    def final_prompt_count(self) -> int:
        """Prompts of the final held-out evaluation (eval.final_prompts, or eval.prompts when 0)."""
        return self.final_prompts or self.prompts


@dataclass(frozen=True)
class TrackingCfg:
    enabled: bool = True
    experiment: str = "grpolab"        # MLflow experiment name
    flush_every: int = 20              # optimizer steps between batched MLflow writes
    samples: int = 16                  # completions kept per logged rollout in the samples artifact
    system_metrics: bool = False       # MLflow system metrics (system/*: machine CPU, memory, disk, GPU); needs psutil
    figures: bool = False              # curves.png on the run (MLflow log_figure; ~1-5 s of matplotlib per run)
    log_model: bool = False            # the final model (or LoRA adapter) as the run's MLflow artifact "model/"
    report_to: list = field(default_factory=list)   # transformers' trackers beside the MLflow run (tensorboard, wandb, ...)


@dataclass(frozen=True)
class RunConfig:
    name: str
    method_name: str
    method_overrides: dict
    spec: MethodSpec
    task: dict
    model: ModelCfg
    warm_start: WarmStartCfg
    train: TrainCfg
    eval: EvalCfg
    tracking: TrackingCfg
    generation: GenerationCfg = GenerationCfg()
    seed: int = 0
    warnings: tuple = field(default=())

    def resolved(self) -> dict:
        """The fully resolved configuration, as logged to MLflow."""
        out = {k: v for k, v in dataclasses.asdict(self).items() if k not in ("spec", "warnings")}
        out["method"] = {"name": self.method_name, **self.spec.to_dict()}
        if not self.eval.benchmarks:   # as before benchmarks existed: a run folder's config.json still resumes
            out["eval"].pop("benchmarks")
        return out

    @property
    def reuses_rollouts(self) -> bool:
        return self.train.minibatches > 1 or self.train.num_iterations > 1


# training curves a run logs only under a setting: curve key -> (section, setting). A study refuses a
# claim, floor or gate that reads one from rows whose experiment turns the setting off.
CURVE_SETTINGS = {"length/truncated_salvageable": ("eval", "salvage"), "policy/param_change": ("eval", "param_change")}


def curve_turned_off(experiment: dict, key: str) -> str | None:
    """The setting (``eval.salvage``) under which ``experiment`` (a raw experiment mapping) would log
    training curve ``key`` but is off there; None when the curve is logged or needs no setting."""
    if key not in CURVE_SETTINGS:
        return None
    section, name = CURVE_SETTINGS[key]
    default = getattr(_SECTIONS[section](), name)
    return None if (experiment.get(section) or {}).get(name, default) else f"{section}.{name}"


_SECTIONS = {"model": ModelCfg, "warm_start": WarmStartCfg, "train": TrainCfg, "eval": EvalCfg, "tracking": TrackingCfg,
             "generation": GenerationCfg}
_TOP_KEYS = ("name", "seed", "method", "task", *_SECTIONS)


def _section(cls, data, prefix: str):
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix}: expected a mapping, got {type(data).__name__}")
    valid = {f.name: f for f in dataclasses.fields(cls)}
    values = {}
    for key, value in data.items():
        if key not in valid:
            raise ConfigError(f"{prefix}.{key}: unknown key{did_you_mean(key, valid)}; valid: {', '.join(valid)}")
        values[key] = typed(f"{prefix}.{key}", value, valid[key].type, valid[key].default)
    return cls(**values)


def _method(raw) -> tuple[str, dict, MethodSpec]:
    """(label, overrides, spec) from a method name or mapping."""
    if isinstance(raw, str):
        return raw, {}, get_method(raw).spec()
    if not isinstance(raw, dict):
        raise ConfigError(f"method: expected a method name or a mapping, got {raw!r}; registered: {', '.join(METHODS)}")
    raw = dict(raw)
    base, label = raw.pop("base", None), raw.pop("name", None)
    if base is not None:
        return label or base, raw, get_method(base).spec(raw)
    if label is None:
        raise ConfigError("method.name: a method defined from axis values needs a name (or give method.base)")
    if label in METHODS:
        raise ConfigError(f"method.name: {label!r} is a registered method; use method.base: {label} to override it")
    return label, raw, build_spec(raw)


def build_config(data: dict) -> RunConfig:
    if not isinstance(data, dict):
        raise ConfigError("experiment: expected a YAML mapping at the top level")
    unknown = set(data) - set(_TOP_KEYS)
    if unknown:
        raise ConfigError(f"{sorted(unknown)[0]}: unknown key{did_you_mean(sorted(unknown)[0], _TOP_KEYS)}; valid: {', '.join(_TOP_KEYS)}")
    for key in _SECTIONS:   # checked before the method's regime is merged into train
        if data.get(key) is not None and not isinstance(data[key], dict):
            raise ConfigError(f"{key}: expected a mapping of {key} settings, got {type(data[key]).__name__} {data[key]!r}")
    method_raw = data.get("method", "grpo")
    method_name, overrides, spec = _method(method_raw)
    base = get_method(method_raw.get("base")) if isinstance(method_raw, dict) and method_raw.get("base") else (
        METHODS.get(method_raw) if isinstance(method_raw, str) else None)
    train_raw = {**(base.regime if base else {}), **(data.get("train") or {})}
    model_raw = data.get("model")
    if isinstance(model_raw, dict) and "path" in model_raw and "preset" not in model_raw:
        model_raw = {**model_raw, "preset": None}  # a local model replaces the default preset
    raws = {**data, "train": train_raw, "model": model_raw}
    sections = {k: _section(cls, raws.get(k), k) for k, cls in _SECTIONS.items()}
    task_raw = {"name": "addition"} if data.get("task") is None else data["task"]
    if not isinstance(task_raw, dict) or "name" not in task_raw:
        raise ConfigError(f"task: expected a mapping with a name; valid names: {', '.join(TASKS)}")
    task_obj = task_of(task_raw)
    spec = spec_with_task_weights(spec, task_obj)   # task.rewards[].weight -> method.reward_weights
    seed = data.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2 ** 32:   # numpy's seed range
        raise ConfigError(f"seed: expected an integer from 0 to {2 ** 32 - 1}, got {seed!r}")
    name = data.get("name", method_name)
    if not isinstance(name, str) or not name:
        raise ConfigError(f"name: expected a non-empty string, got {name!r}")
    cfg = RunConfig(name=name, method_name=method_name, method_overrides=overrides, spec=spec,
                    task={"name": task_obj.name, **task_obj.params}, seed=seed, **sections)
    notes = check_coherence(cfg, task_obj)
    check_task_capacity(cfg, task_obj, explicit_train="n_train_prompts" in train_raw)
    if cfg.eval.max_completion_length == 0:  # evaluate at the cap the run trains with
        train_cap = cfg.train.max_completion_length or task_obj.max_completion_length
        cfg = dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, max_completion_length=train_cap))
    engine = (cfg.train.temperature, float(cfg.train.trl.get("top_p", 1.0))) if cfg.generation.backend == "vllm" else None
    benchmarks = resolve_benchmarks(cfg.eval.benchmarks, task_obj, cfg.eval.max_completion_length, engine)
    cfg = dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, benchmarks=benchmarks))
    for note in notes:
        warnings.warn(note, stacklevel=2)
    return dataclasses.replace(cfg, warnings=tuple(notes))


def load_experiment(path: str | Path, overrides: list[str] | None = None) -> RunConfig:
    path = Path(path)
    # an empty file is refused rather than run as the full default experiment
    data = read_yaml_mapping(path, "experiment file", "give at least method and task, e.g. experiments/smoke.yaml")
    data.setdefault("name", path.stem)
    return build_config(apply_overrides(data, overrides or []))
