"""What ``GrpoLabTrainer(method=..., correctness=...)`` decides before TRL builds anything.

Pure checks on the user's arguments, no model loaded: which update rule (without ``method=``, the
GRPOConfig's own, read field by field through ``trl_fields.TRL_FIELDS``; else a registered name, a
dict of axis overrides on one, or a ``MethodSpec``, with the GRPOConfig fields the user set away from
their defaults as axis overrides), which ``GRPOConfig`` settings that method decides
(``trl_settings``), the warnings that announce both, and where per-completion correctness comes
from. ``grpo_trainer.py`` calls these first thing in its constructor.

Detail: docs/runs.md, "grpolab.trainer.dropin".
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import inspect
import math
from typing import NamedTuple

from grpolab.envs.episode_task import EpisodeTask, check_episode_method
from grpolab.method.requirements import filters_groups
from grpolab.errors import GrpoLabWarning, warn_at_caller
from grpolab.method.registry import METHODS
from grpolab.method.episode_norms import EPISODE_NORMS
from grpolab.method.sampling_modes import SAMPLING_MODES
from grpolab.method.sampling_options import REWARD, SAMPLING_FILTERS
from grpolab.method.sampler_corrections import SAMPLER_CORRECTIONS, trl_sampler_correction
from grpolab.method.spec import SPEC_FIELDS, MethodSpec, with_reward_weights
from grpolab.tracking.naming import method_label, method_tags
from grpolab.trainer.trl_fields import check_refused, override_from_trl, spec_from_trl
from grpolab.trainer.trl_settings import apply_method_settings


class _FromConfig:
    """``method=``'s default: no grpolab method, train what the GRPOConfig says (``spec_from_trl``)."""

    def __repr__(self) -> str:
        return "None"


FROM_CONFIG = _FromConfig()
_REUSE_KEYS = ("minibatches", "num_iterations")   # method regime entries the drop-in applies to GRPOConfig


class ResolvedMethod(NamedTuple):
    name: str            # the registered base name ("custom" for a MethodSpec)
    spec: MethodSpec
    regime: dict         # its rollout-reuse entries the drop-in applies to GRPOConfig


def check_sampler_correction(args) -> None:
    """TRL's vLLM sampler correction must be one of the registry's entries (method/sampler_corrections.py)."""
    if args.use_vllm and trl_sampler_correction(args.vllm_importance_sampling_correction,
                                                args.vllm_importance_sampling_mode) is None:
        valid = [c.trl_mode for c in SAMPLER_CORRECTIONS.values() if c.trl_mode]
        raise ValueError(f"GRPOConfig.vllm_importance_sampling_mode={args.vllm_importance_sampling_mode!r}: not a "
                         f"TRL 1.16 mode; valid: {', '.join(valid)}")


def resolve_method(method) -> ResolvedMethod:
    """``method=`` -> its base name, spec and rollout-reuse regime. A ``MethodSpec`` carries axes only
    (no regime); a name or ``{"name": ..., **axis overrides}`` brings its method's regime."""
    if isinstance(method, MethodSpec):
        return ResolvedMethod("custom", method, {})
    if isinstance(method, str):
        name, overrides = method, {}
    elif isinstance(method, dict):
        if "name" not in method:
            raise ValueError(f"method: a dict needs 'name' (a registered method) plus axis overrides; got keys "
                             f"{sorted(method)}")
        name, overrides = method["name"], {k: v for k, v in method.items() if k != "name"}
    else:
        raise ValueError(f"method: expected a registered name, a dict or a MethodSpec, got {type(method).__name__}")
    if name not in METHODS:
        close = difflib.get_close_matches(str(name), list(METHODS), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"method: unknown method {name!r}{hint}; known: {', '.join(METHODS)}")
    unknown = [k for k in overrides if k not in SPEC_FIELDS]
    if unknown:
        raise ValueError(f"method: {', '.join(map(repr, unknown))} is not an axis; valid axes: {', '.join(SPEC_FIELDS)}")
    spec = METHODS[name].spec(overrides)
    regime = {k: v for k, v in METHODS[name].regime.items() if k in _REUSE_KEYS}
    return ResolvedMethod(name, spec, regime)


