"""What ``GrpoLabTrainer(method=..., correctness=...)`` decides before TRL builds anything.

Pure checks on the user's arguments, no model loaded: which update rule (without ``method=``, the
GRPOConfig's own, read field by field through ``TRL_FIELDS``; else a registered name, a dict of
axis overrides on one, or a ``MethodSpec``, with the GRPOConfig fields the user set away from their
defaults as axis overrides), which ``GRPOConfig`` settings that method decides, and where
per-completion correctness comes from. ``grpo_trainer.py`` calls these first thing in its constructor.

Correctness sources (``correctness=``):
- the name of one of the reward functions: a completion is correct when that reward is > 0
  (None / NaN count as incorrect), e.g. TRL's ``accuracy_reward`` (1 / 0);
- the name of a dataset column: correct when the completion, stripped of surrounding
  whitespace, equals ``str(value)`` of that column (use a reward function for anything looser);
- a callable with TRL's reward-function signature returning one truthy value per completion:
  an observer, never added to the reward (the CLI's tasks use this, named ``correctness``).
With none, the correctness curves are replaced by reward-above-group-mean curves (``PROXY_NAMES``)
and an accuracy filter filters on the reward instead; both are said once, as a warning.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import inspect
import math
import warnings

from transformers import TrainerCallback

from grpolab.envs.task import check_episode_method
from grpolab.method.registry import METHODS
from grpolab.method.spec import AXIS_CHOICES, SPEC_FIELDS, MethodSpec, build_spec, with_reward_weights
from grpolab.method.trl_names import TRL_LOSS_TYPES
from grpolab.tracking.naming import method_label


class _NoEquivalent:
    """A GRPOConfig setting the method replaces by something TRL has no value for."""

    def __init__(self, reason: str):
        self.reason = reason

    def __repr__(self) -> str:
        return f"<no TRL equivalent: {self.reason}>"


class _FromConfig:
    """``method=``'s default: no grpolab method, train what the GRPOConfig says (``spec_from_trl``)."""

    def __repr__(self) -> str:
        return "None"


FROM_CONFIG = _FromConfig()
_REUSE_KEYS = ("minibatches", "num_iterations")   # method regime entries the drop-in applies to GRPOConfig


def resolve_method(method) -> tuple[str, MethodSpec, dict]:
    """``method=`` -> (base name, spec, rollout-reuse regime). A ``MethodSpec`` carries axes only
    (no regime); a name or ``{"name": ..., **axis overrides}`` brings its method's regime."""
    if isinstance(method, MethodSpec):
        return "custom", method, {}
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
    return name, spec, regime


def dropin_signature(trl_init) -> inspect.Signature:
    """GRPOTrainer.__init__'s parameters plus keyword-only ``method`` (None: the GRPOConfig's own
    algorithm) and ``correctness``: what ``inspect.signature(GrpoLabTrainer)`` and IDEs show."""
    sig = inspect.signature(trl_init)
    extra = [inspect.Parameter("method", inspect.Parameter.KEYWORD_ONLY, default=None),
             inspect.Parameter("correctness", inspect.Parameter.KEYWORD_ONLY, default=None)]
    return sig.replace(parameters=[*sig.parameters.values(), *extra])


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
        name = model if isinstance(model, str) else model.config._name_or_path
        args = GRPOConfig(f"{str(name).split('/')[-1]}-GRPO")
    else:
        args = copy.deepcopy(args)
    check_refused(args)
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
    changed = [] if from_config else apply_method_settings(args, method_name, spec, regime, overridden)
    if overridden:
        warnings.warn(f"GrpoLabTrainer: training {method_label(spec, method_name)}: GRPOConfig settings override "
                      f"method {method_name!r}: {'; '.join(overridden)}", MethodOverrideWarning, stacklevel=4)
    if changed:
        warnings.warn(f"GrpoLabTrainer: method {method_name!r} changed GRPOConfig settings left at their defaults "
                      f"(a value set to the default cannot be told from an unset one): {', '.join(changed)}",
                      MethodSettingsWarning, stacklevel=4)
    return DropIn(method_name, spec, args, funcs, kind, key)


