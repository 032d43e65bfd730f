"""GRPOConfig -> MethodSpec: how grpolab reads every field of TRL 1.16's ``GRPOConfig``, in ONE table.

Without ``method=``, ``GrpoLabTrainer`` trains what the GRPOConfig says (``spec_from_trl``); with
one, the fields the user set away from their defaults override the method's axes
(``override_from_trl``). A surrogate's own fields (epsilon, delta, sapo_*, vespo_*) and the loss
types come from the surrogate registry (``grpolab.method.surrogates``). The other direction (the
GRPOConfig settings a method decides) is ``trl_settings.py``; ``dropin.py`` puts both to use.
"""

from __future__ import annotations

import dataclasses

from grpolab.method.advantages import ADVANTAGES, trl_advantage
from grpolab.method.entropy_modes import trl_entropy_mode
from grpolab.method.kl import TRL_KL, kl_in_loss
from grpolab.method.ratios import trl_ratio
from grpolab.method.spec import AXIS_CHOICES, MethodSpec, build_spec
from grpolab.method.surrogates import SURROGATES, trl_target
from grpolab.method.trl_names import TRL_LOSS_TYPES

# -- GRPOConfig -> MethodSpec: the ONE table --------------------------------------------------------
# Every GRPOConfig field is one of: AXIS (it means grpolab axis values: ``to_axes(value, args, spec)``
# returns them, ``spec`` being the spec built so far from the fields above it, so a field can read the
# surrogate that loss_type chose; {} = TRL ignores the value in this context, so grpolab does too),
# TRL (passed through: TRL applies it itself, outside the loss and advantages grpolab replaces) or
# REFUSED (no grpolab equivalent: set away from its default it raises, the note says why).
# Fields of transformers.TrainingArguments are passed through (``trl_field``).
# tests/trainer/test_trl_mapping.py fails when TRL adds a GRPOConfig field this table does not classify.
AXIS, TRL, REFUSED = "axis", "trl", "refused"


@dataclasses.dataclass(frozen=True)
class TrlField:
    kind: str
    note: str
    to_axes: object = None    # AXIS: (value, args, spec) -> {axis: value}


def _from_loss_type(value, args, spec) -> dict:
    if value not in TRL_LOSS_TYPES:
        raise ValueError(f"GRPOConfig.loss_type={value!r}: not a TRL 1.16 loss type ({', '.join(TRL_LOSS_TYPES)})")
    axes = dict(TRL_LOSS_TYPES[value])
    missing = [f"{k}={v}" for k, v in axes.items() if k in AXIS_CHOICES and v not in AXIS_CHOICES[k]]
    if missing:
        raise NotImplementedError(f"GRPOConfig.loss_type={value!r} needs grpolab axis values not implemented yet: "
                                  f"{', '.join(missing)}")
    if SURROGATES[spec.surrogate].trl_as == axes["surrogate"]:
        del axes["surrogate"]   # the method's dual clip is a PPO clip too (TRL: clip + delta)
    return axes


def _epsilon(value, args, spec) -> dict:
    if trl_target(spec.surrogate, "epsilon") is None:
        return {}   # TRL's cispo, sapo and vespo ignore epsilon
    out = {"eps_low": float(value)}
    if args.epsilon_high is None:   # TRL: epsilon_high defaults to epsilon; a method's Clip-Higher is kept
        out["eps_high"] = max(float(value), spec.eps_high) if spec.eps_high != spec.eps_low else float(value)
    return out


def _epsilon_high(value, args, spec) -> dict:
    target = trl_target(spec.surrogate, "epsilon_high")
    if target is None:
        return {}
    axis, shift = SURROGATES[target].trl_fields["epsilon_high"]   # TRL's cispo: an absolute bound, shift 1
    return {axis: float(args.epsilon if value is None else value) - shift}


def _delta(value, args, spec) -> dict:
    """TRL's two-sided clip (INTELLECT-2) caps rho at delta inside min(rho A, clip(rho) A): for
    A < 0 the loss stops at -A delta, for A > 0 the clip already binds below delta when
    delta >= 1 + eps_high. That is grpolab's dual clip with c = delta, exactly."""
    target = None if value is None else trl_target(spec.surrogate, "delta")
    if target is None:
        return {}
    if value < 1.0 + spec.eps_high:
        raise ValueError(f"GRPOConfig.delta={value} < 1 + epsilon_high = {1 + spec.eps_high}: TRL then also cuts "
                         f"the clip for A > 0, which grpolab's dual clip (c >= 1 + eps_high) does not; TRL "
                         f"recommends delta > 1 + epsilon")
    return {"surrogate": target, SURROGATES[target].trl_fields["delta"][0]: float(value)}


def _surrogate_field(trl_field: str):
    """A GRPOConfig field that sets one surrogate's own parameter (its registry entry's
    ``trl_fields``): that axis under the loss types it acts on, nothing where TRL ignores it."""
    def to_axes(value, args, spec) -> dict:
        target = trl_target(spec.surrogate, trl_field)
        if target is None:
            return {}
        axis, shift = SURROGATES[target].trl_fields[trl_field]
        out = {axis: float(value) - shift}
        return out if target == spec.surrogate else {"surrogate": target, **out}
    return to_axes


def _beta(value, args, spec) -> dict:
    return {"kl_coef": float(value), **TRL_KL} if value else {"kl_coef": 0.0}   # TRL_KL: method/kl.py


