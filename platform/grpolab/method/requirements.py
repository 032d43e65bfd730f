"""What each axis value needs to act, declared as data, and the checks built on it.

Every axis (optionally one value of it) declares ONE requirement on the run's regime. When the
requirement does not hold, the setting is inert: the run trains exactly as without it (e.g. a
clip never binds on-policy, where the ratio is exactly 1; KL-Cov's |log ratio| is 0 with zero
gradient on-policy; an estimator is unused when the KL is off). Inert settings are warned about
once at config time and tagged on the run (``grpolab.inert``); a ladder marks, before it runs,
every rung whose change is inert in its regime and every two rungs with identical effective
experiments.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from grpolab.method.spec import MethodSpec


@dataclass(frozen=True)
class Requirement:
    name: str                                  # what the setting needs, in words
    holds: Callable[[object], bool]            # RunConfig -> does the regime provide it
    hint: str                                  # how to provide it


_CLIPPING = ("clip", "dual_clip", "clip_cov", "cispo")
REUSE = Requirement("rollout reuse (off-policy updates)", lambda c: c.reuses_rollouts,
                    "on-policy the ratio is exactly 1 (eps_low/eps_high have no effect, clip fractions stay 0); "
                    "set train.minibatches > 1 or train.num_iterations > 1")
CLIP_REUSE = Requirement("a clipping surrogate with rollout reuse",
                         lambda c: c.reuses_rollouts and (c.spec.surrogate in _CLIPPING or c.spec.ratio == "geometric"),
                         "use surrogate clip/dual_clip/clip_cov/cispo and train.minibatches > 1 or num_iterations > 1")
KL_ON = Requirement("a KL term (method.kl_coef > 0)", lambda c: c.spec.kl_coef > 0, "set method.kl_coef > 0")
# on-policy the correction factor pi/pi_old is 1 but still carries d log pi, so it acts without reuse
KL_IN_LOSS = Requirement("an in-loss KL", lambda c: c.spec.kl_coef > 0 and c.spec.kl_placement == "loss",
                         "set method.kl_coef > 0 and kl_placement=loss")


def _axis(name: str, test: Callable[[MethodSpec], bool], hint: str) -> Requirement:
    return Requirement(name, lambda c: test(c.spec), hint)


SOFT_OVERLONG = _axis("soft overlong punishment", lambda s: s.soft_overlong, "set method.soft_overlong: true")
DYNAMIC = _axis("dynamic sampling", lambda s: s.sampling == "dynamic", "set method.sampling: dynamic")
FILTERING = _axis("a group filter", lambda s: s.sampling in ("dynamic", "zero_variance_filter"),
                  "set method.sampling: dynamic or zero_variance_filter")
ADAPTIVE = _axis("the adaptive entropy bonus", lambda s: s.entropy_mode in ("adaptive", "adaptive_gated"),
                 "set method.entropy_mode: adaptive or adaptive_gated")
CRITIC = _axis("the critic (advantage gae)", lambda s: s.advantage == "gae", "set method.advantage: gae")
STEP = _axis("GiGPO's step-level advantage (method.step_omega > 0)", lambda s: s.step_omega > 0,
             "set method.step_omega > 0 (multi-turn tasks)")

# Dual clip on-policy: rho = 1, so for A < 0 the clip loss is -A < -c A (c > 1) and the cap never binds.
DUAL_CLIP_REUSE = Requirement("surrogate dual_clip with rollout reuse",
                              lambda c: c.spec.surrogate == "dual_clip" and c.reuses_rollouts,
                              "set method.surrogate: dual_clip and train.minibatches > 1 or train.num_iterations > 1 "
                              "(on-policy rho = 1 and the cap -c*A never binds)")
# SAPO on-policy: d/drho [(4/tau) sigmoid(tau (rho - 1))] at rho = 1 is 4 sigmoid'(0) = 1 for every tau,
# so the gradient equals the unclipped -A grad rho whatever tau is (only the loss value moves).
SAPO_REUSE = Requirement("surrogate sapo with rollout reuse", lambda c: c.spec.surrogate == "sapo" and c.reuses_rollouts,
                         "set method.surrogate: sapo and train.minibatches > 1 or train.num_iterations > 1 "
                         "(on-policy the gate's slope at rho = 1 is 1 for every tau)")
# VESPO on-policy: w = 1 and phi(1) = 1 for every (k, lambda), so the update is REINFORCE's.
VESPO_REUSE = Requirement("surrogate vespo with rollout reuse", lambda c: c.spec.surrogate == "vespo" and c.reuses_rollouts,
                          "set method.surrogate: vespo and train.minibatches > 1 or train.num_iterations > 1 "
                          "(on-policy the sequence weight is 1 and phi(1) = 1 for every k, lambda)")

# (axis, value or None for every value) -> the one requirement of that setting
REQUIREMENTS: dict[tuple[str, object], Requirement] = {
    ("surrogate", "clip"): REUSE, ("surrogate", "dual_clip"): REUSE, ("surrogate", "cispo"): REUSE,
    ("surrogate", "sapo"): REUSE, ("surrogate", "kl_cov"): REUSE, ("surrogate", "vespo"): REUSE,
    ("ratio", "geometric"): REUSE,
    ("eps_low", None): CLIP_REUSE, ("eps_high", None): CLIP_REUSE,
    ("dual_clip_c", None): DUAL_CLIP_REUSE,
    ("sapo_tau_pos", None): SAPO_REUSE, ("sapo_tau_neg", None): SAPO_REUSE,
    ("vespo_k_pos", None): VESPO_REUSE, ("vespo_lambda_pos", None): VESPO_REUSE,
    ("vespo_k_neg", None): VESPO_REUSE, ("vespo_lambda_neg", None): VESPO_REUSE,
    ("cov_low", None): _axis("surrogate clip_cov", lambda s: s.surrogate == "clip_cov", "set method.surrogate: clip_cov"),
    ("cov_high", None): _axis("surrogate clip_cov", lambda s: s.surrogate == "clip_cov", "set method.surrogate: clip_cov"),
    ("kl_cov_coef", None): _axis("surrogate kl_cov", lambda s: s.surrogate == "kl_cov", "set method.surrogate: kl_cov"),
    ("dpo_beta", None): _axis("surrogate group_dpo", lambda s: s.surrogate == "group_dpo", "set method.surrogate: group_dpo"),
    ("kl_estimator", None): KL_ON, ("kl_placement", None): KL_ON,
    ("kl_ratio_correction", True): KL_IN_LOSS,
    ("max_sampling_rounds", None): DYNAMIC, ("sampling_cap_policy", None): DYNAMIC,
    ("sampling_filter", None): FILTERING,
    ("overlong_buffer", None): SOFT_OVERLONG, ("overlong_penalty", None): SOFT_OVERLONG,
    ("entropy_target", None): ADAPTIVE, ("entropy_coef_step", None): ADAPTIVE,
    ("entropy_coef_min", None): ADAPTIVE, ("entropy_coef_max", None): ADAPTIVE,
    ("tracker_decay", None): _axis("advantage value_tracker", lambda s: s.advantage == "value_tracker",
                                   "set method.advantage: value_tracker"),
    ("gae_gamma", None): CRITIC, ("gae_lambda", None): CRITIC, ("gae_lambda_critic", None): CRITIC,
    ("gae_length_alpha", None): CRITIC, ("critic_lr", None): CRITIC, ("critic_warmup", None): CRITIC,
    ("value_clip", None): CRITIC, ("whiten_advantages", None): CRITIC,
    ("step_gamma", None): STEP, ("anchor_similarity", None): STEP,
}
_DEFAULT = MethodSpec()


def requirement(axis: str, value) -> Requirement | None:
    return REQUIREMENTS.get((axis, value)) or REQUIREMENTS.get((axis, None))


def inert(cfg, axis: str) -> Requirement | None:
    """The unmet requirement of the run's value of ``axis``, or None if it can act."""
    req = requirement(axis, getattr(cfg.spec, axis))
    return req if req is not None and not req.holds(cfg) else None


def inert_settings(cfg) -> list[str]:
    """'axis=value' of every setting of the run that cannot act: the surrogate and ratio always
    (they are chosen), other axes when set away from the neutral default."""
    out = []
    for axis in MethodSpec.__dataclass_fields__:
        value = getattr(cfg.spec, axis)
        if axis not in ("surrogate", "ratio") and value == getattr(_DEFAULT, axis):
            continue
        if inert(cfg, axis) is not None:
            out.append(f"{axis}={value}")
    return out


def inert_notes(cfg) -> list[str]:
    """One config-time warning per inert setting, naming what it needs."""
    notes = []
    for item in inert_settings(cfg):
        axis = item.split("=", 1)[0]
        req = inert(cfg, axis)
        notes.append(f"method.{item} needs {req.name} and is inert in this run: {req.hint}")
    return notes


