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

from grpolab.method.advantages import ADVANTAGES, SHARED_PARAMS, advantage_params, estimators
from grpolab.method.advantages import readers as advantage_readers
from grpolab.method.entropy_modes import ADAPTIVE_PARAMS, ENTROPY_MODES, entropy_modes
from grpolab.method.kl import kl_in_loss
from grpolab.method.ratios import RATIOS
from grpolab.method.sampling_modes import SAMPLING_MODES, sampling_params
from grpolab.method.sampling_modes import readers as sampling_readers
from grpolab.method.spec import MethodSpec
from grpolab.method.surrogates import SURROGATE_PARAMS, SURROGATES, readers


@dataclass(frozen=True)
class Requirement:
    name: str                                  # what the setting needs, in words
    holds: Callable[[object], bool]            # RunConfig -> does the regime provide it
    hint: str                                  # how to provide it


REUSE = Requirement("rollout reuse (off-policy updates)", lambda c: c.reuses_rollouts,
                    "on-policy the ratio is exactly 1 (eps_low/eps_high have no effect, clip fractions stay 0); "
                    "set train.minibatches > 1 or train.num_iterations > 1")
KL_ON = Requirement("a KL term (method.kl_coef > 0)", lambda c: c.spec.kl_coef > 0, "set method.kl_coef > 0")
# on-policy the correction factor pi/pi_old is 1 but still carries d log pi, so it acts without reuse
KL_IN_LOSS = Requirement("an in-loss KL", lambda c: kl_in_loss(c.spec),
                         "set method.kl_coef > 0 and kl_placement=loss")


def _axis(name: str, test: Callable[[MethodSpec], bool], hint: str) -> Requirement:
    return Requirement(name, lambda c: test(c.spec), hint)


def _either(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


SOFT_OVERLONG = _axis("soft overlong punishment", lambda s: s.soft_overlong, "set method.soft_overlong: true")
def filters_groups(spec: MethodSpec) -> bool:
    """The sampling values that keep or drop whole groups on method.sampling_filter (accuracy or reward)."""
    return SAMPLING_MODES[spec.sampling].filters_groups


def _sampling_param(param: str) -> Requirement:
    """A sampling mode's parameter (method/sampling_modes.py) acts when the run's mode reads it."""
    names = sampling_readers(param)
    name = SAMPLING_MODES[names[0]].label if len(names) == 1 else "a group filter"
    return _axis(name, lambda s: s.sampling in names, f"set method.sampling: {' or '.join(names)}")


_ADAPTIVE_MODES = entropy_modes(adaptive=True)
ADAPTIVE = _axis("the adaptive entropy bonus", lambda s: ENTROPY_MODES[s.entropy_mode].adaptive,
                 f"set method.entropy_mode: {' or '.join(_ADAPTIVE_MODES)}")
CRITIC = _axis(f"the critic (advantage {_either(list(estimators(critic=True)))})",
               lambda s: ADVANTAGES[s.advantage].critic, f"set method.advantage: {'/'.join(estimators(critic=True))}")
STEP = _axis("GiGPO's step-level advantage (method.step_omega > 0)", lambda s: s.step_omega > 0,
             "set method.step_omega > 0 (multi-turn tasks)")


def _advantage_param(param: str) -> Requirement:
    """An estimator's own parameter (method/advantages.py) acts when the run's estimator reads it."""
    names = advantage_readers(param)
    if all(ADVANTAGES[n].critic for n in names):
        return CRITIC   # the critic's settings: they act wherever a critic trains
    return _axis(f"advantage {_either(list(names))}", lambda s: s.advantage in names,
                 f"set method.advantage: {'/'.join(names)}")


def _surrogate_reuse(why_inert: str) -> Requirement:
    """A surrogate inert on-policy (its entry's reason) needs rollout reuse."""
    return Requirement(REUSE.name, REUSE.holds, f"{why_inert}; set train.minibatches > 1 or train.num_iterations > 1")


def _surrogate_param(param: str) -> Requirement:
    """A surrogate's own parameter (method/surrogates.py) acts when the run's surrogate reads it,
    and, where that surrogate's entry says so, only off-policy (on-policy rho = 1: e.g. a clip never
    binds). The flag is per surrogate: cov_fraction acts on-policy under clip_cov, not under kl_cov."""
    names = readers(param)
    off_policy = [n for n in names if SURROGATES[n].params[param]]
    on_policy = [n for n in names if n not in off_policy]
    said = [_either(on_policy)] if on_policy else []
    said += [_either(off_policy) + " with rollout reuse"] if off_policy else []
    hint = f"set method.surrogate: {'/'.join(names)}"
    if off_policy:
        hint += (f"{' (' + '/'.join(off_policy) + ')' if on_policy else ''} and train.minibatches > 1 or "
                 f"train.num_iterations > 1")
        hint += f" ({SURROGATES[off_policy[0]].on_policy})" if len(off_policy) == 1 else ""
    return Requirement("surrogate " + ", or ".join(said),
                       lambda c: c.spec.surrogate in names and (c.reuses_rollouts or c.spec.surrogate in on_policy),
                       hint)


# (axis, value or None for every value) -> the one requirement of that setting
REQUIREMENTS: dict[tuple[str, object], Requirement] = {
    # the surrogate axis and its parameters, from its registry (method/surrogates.py)
    **{("surrogate", s.name): _surrogate_reuse(s.on_policy) for s in SURROGATES.values() if s.on_policy is not None},
    **{(param, None): _surrogate_param(param) for param in SURROGATE_PARAMS},
    **{("ratio", r.name): REUSE for r in RATIOS.values() if r.on_policy is not None},
    ("kl_estimator", None): KL_ON, ("kl_placement", None): KL_ON,
    ("kl_ratio_correction", True): KL_IN_LOSS,
    # the sampling modes' parameters, from its registry (method/sampling_modes.py)
    **{(param, None): _sampling_param(param) for param in sampling_params()},
    ("overlong_buffer", None): SOFT_OVERLONG, ("overlong_penalty", None): SOFT_OVERLONG,
    **{(param, None): ADAPTIVE for param in ADAPTIVE_PARAMS},
    # the advantage axis's parameters, from its registry (method/advantages.py)
    **{(param, None): _advantage_param(param) for param in (*advantage_params(), *SHARED_PARAMS)},
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