def _bias_correction_kl(value, args, spec) -> dict:
    return {"kl_ratio_correction": bool(value)} if kl_in_loss(spec) else {}


def _ratio(value, args, spec) -> dict:
    if SURROGATES[spec.surrogate].own_ratio:   # VESPO builds its own sequence weight
        return {}
    return {"ratio": trl_ratio(value) or value}   # a level TRL lacks: build_spec names the valid ones


# TRL's scale_rewards values and the estimators they mean, from the advantage registry
_SCALES = ", ".join(f"{e.trl['scale_rewards']} -> {e.name}" for e in ADVANTAGES.values() if e.trl and "scale_rewards" in e.trl)


def _scale_rewards(value, args, spec) -> dict:
    value = {True: "group", False: "none"}.get(value, value)
    named = trl_advantage({"scale_rewards": value})
    if named is None:
        raise ValueError(f"GRPOConfig.scale_rewards={value!r}: no advantage estimator has it; valid: {_SCALES}")
    return {"advantage": named}


def _aggregation(value, args, spec) -> dict:
    named = trl_advantage({"multi_objective_aggregation": value})   # TRL then ignores scale_rewards
    return {"advantage": named} if value != "sum_then_normalize" else {}


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
    return {"entropy_mode": trl_entropy_mode(True), "entropy_coef_step": float(args.entropy_coef_delta),
            "entropy_target": float(args.entropy_target), "entropy_coef_min": float(args.entropy_coef_min),
            "entropy_coef_max": float(args.entropy_coef_max)}

_SHARED_FIELDS = ("epsilon", "epsilon_high", "delta")   # read by several surrogates: their own rows above
TRL_FIELDS: dict[str, TrlField] = {
    # axes, in the order they are read (loss_type first: other fields act only under some surrogates)
    "loss_type": TrlField(AXIS, "surrogate + aggregation (grpolab.method.trl_names.TRL_LOSS_TYPES)", _from_loss_type),
    "epsilon": TrlField(AXIS, "eps_low (clip losses; TRL's cispo, sapo and vespo ignore it)", _epsilon),
    "epsilon_high": TrlField(AXIS, "eps_high (clip losses); cispo: eps_high = epsilon_high - 1 (TRL's bound is "
                                   "absolute); None = epsilon", _epsilon_high),
    "delta": TrlField(AXIS, "surrogate=dual_clip, dual_clip_c=delta (clip losses; others ignore it)", _delta),
    # the other surrogates' own fields (sapo_temperature_*, vespo_*), from the surrogate registry
    **{field: TrlField(AXIS, f"{axis} (loss_type {s.name} only)", _surrogate_field(field))
       for s in SURROGATES.values() for field, (axis, _) in s.trl_fields.items() if field not in _SHARED_FIELDS},
    "importance_sampling_level": TrlField(AXIS, "ratio token | sequence (vespo ignores it)", _ratio),
    "beta": TrlField(AXIS, "kl_coef, k3 estimator in the loss (TRL's KL)", _beta),
    "use_bias_correction_kl": TrlField(AXIS, "kl_ratio_correction (acts only with beta > 0)", _bias_correction_kl),
    "scale_rewards": TrlField(AXIS, f"advantage: {_SCALES}", _scale_rewards),
    "multi_objective_aggregation": TrlField(AXIS, f"normalize_then_sum -> advantage="
                                                  f"{trl_advantage({'multi_objective_aggregation': 'normalize_then_sum'})}",
                                            _aggregation),
    "reward_weights": TrlField(AXIS, "reward_weights (spec.with_reward_weights, in prepare)", _nothing),
    "mask_truncated_completions": TrlField(AXIS, "overlong_filter (TRL masks the rows itself)",
                                           _same("overlong_filter", bool)),
    "top_entropy_quantile": TrlField(AXIS, "top_entropy_quantile", _same("top_entropy_quantile", float)),
    "entropy_coef": TrlField(AXIS, "entropy_coef (static bonus; TRL's mean-entropy definition)",
                             _same("entropy_coef", float)),
    **{f: TrlField(AXIS, "read with use_adaptive_entropy=True (it acts only then)", _nothing)
       for f in ("entropy_coef_min", "entropy_coef_max", "entropy_coef_delta", "entropy_target")},
    # entropy control and the off-policy mask (nothing is refused today; check_refused keeps the kind)
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
        given, default = getattr(args, field), config_default(type(args), field)
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
        if entry.kind != AXIS or field == "reward_weights" or value == config_default(type(args), field):
            continue
        axes = entry.to_axes(value, args, spec)
        diff = {k: v for k, v in axes.items() if getattr(spec, k) != v}
        if diff:
            spec = dataclasses.replace(spec, **diff)
            notes.append(f"{field}={value!r} -> {', '.join(f'{k}={v!r}' for k, v in diff.items())}")
        elif not axes:
            notes.append(f"{field}={value!r} cannot act under this method's axes, no effect ({entry.note})")
    return spec if not notes else build_spec(spec.to_dict()), notes


def config_default(config_cls, field: str):
    """GRPOConfig's (or any dataclass config's) default for ``field``."""
    f = {x.name: x for x in dataclasses.fields(config_cls)}[field]
    return f.default if f.default is not dataclasses.MISSING else f.default_factory()