def check_episode_axes(spec: MethodSpec, rollout_func) -> None:
    """GiGPO's step term and per-turn episode counting need multi-turn episodes (an
    ``EpisodeRollout``); on episodes, the length axes that cannot act are refused (envs/task.py)."""
    if hasattr(rollout_func, "finish"):   # grpolab.envs.EpisodeRollout
        check_episode_method(spec, rollout_func.task.name)
    elif spec.step_omega > 0 or spec.episode_norm != "episode":
        raise ValueError(f"method step_omega={spec.step_omega:g}, episode_norm={spec.episode_norm} (GiGPO) needs "
                         "multi-turn episodes: pass rollout_func=EpisodeRollout (grpolab.envs), e.g. task: {name: gridworld}")


def _loss_type(spec: MethodSpec):
    pairs = {("clip", "seq_mean_token_mean"): "grpo", ("clip", "token_mean"): "dapo",
             ("clip", "seq_mean_token_sum_norm"): "dr_grpo", ("clip", "token_mean_local"): "bnpo",
             ("cispo", "token_mean"): "cispo", ("sapo", "seq_mean_token_mean"): "sapo",
             ("clip", "seq_mean_token_sum"): "luspo", ("vespo", "token_mean"): "vespo"}
    if spec.ratio in ("token", "sequence") and (spec.surrogate, spec.aggregation) in pairs:
        return pairs[(spec.surrogate, spec.aggregation)]
    return _NoEquivalent(f"surrogate={spec.surrogate}, aggregation={spec.aggregation}, ratio={spec.ratio}")


def _clip_bounds(spec: MethodSpec) -> tuple:
    if spec.surrogate in ("clip", "dual_clip", "clip_cov") and spec.ratio in ("token", "sequence"):
        return spec.eps_low, spec.eps_high
    if spec.surrogate == "cispo":   # TRL's cispo truncates the IS weight at epsilon_high itself
        return _NoEquivalent("cispo has no lower bound"), 1.0 + spec.eps_high
    reason = f"surrogate={spec.surrogate}, ratio={spec.ratio} has no clip of TRL's kind"
    return _NoEquivalent(reason), _NoEquivalent(reason)


def trl_settings(spec: MethodSpec) -> dict:
    """GRPOConfig field -> the value equivalent to ``spec`` (or ``_NoEquivalent``). TRL's beta
    only switches the reference model on (grpolab's loss applies the KL itself)."""
    eps_low, eps_high = _clip_bounds(spec)
    scale = {"group_std": "group", "group_mean": "none", "batch_std": "batch"}
    level = {"token": "token", "sequence": "sequence"}
    return {
        "loss_type": _loss_type(spec),
        "beta": spec.kl_coef if spec.kl_coef > 0 else (1.0 if spec.needs_reference else 0.0),
        "epsilon": eps_low, "epsilon_high": eps_high,
        "mask_truncated_completions": spec.overlong_filter,
        "scale_rewards": scale.get(spec.advantage, _NoEquivalent(f"advantage={spec.advantage}")),
        "multi_objective_aggregation": "normalize_then_sum" if spec.advantage == "decoupled" else "sum_then_normalize",
        "importance_sampling_level": level.get(spec.ratio, _NoEquivalent(f"ratio={spec.ratio}")),
        "top_entropy_quantile": spec.top_entropy_quantile,
        "use_bias_correction_kl": spec.kl_ratio_correction,
        "entropy_coef": spec.entropy_coef if spec.entropy_mode == "static" else _NoEquivalent("adaptive entropy bonus"),
    }