def dropin_signature(trl_init) -> inspect.Signature:
    """GRPOTrainer.__init__'s parameters plus keyword-only ``method`` (None: the GRPOConfig's own
    algorithm) and ``correctness``: what ``inspect.signature(GrpoLabTrainer)`` and IDEs show."""
    sig = inspect.signature(trl_init)
    extra = [inspect.Parameter("method", inspect.Parameter.KEYWORD_ONLY, default=None),
             inspect.Parameter("correctness", inspect.Parameter.KEYWORD_ONLY, default=None)]
    return sig.replace(parameters=[*sig.parameters.values(), *extra])


@dataclasses.dataclass(frozen=True)
class DropinOptions:
    """grpolab's own keywords of ``GrpoLabTrainer`` (every other keyword is TRL's)."""
    method: object = None
    correctness: object = None
    max_empty_updates: int = 20
    answer_extractor: object = None


def pop_options(trl_kwargs: dict) -> DropinOptions:
    """grpolab's keywords taken out of the trainer's keywords, which are then TRL's alone."""
    options = DropinOptions(**{k: trl_kwargs.pop(k) for k in (f.name for f in dataclasses.fields(DropinOptions))
                               if k in trl_kwargs})
    limit = options.max_empty_updates
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValueError(f"max_empty_updates: expected an int >= 0 (0 = never fail), got {limit!r}")
    return options


class HeldBack(NamedTuple):
    """The reward functions TRL's __init__ is given, and grpolab's own added after it (``late``)."""
    funcs: list
    late: list


def hold_back_own_rewards(funcs: list, n_user: int, args, trl_kwargs: dict) -> HeldBack:
    """grpolab's own reward functions (DAPO's ``overlong``) come after the user's ``n_user``. TRL's
    "No reward source provided" check must see only the user's: without any, grpolab's are added
    after TRL's __init__ (``add_late_rewards``, behind an environment's own ``get_reward``, if it has
    one), so a run with no reward source raises as in TRL."""
    late = funcs[n_user:] if n_user == 0 else []
    if late:
        funcs = funcs[:n_user]
        if args.reward_weights is not None:
            args.reward_weights = args.reward_weights[:n_user]
        if isinstance(trl_kwargs.get("reward_processing_classes"), list):
            trl_kwargs["reward_processing_classes"] = trl_kwargs["reward_processing_classes"][:n_user]
    return HeldBack(funcs, late)


def add_late_rewards(trainer, late: list) -> list[int]:
    """``late`` reward functions appended to a built trainer's (TRL's public reward lists, weight 1);
    their columns."""
    import torch
    first = len(trainer.reward_funcs)
    for func in late:
        trainer.reward_funcs.append(func)
        trainer.reward_func_names.append(reward_func_names([func])[0])
        trainer.reward_processing_classes.append(None)
    added = torch.ones(len(late), device=trainer.reward_weights.device, dtype=trainer.reward_weights.dtype)
    trainer.reward_weights = torch.cat([trainer.reward_weights, added])
    return list(range(first, len(trainer.reward_funcs)))


@dataclasses.dataclass
class DropIn:
    """What ``prepare`` decided: the trainer's own GRPOConfig (a copy) and reward functions."""
    method_name: str
    spec: MethodSpec
    args: object
    reward_funcs: list
    correct_kind: str
    correct_key: object


