"""Verdicts on paired seeds: what happened to a claimed direction, with its reason.

A claim (or a ladder rung) compares a treatment with a control on the same seeds, so the unit of
evidence is the per-seed paired difference d_s = treatment_s - control_s, signed so that the
claimed direction is positive: e_s = +d_s for ``increase``, -d_s for ``decrease`` (``none``: a
claim of no effect). [lo, hi] is the paired t-interval of mean(e) (``inference.t_interval``; its
coverage measured in docs/coverage.md), delta > 0 the smallest effect that matters, fixed with
the claim. ``LABELS`` is the one table of outcomes (README, every output); the rules, in order:

1. no paired seed: ``not run``; fewer than ``MIN_SEEDS``: ``underpowered`` (the face-value
   outcome in the reason); all differences equal: ``inconclusive`` (spread unmeasured, never certain);
2. ``increase``/``decrease``:
   lo > 0 and mean(e) >= delta        -> ``reproduced``
   lo > 0 and mean(e) < delta         -> ``direction holds, smaller than claimed``
   hi < 0                             -> ``opposite direction``
   -delta < lo and hi < delta         -> ``no effect that matters`` (equivalence)
3. ``none``: -delta < lo and hi < delta -> ``reproduced``; the interval excludes 0 and
   |mean| >= delta -> ``effect that matters``;
4. otherwise ``inconclusive`` when 80 % power at delta needs no more seeds than were run (t-based,
   at the observed spread), else ``underpowered``.

The label is monotone in the evidence: narrowing the interval around the same estimate moves
``inconclusive``/``underpowered`` to a decided label and never to one that contradicts it:
``reproduced`` and ``effect that matters`` stay once reached; an effect below delta may first read
``no effect that matters`` and, measured more precisely, ``direction holds, smaller than claimed``
or ``opposite direction`` (all three say: smaller than what matters). Checks outside the data (``mechanism did not act``, censoring) are applied by
``with_mechanism`` and ``with_censoring``; ``with_holm`` adds Holm-adjusted p-values over a family.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

from . import inference

MIN_SEEDS = 5
DEFAULT_SEEDS = 8       # what verdicts and the main job run: enough for a t-interval to be worth stating
DIRECTIONS = ("increase", "decrease", "none")
REPRODUCED = "reproduced"
SMALLER = "direction holds, smaller than claimed"
NO_EFFECT = "no effect that matters"
OPPOSITE = "opposite direction"
EFFECT = "effect that matters"
INCONCLUSIVE = "inconclusive"
UNDERPOWERED = "underpowered"
NO_MECHANISM = "mechanism did not act"
NOT_RUN = "not run"

LABELS = {   # label -> what happened (README's table is generated from this)
    REPRODUCED: "the interval excludes 0 in the claimed direction and the estimate reaches the smallest effect "
                "that matters; for a claim of no effect: the interval lies inside (-delta, delta)",
    SMALLER: "the interval excludes 0 in the claimed direction, but the estimate is below the smallest effect "
             "that matters",
    NO_EFFECT: "the interval lies inside (-delta, delta) and reaches 0 (an equivalence result): against a claimed effect",
    OPPOSITE: "the interval excludes 0 on the other side of the claimed direction",
    EFFECT: "for a claim of no effect: the interval excludes 0 and the estimate reaches delta",
    INCONCLUSIVE: "none of the above, although the seeds give 80 % power at delta; or all differences equal "
                  "(zero spread: the uncertainty is unmeasured, never taken as certain); or censored runs "
                  "could overturn the outcome",
    UNDERPOWERED: f"fewer than {MIN_SEEDS} paired seeds, or undecided with fewer seeds than 80 % power at delta "
                  "needs (the number is shown)",
    NO_MECHANISM: "the curve that shows the mechanism acting stayed below its floor fixed in advance "
                  "(the value is shown): nothing to judge",
    NOT_RUN: "no paired seed has both rows complete",
}
DECIDED = (REPRODUCED, SMALLER, NO_EFFECT, OPPOSITE, EFFECT)
EQUIVALENCE_LABELS = (NO_EFFECT,)


@dataclass(frozen=True)
class Verdict:
    verdict: str                 # one of LABELS
    reason: str
    n: int                       # paired seeds used
    mean: float                  # mean paired difference (treatment - control), unsigned
    low: float                   # t-interval of the mean paired difference, unsigned
    high: float
    sd: float                    # sample std of the paired differences
    seeds_needed: int | None     # for 80 % power at the smallest effect (t-based; None: spread unmeasured)
    differences: dict = field(default_factory=dict)    # seed -> paired difference
    level: float = 0.95
    direction: str = "increase"
    smallest_effect: float = 0.0
    p_value: float = math.nan    # the label's test: equivalence (TOST) or direction (t), see inference
    test: str = "direction"
    p_holm: float = math.nan     # Holm-adjusted within its family (with_holm)
    family: int = 0              # size of that family
    diagnostics: tuple = ()      # e.g. a skewed sample, censored runs
    face_value: str = ""         # the data's label when a check outside the data replaced it

    @property
    def interval(self) -> str:
        return f"{100 * self.level:.4g}% paired t"


def _signed(direction: str, low: float, high: float, mean: float) -> tuple[float, float, float]:
    sign = -1.0 if direction == "decrease" else 1.0
    lo, hi = sorted((sign * low, sign * high))
    return lo, hi, sign * mean


def rule(direction: str, low: float, high: float, mean: float, delta: float) -> tuple[str, str]:
    """The data's label and reason from the unsigned interval and estimate (rules 2-3)."""
    lo, hi, est = _signed(direction, low, high, mean)
    band = f"(-{delta:g}, {delta:g})"
    if direction == "none":
        if -delta < lo and hi < delta:
            return REPRODUCED, f"interval inside {band}: no difference that matters"
        if (lo > 0 or hi < 0) and abs(est) >= delta:
            return EFFECT, f"interval excludes 0 and |estimate| {abs(est):.3g} >= {delta:g}"
        return "", f"interval overlaps the {band} margin and beyond"
    if lo > 0:
        if est >= delta:
            return REPRODUCED, f"interval excludes 0 in the claimed direction; estimate {est:.3g} >= {delta:g}"
        return SMALLER, (f"interval excludes 0 in the claimed direction; estimate {est:.3g} < {delta:g}"
                         + (" (interval wholly below it)" if hi < delta else ""))
    if hi < 0:
        return OPPOSITE, "interval excludes 0 on the other side"
    if -delta < lo and hi < delta:
        return NO_EFFECT, f"interval reaches 0 and lies inside {band}"
    return "", f"interval spans 0 and reaches beyond {band}"