# -- GRPOConfig -> MethodSpec: the ONE table --------------------------------------------------------
# Every GRPOConfig field is one of: AXIS (it means grpolab axis values: ``to_axes(value, args, spec)``
# returns them, ``spec`` being the spec built so far from the fields above it, so a field can read the
# surrogate that loss_type chose; {} = TRL ignores the value in this context, so grpolab does too),
# TRL (passed through: TRL applies it itself, outside the loss and advantages grpolab replaces) or
# REFUSED (no grpolab equivalent: set away from its default it raises, the note says why).
# Fields of transformers.TrainingArguments are passed through (``trl_field``).
# tests/test_trl_mapping.py fails when TRL adds a GRPOConfig field this table does not classify.
AXIS, TRL, REFUSED = "axis", "trl", "refused"


@dataclasses.dataclass(frozen=True)
class TrlField:
    kind: str
    note: str
    to_axes: object = None    # AXIS: (value, args, spec) -> {axis: value}


_CLIPS = ("clip", "dual_clip")   # the surrogates TRL's epsilon / epsilon_high / delta act on


def _from_loss_type(value, args, spec) -> dict:
    if value not in TRL_LOSS_TYPES:
        raise ValueError(f"GRPOConfig.loss_type={value!r}: not a TRL 1.16 loss type ({', '.join(TRL_LOSS_TYPES)})")
    axes = dict(TRL_LOSS_TYPES[value])
    missing = [f"{k}={v}" for k, v in axes.items() if k in AXIS_CHOICES and v not in AXIS_CHOICES[k]]
    if missing:
        raise NotImplementedError(f"GRPOConfig.loss_type={value!r} needs grpolab axis values not implemented yet: "
                                  f"{', '.join(missing)}")
    if spec.surrogate == "dual_clip" and axes["surrogate"] == "clip":
        del axes["surrogate"]   # the method's dual clip is a PPO clip too (TRL: clip + delta)
    return axes


def _epsilon(value, args, spec) -> dict:
    if spec.surrogate not in _CLIPS:
        return {}   # TRL's cispo, sapo and vespo ignore epsilon
    out = {"eps_low": float(value)}
    if args.epsilon_high is None:   # TRL: epsilon_high defaults to epsilon; a method's Clip-Higher is kept
        out["eps_high"] = max(float(value), spec.eps_high) if spec.eps_high != spec.eps_low else float(value)
    return out


def _epsilon_high(value, args, spec) -> dict:
    high = float(args.epsilon if value is None else value)
    if spec.surrogate == "cispo":   # TRL's cispo: the IS weight truncated at epsilon_high (absolute)
        return {"eps_high": high - 1.0}
    return {"eps_high": high} if spec.surrogate in _CLIPS else {}


def _delta(value, args, spec) -> dict:
    """TRL's two-sided clip (INTELLECT-2) caps rho at delta inside min(rho A, clip(rho) A): for
    A < 0 the loss stops at -A delta, for A > 0 the clip already binds below delta when
    delta >= 1 + eps_high. That is grpolab's dual clip with c = delta, exactly."""
    if value is None or spec.surrogate not in _CLIPS:
        return {}
    if value < 1.0 + spec.eps_high:
        raise ValueError(f"GRPOConfig.delta={value} < 1 + epsilon_high = {1 + spec.eps_high}: TRL then also cuts "
                         f"the clip for A > 0, which grpolab's dual clip (c >= 1 + eps_high) does not; TRL "
                         f"recommends delta > 1 + epsilon")
    return {"surrogate": "dual_clip", "dual_clip_c": float(value)}


def _when(surrogate: str, axis: str):
    """A setting TRL reads only for one loss type, as the axis of that surrogate."""
    return lambda value, args, spec: {axis: float(value)} if spec.surrogate == surrogate else {}


def _beta(value, args, spec) -> dict:
    return {"kl_coef": float(value), "kl_estimator": "k3", "kl_placement": "loss"} if value else {"kl_coef": 0.0}