def prepare(model, reward_funcs, args, train_dataset, method, correctness, trl_kwargs: dict) -> DropIn:
    """Everything ``GrpoLabTrainer`` decides before TRL builds anything: the method, a deep copy
    of ``args`` (``dataclasses.replace`` would rerun GRPOConfig.__post_init__, which rejects its
    own resolved fields) with the method's settings, the reward weights, DAPO's soft-overlong
    reward (appended, with its entry in ``trl_kwargs["reward_processing_classes"]``) and the
    correctness source. Without ``method=`` the spec is the GRPOConfig's own algorithm
    (``spec_from_trl``); with one, GRPOConfig fields set away from their defaults override its
    axes (``override_from_trl``, one ``MethodOverrideWarning``), and one ``MethodSettingsWarning``
    lists the defaults the method changed."""
    if args is None:   # TRL's own default, built here so the method's settings can go into it
        from trl import GRPOConfig
        name = model if isinstance(model, str) else model.config.name_or_path
        args = GRPOConfig(f"{str(name).split('/')[-1]}-GRPO")
    else:
        args = copy.deepcopy(args)
    check_refused(args)
    check_sampler_correction(args)
    from_config = method is None or method is FROM_CONFIG
    if from_config:
        method_name, spec, regime, overridden = *spec_from_trl(args), {}, []
    else:
        method_name, spec, regime = resolve_method(method)
        spec, overridden = override_from_trl(args, method_name, spec)
    funcs = list(reward_funcs) if isinstance(reward_funcs, list) else ([] if reward_funcs is None else [reward_funcs])
    spec = with_reward_weights(spec, args.reward_weights, "GRPOConfig.reward_weights",   # TRL's become the method's
                               reward_func_names(funcs), error=ValueError)
    if spec.soft_overlong:   # DAPO eq. 13 is a reward component named "overlong"
        funcs.append(overlong_reward(spec, args.max_completion_length))
        if args.reward_weights is not None:
            args.reward_weights = [*args.reward_weights, 1.0]
        rpc = trl_kwargs.get("reward_processing_classes")
        if rpc is not None:   # TRL accepts one processing class as well as a list: wrap it as TRL would
            trl_kwargs["reward_processing_classes"] = [*(rpc if isinstance(rpc, list) else [rpc]), None]
    kind, key = resolve_correctness(correctness, reward_func_names(funcs), train_dataset)
    spec = check_needs(method_name, spec, kind != "none")
    check_episode_axes(spec, trl_kwargs.get("rollout_func"))
    if SAMPLING_MODES[spec.sampling].retains and spec.gfpo_keep >= args.num_generations:
        raise ValueError(f"method {method_name!r}: gfpo_keep={spec.gfpo_keep} must be < GRPOConfig.num_generations "
                         f"({args.num_generations}): GFPO retains fewer completions per group than it samples")
    changed = [] if from_config else apply_method_settings(args, method_name, spec, regime, overridden)
    if overridden:
        warn_at_caller(f"GrpoLabTrainer: training {method_label(spec, method_name)}: GRPOConfig settings override "
                       f"method {method_name!r}: {'; '.join(overridden)}", MethodOverrideWarning)
    if changed:
        warn_at_caller(f"GrpoLabTrainer: method {method_name!r} changed GRPOConfig settings left at their defaults "
                       f"(a value set to the default cannot be told from an unset one): {', '.join(changed)}",
                       MethodSettingsWarning)
    return DropIn(method_name, spec, args, funcs, kind, key)


def check_episode_axes(spec: MethodSpec, rollout_func) -> None:
    """GiGPO's step term and per-turn episode counting need multi-turn episodes (an
    ``EpisodeRollout``); on episodes, the length axes that cannot act are refused (envs/episode_task.py).
    A rollout plays episodes when its ``task`` is an ``EpisodeTask``: supplying ``advantage_inputs``
    does not make one (any rollout_func may supply estimator inputs)."""
    task = getattr(rollout_func, "task", None)
    if isinstance(task, EpisodeTask):
        check_episode_method(spec, task.name)
    elif spec.step_omega > 0 or EPISODE_NORMS[spec.episode_norm].per_turn:
        raise ValueError(f"method step_omega={spec.step_omega:g}, episode_norm={spec.episode_norm} (GiGPO) needs "
                         "multi-turn episodes: pass rollout_func=EpisodeRollout (grpolab.envs), e.g. task: {name: gridworld}")


class MethodSettingsWarning(GrpoLabWarning):
    """The method changed GRPOConfig settings the user left at (or set to) their defaults."""


class MethodOverrideWarning(GrpoLabWarning):
    """GRPOConfig settings the user set away from their defaults override the method's axes."""


def reward_func_names(reward_funcs) -> list[str]:
    """The names TRL will give the reward functions (model ids: their last path part)."""
    funcs = reward_funcs if isinstance(reward_funcs, list) else ([] if reward_funcs is None else [reward_funcs])
    names = []
    for f in funcs:
        if isinstance(f, str):
            names.append(f.split("/")[-1])
        elif hasattr(f, "config") and hasattr(f.config, "name_or_path"):
            names.append(str(f.config.name_or_path).split("/")[-1])
        else:
            while isinstance(f, functools.partial):   # TRL names a partial after the function it wraps
                f = f.func
            names.append(getattr(f, "__name__", type(f).__name__))
    return names


def resolve_correctness(correctness, names: list[str], dataset) -> tuple[str, object]:
    """-> (kind, key): ("reward", index) | ("column", name) | ("callable", fn) | ("none", None)."""
    if correctness is None:
        return "none", None
    if callable(correctness):
        return "callable", correctness
    if not isinstance(correctness, str):
        raise ValueError(f"correctness: expected a reward function's name, a dataset column or a callable, "
                         f"got {type(correctness).__name__}")
    if correctness in names:
        return "reward", names.index(correctness)
    columns = list(getattr(dataset, "column_names", None) or [])
    if correctness in columns:
        return "column", correctness
    raise ValueError(f"correctness: {correctness!r} is neither a reward function ({', '.join(names) or 'none'}) "
                     f"nor a column of train_dataset ({', '.join(columns) or 'none'})")


