"""Combinations a run configuration must satisfy, checked after its sections are parsed and
before any model is loaded: counts and ranges, the model source, the evaluation sets, the task's
capacity, and whether the chosen axis values fit the task and the batch layout. Each check raises
a ConfigError naming the key and what is valid; settings without effect come back as notes.

Detail: docs/runs.md, "grpolab.experiment.config"."""

from __future__ import annotations

from grpolab.envs.episode_task import check_episode_config
from grpolab.errors import ConfigError, did_you_mean
from grpolab.experiment.engines import check_engines
from grpolab.experiment.model_files import check_model_digest
from grpolab.experiment.pretrained import PRETRAINED, check_model_path, preset_file
from grpolab.method.advantages import ADVANTAGES
from grpolab.method.requirements import inert_notes
from grpolab.method.sampling_modes import SAMPLING_MODES
from grpolab.method.surrogates import CLIP, SURROGATES
from grpolab.planning import unmet_here
from grpolab.trainer.trl_passthrough import check_report_to, check_trl_settings
from grpolab.world.models import PRESETS
from grpolab.world.generated import TASKS as GENERATED_TASKS


def check_tracking_settings(tracking) -> None:
    """The optional tracking extras need packages grpolab does not require: say so before a run
    starts rather than fail (or silently record nothing) at its end."""
    import importlib.util
    for key, package in (("system_metrics", "psutil"), ("figures", "matplotlib")):
        if getattr(tracking, key) and importlib.util.find_spec(package) is None:
            unmet_here(f"tracking.{key}: true needs the {package} package, which is not installed "
                       f"(pip install {package}), or set tracking.{key}: false")


def _positive(key: str, value, minimum=1) -> None:
    if value < minimum:
        raise ConfigError(f"{key}: must be >= {minimum}, got {value}")


def check_coherence(cfg, task) -> list[str]:
    """Reject incoherent combinations of a RunConfig's settings for ``task``; return notes for
    settings without effect. The checks run in a fixed order, so a file with several problems is
    always refused for the same first one."""
    check_tracking_settings(cfg.tracking)
    check_report_to(cfg.tracking.report_to)
    check_trl_settings(cfg.train.trl)
    _check_train_counts(cfg.train, cfg.spec)
    _check_model_source(cfg)
    _check_evaluation(cfg, task)
    _check_method_fits(cfg, task)
    check_save_settings(cfg.train)
    check_episode_config(cfg, task)   # multi-turn environment tasks and GiGPO's step term (grpolab.envs)
    notes = check_engines(cfg)
    notes += inert_notes(cfg)   # each axis value declares one requirement (method/requirements.py); unmet: inert, warned once
    return notes


def _check_train_counts(t, s) -> None:
    """train.*: counts, rates and the rollout's split into micro-batches."""
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


def _check_model_source(cfg) -> None:
    """model.*: exactly one source (a preset or a path), its pins, and the warm start it allows."""
    m = cfg.model
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


def _check_evaluation(cfg, task) -> None:
    """eval.*: how often, how many prompts and samples, and the final evaluation's set."""
    _positive("eval.every", cfg.eval.every, 0)
    _positive("eval.prompts", cfg.eval.prompts)
    _positive("eval.k", cfg.eval.k)
    check_final_eval(cfg.eval, task)
    if cfg.eval.max_completion_length < 0:
        raise ConfigError(f"eval.max_completion_length: must be >= 0 (0 = the training cap), got {cfg.eval.max_completion_length}")


def _check_method_fits(cfg, task) -> None:
    """The axis values' declared needs (entry flags), met by the task and the batch layout."""
    t, s = cfg.train, cfg.spec
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


def _no_warm_start_settings(ws) -> None:
    """A model.path run starts from that model: a warm start setting would be silently inert."""
    defaults = type(ws)()
    changed = [f"warm_start.{k}" for k in ("band", "learning_rate", "max_steps", "check_every", "seed")
               if _comparable(getattr(ws, k)) != _comparable(getattr(defaults, k))]
    if changed:
        raise ConfigError(f"{', '.join(changed)}: a run from model.path starts from that model and has no warm start "
                          "(presets only); remove the setting, or train from model.preset")


def _comparable(value):
    return tuple(value) if isinstance(value, (list, tuple)) else value


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


def check_task_capacity(cfg, task, explicit_train: bool) -> None:
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
    wanted, key = cfg.eval.final_prompt_count, "eval.final_prompts" if cfg.eval.final_prompts else "eval.prompts"
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


def check_save_settings(train) -> None:
    """Checkpoints only at rollout boundaries (checkpoints.py), keep at least one. Here, not in
    checkpoints.py, so that validating a config (a study's coordinator) does not import torch."""
    per = train.rollout_steps
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