def _bias_correction_kl(value, args, spec) -> dict:
    return {"kl_ratio_correction": bool(value)} if spec.kl_coef > 0 and spec.kl_placement == "loss" else {}


def _ratio(value, args, spec) -> dict:
    return {} if spec.surrogate == "vespo" else {"ratio": value}   # VESPO builds its own sequence weight


def _scale_rewards(value, args, spec) -> dict:
    value = {True: "group", False: "none"}.get(value, value)
    return {"advantage": {"group": "group_std", "batch": "batch_std", "none": "group_mean"}[value]}


def _aggregation(value, args, spec) -> dict:
    return {"advantage": "decoupled"} if value == "normalize_then_sum" else {}   # TRL then ignores scale_rewards


def _same(axis: str, cast):
    return lambda value, args, spec: {axis: cast(value)}


def _nothing(value, args, spec) -> dict:
    return {}


_PASSED = {   # TRL applies these itself; grpolab's loss and advantages never read them
    "model_init_kwargs": "model loading", "trust_remote_code": "model loading", "disable_dropout": "model setup",
    "cast_lm_head_to_fp32": "model setup", "num_generations": "group size (grpolab reads TRL's)",
    "num_generations_eval": "evaluation", "max_completion_length": "generation (also dr_grpo's constant, read from TRL)",
    "ds3_gather_for_generation": "generation", "shuffle_dataset": "data", "pad_to_multiple_of": "generation",
    "generation_batch_size": "rollout reuse (batching)", "steps_per_generation": "rollout reuse (batching)",
    "num_iterations": "rollout reuse", "temperature": "generation", "top_p": "generation", "top_k": "generation",
    "min_p": "generation", "generation_kwargs": "generation", "chat_template_kwargs": "generation",
    "repetition_penalty": "generation", "cache_implementation": "generation",
    **{f: "vLLM generation" for f in ("use_vllm", "vllm_mode", "vllm_model_impl", "vllm_enable_sleep_mode",
                                      "vllm_structured_outputs_regex", "vllm_server_base_url", "vllm_server_host",
                                      "vllm_server_port", "vllm_server_timeout", "vllm_group_port",
                                      "vllm_gpu_memory_utilization", "vllm_max_model_length",
                                      "vllm_tensor_parallel_size")},
    **{f: "the vLLM sampler correction: TRL computes the weight, grpolab's loss applies it as TRL's does"
       for f in ("vllm_importance_sampling_correction", "vllm_importance_sampling_mode",
                 "vllm_importance_sampling_clip_max", "vllm_importance_sampling_clip_min",
                 "vllm_importance_sampling_cap")},
    "sync_ref_model": "reference model (TR-DPO sync)", "ref_model_mixup_alpha": "reference model (TR-DPO sync)",
    "ref_model_sync_steps": "reference model (TR-DPO sync)", "max_tool_calling_iterations": "generation (tools)",
    **{f: "logging" for f in ("log_completions", "log_multimodal", "num_completions_to_print", "log_unique_prompts",
                              "log_completions_hub_repo")},
    **{f: "generation (transformers)" for f in ("use_transformers_continuous_batching",
                                                 "transformers_continuous_batching_config", "use_transformers_paged")},
}
_ADAPTIVE = ("TRL's adaptive entropy control (Skywork-OR1): entropy_mode=adaptive_gated, entropy_coef_step="
             "entropy_coef_delta, entropy_target, entropy_coef_min, entropy_coef_max")


def _adaptive_entropy(value, args, spec) -> dict:
    if not value:
        return {}
    if spec.top_entropy_quantile < 1.0:   # TRL's controller then measures the entropy of the selected tokens only
        raise NotImplementedError("GRPOConfig.use_adaptive_entropy=True with top_entropy_quantile < 1: TRL's "
                                  "controller measures the entropy of the selected tokens, grpolab's of every "
                                  "trained token; not implemented yet")
    return {"entropy_mode": "adaptive_gated", "entropy_coef_step": float(args.entropy_coef_delta),
            "entropy_target": float(args.entropy_target), "entropy_coef_min": float(args.entropy_coef_min),
            "entropy_coef_max": float(args.entropy_coef_max)}


