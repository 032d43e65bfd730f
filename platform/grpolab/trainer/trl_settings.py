"""MethodSpec -> GRPOConfig: the settings a grpolab method decides in the user's ``GRPOConfig``.

``trl_settings`` says, field by field, the value equivalent to a spec (or that TRL has none: the
loss grpolab replaces TRL's with needs no TRL value); ``apply_method_settings`` writes them, and
the method's rollout reuse, into the trainer's copy of the config and returns what it changed for
the caller's announcement. Loss types and clip bounds come from the surrogate registry
(``grpolab.method.surrogates``). The reverse reading is ``trl_fields.py``.
"""

from __future__ import annotations

from grpolab.method.advantages import ADVANTAGES
from grpolab.method.entropy_modes import ENTROPY_MODES
from grpolab.method.ratios import RATIOS
from grpolab.method.spec import MethodSpec
from grpolab.method.surrogates import SURROGATES
from grpolab.method.trl_names import TRL_LOSS_PAIRS
from grpolab.trainer.trl_fields import config_default


class _NoEquivalent:
    """A GRPOConfig setting the method replaces by something TRL has no value for."""

    def __init__(self, reason: str):
        self.reason = reason

    def __repr__(self) -> str:
        return f"<no TRL equivalent: {self.reason}>"


def _loss_type(spec: MethodSpec):
    loss = TRL_LOSS_PAIRS.get((spec.surrogate, spec.aggregation))
    if RATIOS[spec.ratio].trl is not None and loss is not None:
        return loss
    return _NoEquivalent(f"surrogate={spec.surrogate}, aggregation={spec.aggregation}, ratio={spec.ratio}")


def _clip_bounds(spec: MethodSpec) -> tuple:
    entry = SURROGATES[spec.surrogate]
    if entry.clip in ("ppo", "dual") and RATIOS[spec.ratio].trl is not None:
        return spec.eps_low, spec.eps_high
    if entry.clip == "truncate":   # TRL's cispo truncates the IS weight at epsilon_high itself
        axis, shift = entry.trl_fields["epsilon_high"]
        return _NoEquivalent(f"{spec.surrogate} has no lower bound"), getattr(spec, axis) + shift
    reason = f"surrogate={spec.surrogate}, ratio={spec.ratio} has no clip of TRL's kind"
    return _NoEquivalent(reason), _NoEquivalent(reason)


def trl_settings(spec: MethodSpec) -> dict:
    """GRPOConfig field -> the value equivalent to ``spec`` (or ``_NoEquivalent``). TRL's beta
    only switches the reference model on (grpolab's loss applies the KL itself)."""
    eps_low, eps_high = _clip_bounds(spec)
    advantage = ADVANTAGES[spec.advantage].trl or {}   # the estimator's GRPOConfig settings (method/advantages.py)
    return {
        "loss_type": _loss_type(spec),
        "beta": spec.kl_coef if spec.kl_coef > 0 else (1.0 if spec.needs_reference else 0.0),
        "epsilon": eps_low, "epsilon_high": eps_high,
        "mask_truncated_completions": spec.overlong_filter,
        "scale_rewards": advantage.get("scale_rewards", _NoEquivalent(f"advantage={spec.advantage}")),
        "multi_objective_aggregation": advantage.get("multi_objective_aggregation", "sum_then_normalize"),
        "importance_sampling_level": RATIOS[spec.ratio].trl or _NoEquivalent(f"ratio={spec.ratio}"),
        "top_entropy_quantile": spec.top_entropy_quantile,
        "use_bias_correction_kl": spec.kl_ratio_correction,
        "entropy_coef": (_NoEquivalent("adaptive entropy bonus") if ENTROPY_MODES[spec.entropy_mode].adaptive
                         else spec.entropy_coef),
    }


def apply_method_settings(args, method_name: str, spec: MethodSpec, regime: dict, overridden: list) -> list[str]:
    """Write the method's TRL settings into ``args`` (``spec`` already holds the user's overrides,
    so they agree with what the user set). A value equal to the default cannot be told from an
    unset one: each one the method changes is returned as ``"field: default -> value"`` for the
    caller's warning. Rollout reuse the user set explicitly wins over the method's (appended to
    ``overridden``)."""
    changed = []
    for field, wanted in trl_settings(spec).items():
        given, default = getattr(args, field), config_default(type(args), field)
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
