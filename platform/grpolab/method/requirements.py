"""What each setting needs to act, read from its record, and the checks built on it.

Every setting has ONE requirement on the run's regime: an axis value's own (a surrogate or ratio
inert on-policy: its entry's ``on_policy`` reason), else its Param's (``method/settings.py``: the
values of its axis that declare it, worded per axis below, or the requirement it declares). When the
requirement does not hold, the setting is inert: the run trains exactly as without it (e.g. a
clip never binds on-policy, where the ratio is exactly 1; KL-Cov's |log ratio| is 0 with zero
gradient on-policy; an estimator is unused when the KL is off). Inert settings are warned about
once at config time and tagged on the run (``grpolab.inert``); a ladder marks, before it runs,
every rung whose change is inert in its regime and every two rungs with identical effective
experiments.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from grpolab.method.advantages import ADVANTAGES
from grpolab.method.entropy_modes import entropy_modes
from grpolab.method.params import Param, Requirement
from grpolab.method.ratios import RATIOS
from grpolab.method.sampling_modes import SAMPLING_MODES
from grpolab.method.settings import CRITIC, either, param, param_table
from grpolab.method.spec import MethodSpec
from grpolab.method.surrogates import SURROGATES

REUSE = Requirement("rollout reuse (off-policy updates)", lambda c: c.reuses_rollouts,
                    "on-policy the ratio is exactly 1 (eps_low/eps_high have no effect, clip fractions stay 0); "
                    "set train.minibatches > 1 or train.num_iterations > 1")


def _axis(name: str, test: Callable[[MethodSpec], bool], hint: str) -> Requirement:
    return Requirement(name, lambda c: test(c.spec), hint)


def filters_groups(spec: MethodSpec) -> bool:
    """The sampling values that keep or drop whole groups on method.sampling_filter (accuracy or reward)."""
    return SAMPLING_MODES[spec.sampling].filters_groups


def _sampling_param(p: Param) -> Requirement:
    """A sampling mode's parameter (method/sampling_modes.py) acts when the run's mode reads it."""
    names = p.values
    name = SAMPLING_MODES[names[0]].label if len(names) == 1 else "a group filter"
    return _axis(name, lambda s: s.sampling in names, f"set method.sampling: {' or '.join(names)}")


def _entropy_param(p: Param) -> Requirement:
    """An entropy mode's parameter (method/entropy_modes.py) acts under the modes that read it."""
    names = p.values
    name = "the adaptive entropy bonus" if names == entropy_modes(adaptive=True) else f"entropy_mode {either(list(names))}"
    return _axis(name, lambda s: s.entropy_mode in names, f"set method.entropy_mode: {' or '.join(names)}")


def _advantage_param(p: Param) -> Requirement:
    """An estimator's own parameter (method/advantages.py) acts when the run's estimator reads it."""
    names = p.values
    if all(ADVANTAGES[n].critic for n in names):
        return CRITIC   # the critic's settings: they act wherever a critic trains
    return _axis(f"advantage {either(list(names))}", lambda s: s.advantage in names,
                 f"set method.advantage: {'/'.join(names)}")


def _surrogate_reuse(why_inert: str) -> Requirement:
    """A surrogate inert on-policy (its entry's reason) needs rollout reuse."""
    return Requirement(REUSE.name, REUSE.holds, f"{why_inert}; set train.minibatches > 1 or train.num_iterations > 1")


def _surrogate_param(p: Param) -> Requirement:
    """A surrogate's own parameter (method/surrogates.py) acts when the run's surrogate reads it,
    and, where that surrogate's entry says so, only off-policy (on-policy rho = 1: e.g. a clip never
    binds). The flag is per surrogate: cov_fraction acts on-policy under clip_cov, not under kl_cov."""
    names = p.values
    off_policy = [n for n in names if SURROGATES[n].params[p.name].off_policy]
    on_policy = [n for n in names if n not in off_policy]
    said = [either(on_policy)] if on_policy else []
    said += [either(off_policy) + " with rollout reuse"] if off_policy else []
    hint = f"set method.surrogate: {'/'.join(names)}"
    if off_policy:
        hint += (f"{' (' + '/'.join(off_policy) + ')' if on_policy else ''} and train.minibatches > 1 or "
                 f"train.num_iterations > 1")
        hint += f" ({SURROGATES[off_policy[0]].on_policy})" if len(off_policy) == 1 else ""
    return Requirement("surrogate " + ", or ".join(said),
                       lambda c: c.spec.surrogate in names and (c.reuses_rollouts or c.spec.surrogate in on_policy),
                       hint)


def _owned_param(table: dict[str, Param], p: Param) -> Requirement:
    """A setting of any other axis: read under the values that declare it, where the axis acts."""
    owner = param(table, p.axis).needs
    names = p.values
    return Requirement(f"method.{p.axis}={'/'.join(names)}" + (f" with {owner.name}" if owner else ""),
                       lambda c: getattr(c.spec, p.axis) in names and (owner is None or owner.holds(c)),
                       f"set method.{p.axis}: {' or '.join(names)}" + (f"; {owner.hint}" if owner else ""))


_BY_AXIS = {"surrogate": _surrogate_param, "advantage": _advantage_param, "sampling": _sampling_param,
            "entropy_mode": _entropy_param}


def _param_requirement(table: dict[str, Param], p: Param) -> Requirement | None:
    """The requirement of one setting, from its record (``method/settings.py``)."""
    if p.axis is None:
        return p.needs
    return _BY_AXIS[p.axis](p) if p.axis in _BY_AXIS else _owned_param(table, p)


def _value_requirements() -> dict[tuple[str, object], Requirement]:
    """The axis values that are inert on-policy: from their entries' ``on_policy`` reasons."""
    return {**{("surrogate", s.name): _surrogate_reuse(s.on_policy) for s in SURROGATES.values()
               if s.on_policy is not None},
            **{("ratio", r.name): REUSE for r in RATIOS.values() if r.on_policy is not None}}


def requirement(axis: str, value) -> Requirement | None:
    """The one requirement of setting ``axis`` at ``value`` (an axis value's own, else the setting's)."""
    own = _value_requirements().get((axis, value))
    if own is not None:
        return own
    table = param_table()
    return _param_requirement(table, table[axis]) if axis in table else None


def inert(cfg, axis: str) -> Requirement | None:
    """The unmet requirement of the run's value of ``axis``, or None if it can act."""
    req = requirement(axis, getattr(cfg.spec, axis))
    return req if req is not None and not req.holds(cfg) else None


def inert_settings(cfg) -> list[str]:
    """'axis=value' of every setting of the run that cannot act: the surrogate and ratio always
    (they are chosen), other axes when set away from the neutral default."""
    out = []
    for f in dataclasses.fields(cfg.spec):
        value = getattr(cfg.spec, f.name)
        if f.name not in ("surrogate", "ratio") and value == f.default:
            continue
        if inert(cfg, f.name) is not None:
            out.append(f"{f.name}={value}")
    return out


def inert_notes(cfg) -> list[str]:
    """One config-time warning per inert setting, naming what it needs."""
    notes = []
    for item in inert_settings(cfg):
        axis = item.split("=", 1)[0]
        req = inert(cfg, axis)
        notes.append(f"method.{item} needs {req.name} and is inert in this run: {req.hint}")
    return notes