TRL_FIELDS: dict[str, TrlField] = {
    # axes, in the order they are read (loss_type first: other fields act only under some surrogates)
    "loss_type": TrlField(AXIS, "surrogate + aggregation (grpolab.method.trl_names.TRL_LOSS_TYPES)", _from_loss_type),
    "epsilon": TrlField(AXIS, "eps_low (clip losses; TRL's cispo, sapo and vespo ignore it)", _epsilon),
    "epsilon_high": TrlField(AXIS, "eps_high (clip losses); cispo: eps_high = epsilon_high - 1 (TRL's bound is "
                                   "absolute); None = epsilon", _epsilon_high),
    "delta": TrlField(AXIS, "surrogate=dual_clip, dual_clip_c=delta (clip losses; others ignore it)", _delta),
    "sapo_temperature_pos": TrlField(AXIS, "sapo_tau_pos (loss_type sapo only)", _when("sapo", "sapo_tau_pos")),
    "sapo_temperature_neg": TrlField(AXIS, "sapo_tau_neg (loss_type sapo only)", _when("sapo", "sapo_tau_neg")),
    **{f"vespo_{k}": TrlField(AXIS, f"vespo_{k} (loss_type vespo only)", _when("vespo", f"vespo_{k}"))
       for k in ("k_pos", "lambda_pos", "k_neg", "lambda_neg")},
    "importance_sampling_level": TrlField(AXIS, "ratio token | sequence (vespo ignores it)", _ratio),
    "beta": TrlField(AXIS, "kl_coef, k3 estimator in the loss (TRL's KL)", _beta),
    "use_bias_correction_kl": TrlField(AXIS, "kl_ratio_correction (acts only with beta > 0)", _bias_correction_kl),
    "scale_rewards": TrlField(AXIS, "advantage: group -> group_std, batch -> batch_std, none -> group_mean",
                              _scale_rewards),
    "multi_objective_aggregation": TrlField(AXIS, "normalize_then_sum -> advantage=decoupled (GDPO)", _aggregation),
    "reward_weights": TrlField(AXIS, "reward_weights (spec.with_reward_weights, in prepare)", _nothing),
    "mask_truncated_completions": TrlField(AXIS, "overlong_filter (TRL masks the rows itself)",
                                           _same("overlong_filter", bool)),
    "top_entropy_quantile": TrlField(AXIS, "top_entropy_quantile", _same("top_entropy_quantile", float)),
    "entropy_coef": TrlField(AXIS, "entropy_coef (static bonus; TRL's mean-entropy definition)",
                             _same("entropy_coef", float)),
    **{f: TrlField(AXIS, "read with use_adaptive_entropy=True (it acts only then)", _nothing)
       for f in ("entropy_coef_min", "entropy_coef_max", "entropy_coef_delta", "entropy_target")},
    "use_adaptive_entropy": TrlField(AXIS, _ADAPTIVE + " (grpolab's own rule, entropy_mode=adaptive, has no gate)",
                                     _adaptive_entropy),
    "off_policy_mask_threshold": TrlField(TRL, "DeepSeek-V3.2's off-policy sequence mask: TRL's get_off_policy_mask "
                                               "(negative-advantage rows whose mean log(pi_sampler / pi) exceeds the "
                                               "threshold), applied by grpolab's loss to the surrogate term as TRL's "
                                               "does, with or without method="),
    "router_aux_loss_coef": TrlField(TRL, "the MoE router's load-balancing loss: TRL decides whether and with which "
                                          "coefficient (aux_loss_enabled, router_aux_loss_coef), grpolab's loss adds "
                                          "it exactly as TRL's does"),
    **{name: TrlField(TRL, note) for name, note in _PASSED.items()},
}


