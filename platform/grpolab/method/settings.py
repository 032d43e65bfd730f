"""The table of every method setting: the ``Param`` records the axis registries declare, plus the
settings no axis value owns (the axes themselves, the KL coefficient, the length and entropy
settings, the critic's and GiGPO's extras), declared here.

A setting an axis value declares belongs to that axis; it is read when the run's value of the axis
is one that declares it and the axis itself is read:
    reads(p, spec) = spec.<p.axis> in p.values and reads(<p.axis>, spec)
A setting declared here says when it is read (``acts``; None: always) and what it needs
(``needs``; None: nothing). The table follows the registries as they are (it is rebuilt when an
entry is added, removed or replaced), so an entry a test registers brings its settings with it.
Pure data, no torch.
"""

from __future__ import annotations

import dataclasses

from grpolab.method.advantages import ADVANTAGES, estimators
from grpolab.method.aggregations import AGGREGATIONS
from grpolab.method.entropy_modes import ENTROPY_MODES, entropy_mode_acts
from grpolab.method.episode_norms import EPISODE_NORMS
from grpolab.method.kl import KL_ESTIMATORS, KL_PLACEMENTS
from grpolab.method.params import Param, Requirement, declare
from grpolab.method.ratios import RATIOS
from grpolab.method.sampling_modes import SAMPLING_MODES
from grpolab.method.sampling_options import SAMPLING_OPTIONS
from grpolab.method.surrogates import SURROGATES

# every axis whose value is a name: its registry of entries (one per value)
AXIS_REGISTRIES: dict[str, dict] = {
    "advantage": ADVANTAGES,          # one entry per value: method/advantages.py
    "surrogate": SURROGATES,          # one entry per value: method/surrogates.py
    "aggregation": AGGREGATIONS,      # one entry per value: method/aggregations.py
    "ratio": RATIOS,                  # one entry per value: method/ratios.py
    "kl_estimator": KL_ESTIMATORS,    # one entry per value: method/kl.py
    "kl_placement": KL_PLACEMENTS,    # one entry per value: method/kl.py
    "sampling": SAMPLING_MODES,       # one entry per value: method/sampling_modes.py
    "entropy_mode": ENTROPY_MODES,    # one entry per value: method/entropy_modes.py
    **SAMPLING_OPTIONS,               # sampling_filter, sampling_cap_policy, gfpo_metric: method/sampling_options.py
    "episode_norm": EPISODE_NORMS,    # one entry per value: method/episode_norms.py
}
# the entry fields that hold the settings an entry reads (an estimator's own and the shared ones it reads)
_DECLARED_IN = ("params", "reads")


def _needs(name: str, test, hint: str) -> Requirement:
    return Requirement(name, lambda c: test(c.spec), hint)