def check_needs(method_name: str, spec: MethodSpec, has_correctness: bool) -> MethodSpec:
    """Settings that need correctness: VAPO's positive-example LM loss raises without it (no
    stand-in exists); an accuracy filter falls back to the reward. Without correctness, one
    warning says every stand-in."""
    if spec.positive_lm_coef > 0 and not has_correctness:
        raise ValueError(f"method {method_name!r}: positive_lm_coef={spec.positive_lm_coef} trains on correct "
                         "completions and needs correctness=<reward function name | dataset column | callable>")
    if has_correctness:
        return spec
    message = ("GrpoLabTrainer: no correctness= given: correctness curves (accuracy, length/correct, "
               "groups/all_correct, ...) are replaced by curves of completions whose reward is above their "
               "group's mean (" + ", ".join(PROXY_NAMES.values()) + ")")
    if filters_groups(spec) and SAMPLING_FILTERS[spec.sampling_filter].needs is not None:
        message += (f"; method {method_name!r}: sampling={spec.sampling} filters groups on {spec.sampling_filter}, "
                    f"which needs {SAMPLING_FILTERS[spec.sampling_filter].needs}, so it keeps groups whose total "
                    f"reward varies instead (sampling_filter={REWARD})")
        spec = dataclasses.replace(spec, sampling_filter=REWARD)
    warn_at_caller(message)
    return spec


# correctness curve -> its name when "correct" is the stand-in "reward above the group mean";
# groups/all_correct (always 0) and groups/all_wrong (= groups/zero_variance) are left out.
PROXY_NAMES = {
    "accuracy": "above_group_mean/fraction",
    "length/correct": "length/above_group_mean",
    "length/incorrect": "length/not_above_group_mean",
}
_DROPPED_WITHOUT_CORRECTNESS = ("groups/all_correct", "groups/all_wrong")


def rename_for_proxy(stats: dict) -> dict:
    """Rollout stats computed with the stand-in correctness, under names that say so."""
    out = {}
    for key, value in stats.items():
        prefix, base = ("trained/", key[8:]) if key.startswith("trained/") else ("", key)
        if base in _DROPPED_WITHOUT_CORRECTNESS:
            continue
        out[prefix + PROXY_NAMES.get(base, base)] = value
    return out


def correct_from_reward(values) -> list[bool]:
    """Correct = reward > 0; None and NaN are incorrect."""
    return [v is not None and not math.isnan(float(v)) and float(v) > 0 for v in values]


def correct_from_column(completions, answers) -> list[bool]:
    """Correct = the completion text, whitespace-stripped, equals str(answer)."""
    def text(c):
        return c[-1]["content"] if isinstance(c, list) else c   # conversational: the last message
    return [text(c).strip() == str(a).strip() for c, a in zip(completions, answers)]


def task_correctness(task, examples):
    """The CLI's tasks as a correctness source: ``task.is_correct`` on the dataset's ``idx`` column."""
    def correctness(prompts, completions, idx, **kwargs):
        return [bool(task.is_correct(examples[i], c)) for i, c in zip(idx, completions)]
    correctness.task = task   # the evaluation's majority vote extracts answers with the task's extractor
    return correctness


def overlong_reward(spec: MethodSpec, max_len: int):
    """DAPO's soft overlong punishment (eq. 13) as a reward function named ``overlong``."""
    import torch

    from grpolab.algorithms import overlong_buffer, soft_overlong_penalty
    buffer = overlong_buffer(max_len, spec.overlong_buffer)   # the zone length/soft_penalized_fraction counts

    def overlong(prompts, completions, completion_ids, **kwargs):
        lengths = torch.tensor([len(ids) for ids in completion_ids], device="cpu")   # TRL takes a list back
        return soft_overlong_penalty(lengths, max_len, buffer, spec.overlong_penalty).tolist()
    return overlong


def mlflow_tags(method_name: str, spec: MethodSpec, seed: int) -> dict:
    # "grpolab.trainer.trl_config" marks a drop-in run in stored MLflow runs; the tag keeps its name
    return {**method_tags(method_name, spec, seed), "grpolab.trainer.trl_config": "true"}