def trl_field(name: str) -> TrlField | None:
    """How grpolab reads GRPOConfig field ``name``; None for a field it does not know (a test fails)."""
    if name in TRL_FIELDS:
        return TRL_FIELDS[name]
    from transformers import TrainingArguments
    if name in {f.name for f in dataclasses.fields(TrainingArguments)}:
        return TrlField(TRL, "transformers.TrainingArguments (optimizer, batching, precision, logging, ...)")
    return None


def check_refused(args) -> None:
    for field, entry in TRL_FIELDS.items():
        given, default = getattr(args, field), _default(type(args), field)
        if entry.kind == REFUSED and given != default:
            raise ValueError(f"GRPOConfig.{field}={given!r} has no grpolab equivalent ({entry.note}); leave {field} at "
                             f"its default ({default!r})")


def spec_from_trl(args) -> tuple[str, MethodSpec]:
    """No ``method=``: ("trl:<loss_type>", the spec that trains exactly what ``args`` says), every
    AXIS field read in table order from grpolab's neutral spec."""
    spec = MethodSpec()
    for field, entry in TRL_FIELDS.items():
        if entry.kind == AXIS:
            spec = dataclasses.replace(spec, **entry.to_axes(getattr(args, field), args, spec))
    return f"trl:{args.loss_type}", build_spec(spec.to_dict())


def override_from_trl(args, method_name: str, spec: MethodSpec) -> tuple[MethodSpec, list[str]]:
    """``method=`` given: each AXIS field set away from GRPOConfig's default whose axes differ from
    the method's becomes an axis override. Returns the spec and what to announce, e.g.
    ``beta=0.1 -> kl_coef=0.1``; a field that cannot act under the method's axes is announced as such."""
    notes = []
    for field, entry in TRL_FIELDS.items():
        value = getattr(args, field)
        if entry.kind != AXIS or field == "reward_weights" or value == _default(type(args), field):
            continue
        axes = entry.to_axes(value, args, spec)
        diff = {k: v for k, v in axes.items() if getattr(spec, k) != v}
        if diff:
            spec = dataclasses.replace(spec, **diff)
            notes.append(f"{field}={value!r} -> {', '.join(f'{k}={v!r}' for k, v in diff.items())}")
        elif not axes:
            notes.append(f"{field}={value!r} cannot act under this method's axes, no effect ({entry.note})")
    return spec if not notes else build_spec(spec.to_dict()), notes


class MethodSettingsWarning(UserWarning):
    """The method changed GRPOConfig settings the user left at (or set to) their defaults."""


class MethodOverrideWarning(UserWarning):
    """GRPOConfig settings the user set away from their defaults override the method's axes."""


def _default(config_cls, field: str):
    f = {x.name: x for x in dataclasses.fields(config_cls)}[field]
    return f.default if f.default is not dataclasses.MISSING else f.default_factory()


def apply_method_settings(args, method_name: str, spec: MethodSpec, regime: dict, overridden: list) -> list[str]:
    """Write the method's TRL settings into ``args`` (``spec`` already holds the user's overrides,
    so they agree with what the user set). A value equal to the default cannot be told from an
    unset one: each one the method changes is returned as ``"field: default -> value"`` for the
    caller's warning. Rollout reuse the user set explicitly wins over the method's (appended to
    ``overridden``)."""
    changed = []
    for field, wanted in trl_settings(spec).items():
        given, default = getattr(args, field), _default(type(args), field)
        if isinstance(wanted, _NoEquivalent):
            continue   # grpolab's loss replaces TRL's: the field is left as the user set it
        if given == default and given != wanted and not (field == "epsilon_high" and given is None
                                                         and args.epsilon == wanted):
            changed.append(f"{field}: {given!r} -> {wanted!r}")   # (TRL reads epsilon_high=None as epsilon)
        setattr(args, field, wanted)
    return changed + _apply_reuse(args, method_name, regime, overridden)


