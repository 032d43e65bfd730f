"""Experiment files -> one validated RunConfig. Everything is checked here, before any model
is loaded or any MLflow run exists; errors name the key and what is valid.

Detail: docs/runs.md, "grpolab.experiment.config".
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from grpolab.envs.episode_task import check_episode_config
from grpolab.errors import ConfigError, did_you_mean
from grpolab.planning import unmet_here
from grpolab.experiment.engines import GenerationCfg, check_engines
from grpolab.experiment.model_files import check_model_digest
from grpolab.experiment.pretrained import PRETRAINED, check_model_path, preset_file
from grpolab.method.advantages import ADVANTAGES
from grpolab.method.registry import METHODS, get_method
from grpolab.method.requirements import inert_notes
from grpolab.method.sampling_modes import SAMPLING_MODES
from grpolab.method.spec import MethodSpec, build_spec
from grpolab.method.surrogates import CLIP, SURROGATES
from grpolab.tasks import TASK_NAMES as TASKS
from grpolab.tasks import spec_with_task_weights, task_of
from grpolab.tasks.benchmarks import resolve_benchmarks
from grpolab.trainer.trl_passthrough import check_report_to, check_trl_settings
from grpolab.validation import typed
from grpolab.world.models import PRESETS
from grpolab.world.generated import TASKS as GENERATED_TASKS
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


def check_tracking_settings(tracking) -> None:
    """The optional tracking extras need packages grpolab does not require: say so before a run
    starts rather than fail (or silently record nothing) at its end."""
    import importlib.util
    for key, package in (("system_metrics", "psutil"), ("figures", "matplotlib")):
        if getattr(tracking, key) and importlib.util.find_spec(package) is None:
            unmet_here(f"tracking.{key}: true needs the {package} package, which is not installed "
                       f"(pip install {package}), or set tracking.{key}: false")


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


def _positive(key: str, value, minimum=1) -> None:
    if value < minimum:
        raise ConfigError(f"{key}: must be >= {minimum}, got {value}")


def check_coherence(cfg: RunConfig, task) -> list[str]:
    """Reject incoherent combinations; return warnings for settings without effect."""
    t, s, m = cfg.train, cfg.spec, cfg.model
    check_tracking_settings(cfg.tracking)
    check_report_to(cfg.tracking.report_to)
    check_trl_settings(t.trl)
    for key in ("steps", "prompts_per_rollout", "minibatches", "num_iterations", "grad_accum", "n_train_prompts"):
        _positive(f"train.{key}", getattr(t, key))
    _positive("train.group_size", t.group_size, 2)
    if t.learning_rate <= 0 or t.temperature <= 0:
        raise ConfigError("train.learning_rate and train.temperature must be > 0")
    if t.max_completion_length < 0:
        raise ConfigError(f"train.max_completion_length: must be >= 0 (0 = task default), got {t.max_completion_length}")
    if t.max_empty_updates < 0:
        raise ConfigError(f"train.max_empty_updates: must be >= 0 (0 = never fail), got {t.max_empty_updates}")
    if SAMPLING_MODES[s.sampling].retains and s.gfpo_keep >= t.group_size:
        raise ConfigError(f"method.gfpo_keep={s.gfpo_keep}: GFPO retains fewer completions than it samples; set "
                          f"method.gfpo_keep < train.group_size ({t.group_size})")
    rollout = t.prompts_per_rollout * t.group_size
    if rollout % (t.minibatches * t.grad_accum):
        raise ConfigError(f"train: prompts_per_rollout x group_size = {rollout} completions must split evenly into "
                          f"minibatches x grad_accum = {t.minibatches * t.grad_accum} micro-batches")
    if (m.preset is None) == (m.path is None):
        raise ConfigError(f"model: give exactly one of model.preset ({', '.join([*PRESETS, *PRETRAINED])}) or model.path")
    if m.preset is not None and m.preset not in PRESETS and m.preset not in PRETRAINED:
        raise ConfigError(f"model.preset: unknown preset {m.preset!r}{did_you_mean(m.preset, [*PRESETS, *PRETRAINED])}; valid: {', '.join([*PRESETS, *PRETRAINED])}")
    if m.path is not None:
        hub = check_model_path(m.path, m.revision)   # a local Hugging Face directory, a .gguf file or a cached hub id
        if m.sha256 is not None and hub is not None:
            raise ConfigError(f"model.sha256: only for a local model.path; pin the hub id {m.path!r} with "
                              "model.revision: <commit>")
        if m.sha256 is not None:
            check_model_digest(m.path, m.sha256)
        _no_warm_start_settings(cfg.warm_start)
    elif m.sha256 is not None:
        raise ConfigError("model.sha256: only with model.path (the digest of a local model folder or file)")
    if m.path is None and m.revision is not None:
        raise ConfigError("model.revision: only with model.path naming a hub id (org/name)")
    if m.preset in PRETRAINED:
        try:
            preset_file(m.preset)      # the pip package that ships its weights is installed
        except ConfigError as exc:
            unmet_here(str(exc))       # a need of the machine that runs it (planning records it)
    low, high = cfg.warm_start.band
    if not 0 <= low < high <= 1:
        raise ConfigError(f"warm_start.band: need 0 <= low < high <= 1, got {list(cfg.warm_start.band)}")
    _positive("eval.every", cfg.eval.every, 0)
    _positive("eval.prompts", cfg.eval.prompts)
    _positive("eval.k", cfg.eval.k)
    check_final_eval(cfg.eval, task)
    if cfg.eval.max_completion_length < 0:
        raise ConfigError(f"eval.max_completion_length: must be >= 0 (0 = the training cap), got {cfg.eval.max_completion_length}")
    n_rewards = len(task.reward_names)
    estimator = ADVANTAGES[s.advantage]
    if estimator.components and n_rewards < 2:
        raise ConfigError(f"method.advantage={s.advantage} normalises reward components separately, but task "
                          f"{cfg.task['name']!r} has {n_rewards} component; use e.g. task.name=addition_format")
    surrogate = SURROGATES[s.surrogate]
    if surrogate.pairwise and (t.minibatches > 1 or t.grad_accum > 1):
        raise ConfigError(f"method.surrogate={s.surrogate} pairs completions within a group, so the whole rollout "
                          "must be one micro-batch: set train.minibatches=1 and train.grad_accum=1")
    unbounded = reward_range_problem(s, task) if estimator.bounded else None
    if unbounded:
        raise ConfigError(f"method.advantage={s.advantage} needs rewards in [0, 1] ({estimator.bounded}); {unbounded}")
    if surrogate.on_policy_only and cfg.reuses_rollouts:
        raise ConfigError(f"method.surrogate={s.surrogate} {surrogate.on_policy_only}, so it is only valid on-policy: "
                          f"set train.minibatches=1 and train.num_iterations=1, or use surrogate={CLIP}")
    max_len = t.max_completion_length or task.max_completion_length
    if s.soft_overlong and s.overlong_buffer >= max_len:
        raise ConfigError(f"method.overlong_buffer ({s.overlong_buffer}) must be smaller than the completion cap ({max_len})")
    check_save_settings(t)
    check_episode_config(cfg, task)   # multi-turn environment tasks and GiGPO's step term (grpolab.envs)
    notes = check_engines(cfg)
    notes += inert_notes(cfg)   # each axis value declares one requirement (method/requirements.py); unmet: inert, warned once
    return notes


def _no_warm_start_settings(ws: WarmStartCfg) -> None:
    """A model.path run starts from that model: a warm start setting would be silently inert."""
    defaults = WarmStartCfg()
    changed = [f"warm_start.{k}" for k in ("band", "learning_rate", "max_steps", "check_every", "seed")
               if _comparable(getattr(ws, k)) != _comparable(getattr(defaults, k))]
    if changed:
        raise ConfigError(f"{', '.join(changed)}: a run from model.path starts from that model and has no warm start "
                          "(presets only); remove the setting, or train from model.preset")


def _comparable(value):
    return tuple(value) if isinstance(value, (list, tuple)) else value


def final_prompts(ev) -> int:
    """Prompts of the final held-out evaluation (eval.final_prompts, or eval.prompts when 0)."""
    return ev.final_prompts or ev.prompts


def check_final_eval(ev, task) -> None:
    """The final evaluation's set holds the intermediate one (its first eval.prompts prompts); a fixed
    held-out seed needs a task whose eval stream is seeded apart from its train stream (toy tasks)."""
    if ev.final_prompts < 0 or ev.final_k < 0:
        raise ConfigError(f"eval.final_prompts and eval.final_k: must be >= 0 (0 = eval.prompts / eval.k), "
                          f"got {ev.final_prompts} and {ev.final_k}")
    if ev.final_prompts and ev.final_prompts < ev.prompts:
        raise ConfigError(f"eval.final_prompts ({ev.final_prompts}) must be >= eval.prompts ({ev.prompts}): "
                          "the evaluations before the final one use a subset of its prompts")
    if ev.seed < -1:
        raise ConfigError(f"eval.seed: must be >= 0, or -1 (the run seed), got {ev.seed}")
    if ev.seed >= 0 and not task.fixed_held_out:
        raise ConfigError(f"eval.seed: task {task.name!r} keeps its own held-out split; a fixed eval.seed is for "
                          f"the generated tasks ({', '.join(GENERATED_TASKS)}); leave it at -1")


def check_task_capacity(cfg: RunConfig, task, explicit_train: bool) -> None:
    """The task holds as many distinct held-out prompts as ``eval.prompts`` asks (and, when the
    experiment sets it, as many training prompts as ``train.n_train_prompts``): drawn now, with the
    run's seed, exactly as the run will draw them. A small space (1-digit sums) or a small
    dataset would otherwise give fewer, and the run would be measured on fewer than asked. The
    default ``n_train_prompts`` is a cap, not a request. A dataset not readable yet (a hub
    dataset downloaded at run start) is checked when it is read."""
    source = getattr(task, "source", task)
    if not getattr(source, "loaded", True):
        return
    n_train = cfg.train.n_train_prompts if explicit_train else 0
    fixed = {"held_out_seed": cfg.eval.seed} if cfg.eval.seed >= 0 else {}   # as runner.run_splits draws them
    wanted, key = final_prompts(cfg.eval), "eval.final_prompts" if cfg.eval.final_prompts else "eval.prompts"
    train, held_out = task.splits(cfg.seed, n_train, wanted, **fixed)
    what = f"task {cfg.task['name']!r}" + (f" ({cfg.task.get('path')})" if cfg.task.get("path") else "")
    if len(held_out) < wanted:
        raise ConfigError(f"{key}: {what} holds at most {len(held_out)} distinct held-out prompts, "
                          f"got {wanted}; valid: 1 to {len(held_out)}")
    if len(train) < n_train:
        raise ConfigError(f"train.n_train_prompts: {what} holds at most {len(train)} distinct training prompts "
                          f"besides the held-out ones, got {n_train}; valid: 1 to {len(train)}")


def reward_range_problem(spec, task) -> str | None:
    """Why the run's total reward r = sum_k w_k r_k can leave [0, 1] (None: it cannot, as far as
    grpolab can tell: the built-in components correctness and format lie in [0, 1]; a user reward
    function's range is its author's to keep)."""
    if spec.soft_overlong:
        return "soft_overlong adds negative rewards"
    if "length" in [r.name for r in getattr(task, "rewards", ())]:
        return f"task {task.name!r} has the reward 'length', which is negative"
    weights = spec.reward_weights or (1.0,) * len(task.reward_names)
    if min(weights) < 0 or sum(weights) > 1:
        return (f"task {task.name!r}'s reward weights {list(weights)} (reward components "
                f"{', '.join(task.reward_names)}) give totals outside [0, 1]; give weights >= 0 summing to at most 1")
    return None


def rollout_steps(train) -> int:
    """Optimizer steps that share one generated rollout (a checkpoint must not split it)."""
    return train.minibatches * train.num_iterations


def check_save_settings(train) -> None:
    """Checkpoints only at rollout boundaries (checkpoints.py), keep at least one. Here, not in
    checkpoints.py, so that validating a config (a study's coordinator) does not import torch."""
    per = rollout_steps(train)
    if train.steps % per:   # one log window per rollout: a partial last rollout would never be logged
        raise ConfigError(f"train.steps: must be a multiple of minibatches x num_iterations = {per} (every curve "
                          f"is logged once per rollout, after its {per} update step(s)), got {train.steps}")
    if train.save_every > 0 and train.save_every % per:
        raise ConfigError(f"train.save_every: must be a multiple of minibatches x num_iterations = {per} "
                          f"(a checkpoint cannot split a rollout), got {train.save_every}; or 0 (end only), -1 (auto)")
    if train.save_every < -1:
        raise ConfigError(f"train.save_every: must be >= 0, or -1 (auto), got {train.save_every}")
    if train.keep_checkpoints < 1:
        raise ConfigError(f"train.keep_checkpoints: must be >= 1, got {train.keep_checkpoints}")


def override_string(key: str, value) -> str:
    """``key=value`` as the command line writes it, the value in YAML flow style on one line
    (no folding of long values, no document-end marker), so ``parse_override`` reads ``value`` back."""
    return f"{key}={yaml.safe_dump(value, default_flow_style=True, width=math.inf).strip().removesuffix(chr(10) + '...')}"


def as_overrides(values: dict) -> list[str]:
    """``{dotted key: value}`` -> override strings (``override_string``)."""
    return [override_string(k, v) for k, v in values.items()]


def parse_override(text: str) -> tuple[list[str], object]:
    if "=" not in text:
        raise ConfigError(f"override {text!r}: expected key.path=value, e.g. train.steps=50")
    key, value = text.split("=", 1)
    return key.strip().split("."), override_value(text, value)


PLAIN_VALUES = "a plain value: a number, text, true/false, null, [a, list] or {a: mapping}"


def override_value(text: str, value: str):
    """The YAML value of one ``key=value`` override, read with the safe loader only; a YAML tag
    (``!!python/object``, ``!!str``, ``!custom``) is refused before anything is constructed, so
    an override can only ever be plain data."""
    try:
        if any(isinstance(token, yaml.TagToken) for token in yaml.scan(value, Loader=yaml.SafeLoader)):
            raise ConfigError(f"override {text!r}: YAML tags (!...) are not accepted; give {PLAIN_VALUES}")
        return yaml.safe_load(value)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"override {text!r}: not a valid YAML value ({problem}); give {PLAIN_VALUES}") from None


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    data = yaml.safe_load(yaml.safe_dump(data)) or {}
    for text in overrides:
        path, value = parse_override(text)
        node = data
        for part in path[:-1]:
            if isinstance(node.get(part), str) and part == "method":
                node[part] = {"base": node[part]}
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {text!r}: {part} is not a mapping")
        node[path[-1]] = value
    return data


def load_experiment(path: str | Path, overrides: list[str] | None = None) -> RunConfig:
    path = Path(path)
    # an empty file is refused rather than run as the full default experiment
    data = read_yaml_mapping(path, "experiment file", "give at least method and task, e.g. experiments/smoke.yaml")
    data.setdefault("name", path.stem)
    return build_config(apply_overrides(data, overrides or []))