def either(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def _kl_on(spec) -> bool:
    return spec.kl_coef > 0


KL_ON = _needs("a KL term (method.kl_coef > 0)", _kl_on, "set method.kl_coef > 0")
SOFT_OVERLONG = _needs("soft overlong punishment", lambda s: s.soft_overlong, "set method.soft_overlong: true")
CRITIC = _needs(f"the critic (advantage {either(list(estimators(critic=True)))})",
                lambda s: ADVANTAGES[s.advantage].critic, f"set method.advantage: {'/'.join(estimators(critic=True))}")
STEP = _needs("GiGPO's step-level advantage (method.step_omega > 0)", lambda s: s.step_omega > 0,
              "set method.step_omega > 0 (multi-turn tasks)")
_UNIT_OPEN = {"low": 0, "high": 1, "low_open": True}

_GENERAL = declare(
    # the update rule's core: logged in every run
    *(Param(axis, doc, log="always") for axis, doc in (
        ("advantage", "rewards -> advantages estimator"), ("ratio", "importance-ratio granularity"),
        ("surrogate", "per-token surrogate objective"), ("aggregation", "per-token losses -> the loss"),
        ("sampling", "how a generation batch becomes the trained batch"))),
    Param("kl_coef", "beta; 0 turns the reference model off", low=0, log="always"),
    Param("overlong_filter", "mask truncated completions out of the loss", log="always"),
    Param("soft_overlong", "DAPO eq. 13 length penalty added to the reward", log="always"),
    Param("entropy_coef", "entropy bonus coefficient (start value if adaptive)", log="always"),
    Param("kl_estimator", "the estimator of KL(pi_theta || pi_ref) per token", acts=_kl_on, needs=KL_ON),
    Param("kl_placement", "where beta KL enters: the loss or the reward", acts=_kl_on, needs=KL_ON),
    # a gated controller (TRL's) acts from a zero start coefficient too (method/entropy_modes.py)
    Param("entropy_mode", "how the entropy bonus coefficient moves (static or adaptive)", acts=entropy_mode_acts),
    Param("overlong_buffer", "L_cache of eq. 13 in tokens; 0 = 20% of the cap (DAPO's 4096/20480)", low=0,
          why="0 = 20% of the cap",
          acts=lambda s: s.soft_overlong, needs=SOFT_OVERLONG),
    Param("overlong_penalty", "penalty at the hard cap", acts=lambda s: s.soft_overlong, needs=SOFT_OVERLONG),
    Param("top_entropy_quantile", "keep only this top fraction of tokens by entropy (0.2 = 80/20)", **_UNIT_OPEN,
          log="changed"),
    # the critic's extras and GiGPO's step term: logged where set, warned where inert
    Param("value_clip", "critic: clip V to V_old +- this in the value loss (PPO value clipping); 0 = off", low=0,
          why="0 = off", log="changed",
          needs=CRITIC),
    Param("whiten_advantages", "critic: whiten the GAE advantages over the batch's valid tokens", log="changed", needs=CRITIC),
    Param("positive_lm_coef", "VAPO's mu: weight of an NLL loss on correct completions; 0 = off", low=0,
          why="0 = off", log="changed"),
    Param("reward_weights", "one weight per reward component; None = all 1", log="changed"),
    Param("step_omega", "GiGPO: weight of the step-level (anchor-state) advantage; 0 = episode-level only", low=0,
          log="changed", late=True),
    Param("step_gamma", "GiGPO: discount of the step returns within an episode", **_UNIT_OPEN, log="changed",
          needs=STEP, late=True),
    Param("anchor_similarity", "GiGPO: 1 = equal states form an anchor group; < 1 = text similarity threshold", **_UNIT_OPEN,
          log="changed", needs=STEP, late=True),
    Param("episode_norm", "episode tasks: episode-level mean/std over episodes (paper Eq. 3) | step rows "
                          "(verl-agent)", log="changed", late=True),
)
# a setting no record names is logged away from its default and never inert (e.g. a new field)
_UNDECLARED = Param("", "", log="changed")


_built: dict = {}


def param_table() -> dict[str, Param]:
    """Every declared setting by name, each with its owning axis and the values that declare it
    (one record per name: the first declaration's range, doc and log policy; ``off_policy`` is read
    from each entry's own declaration). Built again only when an entry is added, removed or
    replaced (every spec hash and logged param reads it; building costs ~1 ms); an entry's
    settings are fixed once registered. Callers must not change the dict."""
    keys = tuple((axis, name, entry) for axis, registry in AXIS_REGISTRIES.items()
                 for name, entry in registry.items())
    held = _built.get("keys")   # compared by identity: a new entry at a freed one's address is still new
    if held is None or len(held) != len(keys) or any(a[:2] != b[:2] or a[2] is not b[2] for a, b in zip(held, keys)):
        _built.update(keys=keys, table=_table())
    return _built["table"]


def _table() -> dict[str, Param]:
    table = dict(_GENERAL)
    for axis, registry in AXIS_REGISTRIES.items():
        for entry in registry.values():
            for declared in _declared(entry):
                for name, declaration in declared.items():
                    first = table.get(name)
                    if first is None or first.axis != axis:   # its first declaration on this axis
                        table[name] = dataclasses.replace(declaration, axis=axis, values=(entry.name,))
                    else:
                        table[name] = dataclasses.replace(first, values=(*first.values, entry.name))
    return table


def _declared(entry) -> list[dict[str, Param]]:
    """The settings dicts of an entry (an aggregation's ``reads`` names its inputs, not settings)."""
    return [d for d in (getattr(entry, a, None) for a in _DECLARED_IN) if isinstance(d, dict)]


def param(table: dict[str, Param], name: str) -> Param:
    return table.get(name) or dataclasses.replace(_UNDECLARED, name=name)


def reads(table: dict[str, Param], name: str, spec) -> bool:
    """Whether ``spec`` reads setting ``name`` (see the module docstring)."""
    p = param(table, name)
    if p.axis is not None:
        return getattr(spec, p.axis) in p.values and reads(table, p.axis, spec)
    return p.acts is None or p.acts(spec)


def logged(table: dict[str, Param], name: str, spec, default) -> bool:
    """Whether a run logs setting ``name`` (its Param's log policy; ``default``: the field's)."""
    policy = param(table, name).log
    if policy == "always":
        return True
    if policy in ("changed", "changed_if_acts") and getattr(spec, name) == default:
        return False
    return policy == "changed" or reads(table, name, spec)