def _apply_reuse(args, method_name: str, regime: dict, overridden: list) -> list[str]:
    """A registered method whose point is off-policy correction (GSPO, CISPO, ...) gets its
    rollout reuse when the user's config is on-policy by default; a reuse the user set wins.
    Returns what it changed."""
    changed = []
    if "num_iterations" in regime and args.num_iterations != regime["num_iterations"]:
        if args.num_iterations != 1:
            overridden.append(f"num_iterations={args.num_iterations} (method {method_name!r} reuses each rollout "
                              f"{regime['num_iterations']} times)")
        else:
            changed.append(f"num_iterations: 1 -> {regime['num_iterations']}")
            args.num_iterations = regime["num_iterations"]
    if "minibatches" in regime:
        wanted = regime["minibatches"] * args.gradient_accumulation_steps
        if args.steps_per_generation not in (args.gradient_accumulation_steps, wanted):
            overridden.append(f"steps_per_generation={args.steps_per_generation} (method {method_name!r}: "
                              f"{regime['minibatches']} optimizer steps per rollout, steps_per_generation={wanted})")
        elif args.steps_per_generation != wanted:
            changed.append(f"steps_per_generation: {args.steps_per_generation} -> {wanted}")
            args.steps_per_generation = wanted
            args.generation_batch_size = args.per_device_train_batch_size * args.world_size * wanted
    return changed


def reward_func_names(reward_funcs) -> list[str]:
    """The names TRL will give the reward functions (model ids: their last path part)."""
    funcs = reward_funcs if isinstance(reward_funcs, list) else ([] if reward_funcs is None else [reward_funcs])
    names = []
    for f in funcs:
        if isinstance(f, str):
            names.append(f.split("/")[-1])
        elif hasattr(f, "config") and hasattr(f.config, "_name_or_path"):
            names.append(str(f.config._name_or_path).split("/")[-1])
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
    if spec.sampling != "static" and spec.sampling_filter == "accuracy":
        message += (f"; method {method_name!r}: sampling={spec.sampling} filters groups on accuracy, so it keeps "
                    "groups whose total reward varies instead (sampling_filter=reward)")
        spec = dataclasses.replace(spec, sampling_filter="reward")
    warnings.warn(message, stacklevel=5)   # check_needs < prepare < GrpoLabTrainer.__init__ < the caller
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
    return correctness


def overlong_reward(spec: MethodSpec, max_len: int):
    """DAPO's soft overlong punishment (eq. 13) as a reward function named ``overlong``."""
    import torch

    from grpolab.algorithms import overlong_buffer, soft_overlong_penalty
    buffer = overlong_buffer(max_len, spec.overlong_buffer)   # the zone length/soft_penalized_fraction counts

    def overlong(prompts, completions, completion_ids, **kwargs):
        lengths = torch.tensor([len(ids) for ids in completion_ids])
        return soft_overlong_penalty(lengths, max_len, buffer, spec.overlong_penalty).tolist()
    return overlong


def mlflow_tags(method_name: str, spec: MethodSpec, seed: int) -> dict:
    return {"grpolab.method": method_label(spec, method_name), "grpolab.method_base": method_name,
            "grpolab.spec_hash": spec.spec_hash(), "grpolab.seed": str(seed), "grpolab.trainer.trl_config": "true"}


class MlflowTagsCallback(TrainerCallback):
    """Sets grpolab's run tags on the MLflow run that ``report_to="mlflow"`` opened (TRL's
    reporting callbacks run before user callbacks, so the run exists by then)."""

    def __init__(self, tags: dict):
        self.tags = tags

    def on_train_begin(self, args, state, control, **kwargs):
        import mlflow
        if state.is_world_process_zero and mlflow.active_run() is not None:
            mlflow.set_tags(self.tags)