def paired_verdict(differences: dict, direction: str, smallest_effect: float, level: float = 0.95) -> Verdict:
    """Verdict from per-seed paired differences {seed: treatment - control}."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction: {direction!r}; valid: {', '.join(DIRECTIONS)}")
    if not smallest_effect > 0:
        raise ValueError(f"smallest_effect: must be > 0, got {smallest_effect!r}")
    finite = {s: float(d) for s, d in differences.items() if math.isfinite(d)}
    values = np.array([finite[s] for s in sorted(finite)], dtype=float)
    n, delta = len(values), float(smallest_effect)
    mean, low, high, sd = inference.t_interval(values, level)
    equivalence = direction == "none"
    needed = inference.seeds_for_power(sd, delta, equivalence=equivalence, alpha=1 - level)
    dropped = len(differences) - n
    notes = [f"{dropped} seed(s) without a finite difference left out"] if dropped else []
    g1, threshold, skewed = inference.skew_flag(values)
    if skewed:
        notes.append(f"skewed differences (G1 {g1:.2f}, beyond {threshold:.2f} = 95 % of normal samples of "
                     f"{n}): the interval may cover less than {100 * level:g} % (docs/coverage.md)")
    base = dict(n=n, mean=mean, low=low, high=high, sd=sd, seeds_needed=needed, differences=finite, level=level,
                direction=direction, smallest_effect=delta, diagnostics=tuple(notes))
    if n == 0:
        return Verdict(NOT_RUN, "no paired seed", **base)
    if n > 1 and sd == 0:   # inference.t_interval: equal up to rounding
        label, reason = INCONCLUSIVE, f"all {n} paired differences equal {values[0]:.4g}: the spread is unmeasured"
    elif n < 2:
        label, reason = UNDERPOWERED, f"{n} paired seed: no interval"
    else:
        label, reason = rule(direction, low, high, mean, delta)
        if not label:
            short = needed is not None and needed > n
            label = UNDERPOWERED if short else INCONCLUSIVE
            reason += (f"; 80 % power at {delta:g} needs {needed} seeds (have {n})" if short else
                       f"; {n} seeds give 80 % power at {delta:g}" if needed else "")
    if 0 < n < MIN_SEEDS and label != UNDERPOWERED:
        label, reason = UNDERPOWERED, f"{n} < {MIN_SEEDS} paired seeds ({label} at face value: {reason})"
    test = "equivalence" if label in EQUIVALENCE_LABELS or (equivalence and label != EFFECT) else "direction"
    p = inference.p_equivalence(values, delta) if test == "equivalence" else inference.p_direction(values)
    return Verdict(label, reason, p_value=p, test=test, **base)


def replaced(v: Verdict, label: str, reason: str, diagnostic: str | None = None) -> Verdict:
    """The verdict with a label set by a check outside the data; the data's label is kept as face value."""
    diagnostics = v.diagnostics + ((diagnostic,) if diagnostic else ())
    return dataclasses.replace(v, verdict=label, reason=f"{reason}; at face value: {v.verdict} ({v.reason})",
                               face_value=v.face_value or v.verdict, diagnostics=diagnostics)


