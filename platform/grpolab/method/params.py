"""One record per method setting: what it is, what values are valid, when it acts and when a run
logs it.

A ``Param`` is declared once: by the registry entry that reads it (a surrogate's clip bounds, an
estimator's critic settings, a sampling mode's round cap) or, for a setting no axis value owns, in
``method/settings.py``. Its type and default are the ``MethodSpec`` field's (``method/spec.py``).
Everything else derives from the table ``settings.param_table()`` builds from these records: the
range checks of ``spec.validate_spec``, the requirements and inert-setting warnings of
``requirements``, and the params a run logs (``tracking.naming``). Pure data, no torch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Requirement:
    name: str                                  # what the setting needs, in words
    holds: Callable[[object], bool]            # RunConfig -> does the regime provide it
    hint: str                                  # how to provide it


# When a run logs a setting (the stock MLflow UI shows one column per param, so a constant flag
# would be a column of noise): "always" (it says which update rule this is), "acts" (wherever the
# spec reads it), "changed" (away from its default), "changed_if_acts" (both).
LOG_POLICIES = ("always", "acts", "changed", "changed_if_acts")


@dataclass(frozen=True)
class Param:
    """One ``MethodSpec`` setting. Valid values: ``low <= v <= high`` (``<`` on an open side), a
    bound None being none. ``off_policy``: under the entry that declares it, it acts only with
    rollout reuse (on-policy rho = 1, so e.g. a clip never binds). ``acts`` / ``needs``: when the
    setting is read (spec -> bool) and what the run must have (a Requirement); None for a setting
    an axis value declares, then derived from its owning axis and the values that declare it."""
    name: str
    doc: str
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    why: str = ""                              # what a bound means, said with a refusal
    off_policy: bool = False
    log: str = "acts"                          # one of LOG_POLICIES
    acts: Callable[[object], bool] | None = None
    needs: Requirement | None = None
    late: bool = False                         # added after spec hashes were recorded: left out of the spec hash
                                               # at its default, so existing runs' and studies' hashes stay
    axis: str | None = None                    # the axis whose values declare it (set by the table)
    values: tuple = ()                         # those values, in registry order (set by the table)

    def __post_init__(self):
        if self.log not in LOG_POLICIES:
            raise ValueError(f"Param {self.name!r}: log {self.log!r}; valid: {', '.join(LOG_POLICIES)}")

    def reused(self) -> Param:
        """The same setting, declared by an entry under which it acts only off-policy."""
        return dataclasses.replace(self, off_policy=True)

    def valid(self) -> str:
        """The valid range in words: 'in (0, 1]', '>= 0'."""
        left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
        if self.low is not None and self.high is not None:
            return f"in {left}{self.low:g}, {self.high:g}{right}"
        if self.low is not None:
            return f"{'>' if self.low_open else '>='} {self.low:g}"
        return f"{'<' if self.high_open else '<='} {self.high:g}" if self.high is not None else "any value"

    def refusal(self, value) -> str | None:
        """Why ``value`` is not valid for this setting (None: it is)."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None   # the type is checked when the spec is built (validation.typed)
        too_low = self.low is not None and (value <= self.low if self.low_open else value < self.low)
        too_high = self.high is not None and (value >= self.high if self.high_open else value > self.high)
        if not (too_low or too_high):
            return None
        return f"method.{self.name}: must be {self.valid()}{f' ({self.why})' if self.why else ''}, got {value}"


def declare(*params: Param) -> dict[str, Param]:
    """An entry's settings, by name."""
    return {p.name: p for p in params}