def with_mechanism(v: Verdict, metric: str, value: float, floor: float, rows: str) -> Verdict:
    """``mechanism did not act`` when the mechanism's curve (mean over the seeds of ``rows``) is below
    its floor, or was never measured (NaN); otherwise the verdict with the measured value noted."""
    if math.isfinite(value) and value >= floor:
        return dataclasses.replace(v, diagnostics=v.diagnostics + (f"mechanism acted: {metric} = {value:.3g} >= "
                                                                   f"{floor:g} on {rows}",))
    if v.verdict == NOT_RUN:
        return v
    return replaced(v, NO_MECHANISM, f"{metric} = {value:.3g} < {floor:g} on {rows}")


def with_censoring(v: Verdict, treatment: int, control: int, metric: str) -> Verdict:
    """One censoring policy (claims and tables): a run that never reached a threshold is counted at
    the budget, a lower bound of its true value. Whether that can move the signed effect up or down
    follows from the claim's direction; a label the unknown true values could overturn becomes
    ``inconclusive``. Robust: ``reproduced`` when the true effect can only be larger (its estimate
    and lower end can only grow), ``opposite direction`` when it can only be smaller."""
    if not (treatment or control):
        return v
    sign = {"increase": 1, "decrease": -1, "none": 0}[v.direction]
    up = (treatment and sign > 0) or (control and sign < 0)        # true e may be larger than used
    down = (treatment and sign < 0) or (control and sign > 0)      # true e may be smaller than used
    note = (f"{treatment} treatment and {control} control run(s) never reached the threshold of {metric}: "
            f"counted at the budget, a lower bound")
    robust = (sign != 0) and ((up and not down and v.verdict == REPRODUCED) or
                              (down and not up and v.verdict == OPPOSITE))
    if robust or v.verdict not in DECIDED:
        return dataclasses.replace(v, diagnostics=v.diagnostics + (note + "; the outcome holds either way",))
    return replaced(v, INCONCLUSIVE, "censored runs could overturn the outcome", note)


def with_holm(verdicts: list[Verdict], alpha: float = 0.05) -> list[Verdict]:
    """Holm-adjust the label tests of one family (a ``verdicts`` run, a ladder table); verdicts with
    no test (not run, zero spread) are outside the family count."""
    adjusted = inference.holm([v.p_value if v.verdict not in (NOT_RUN, NO_MECHANISM) else math.nan
                               for v in verdicts])
    size = sum(math.isfinite(p) for p in adjusted)
    return [dataclasses.replace(v, p_holm=p, family=size) for v, p in zip(verdicts, adjusted)]


def holm_text(v: Verdict, alpha: float = 0.05) -> str:
    """'p 0.004, Holm 0.021: holds at familywise 5 %' (or why there is no test)."""
    if not math.isfinite(v.p_value):
        return "no test"
    text = f"{v.test} p {v.p_value:.2g}"
    if not math.isfinite(v.p_holm):
        return text
    holds = v.verdict in DECIDED and v.p_holm < alpha
    return (f"{text}, Holm {v.p_holm:.2g} over {v.family}: " +
            ("holds" if holds else "not significant") + f" at familywise {100 * alpha:g} %")
