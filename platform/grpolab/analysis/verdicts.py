"""Verdicts on paired seeds: what happened to a claimed direction, with its reason.

Detail: docs/studies.md, "grpolab.analysis.verdicts".
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

from grpolab.analysis import DIRECTIONS, inference

MIN_SEEDS = 5
DEFAULT_SEEDS = 8       # what verdicts and the main job run: enough for a t-interval to be worth stating
REPRODUCED = "reproduced"
SMALLER = "direction holds, smaller than claimed"
UNDETERMINED = "direction holds, size undetermined"
NO_EFFECT = "no effect that matters"
OPPOSITE = "opposite direction"
EFFECT = "effect that matters"
INCONCLUSIVE = "inconclusive"
UNDERPOWERED = "underpowered"
NO_MECHANISM = "precondition not met"
REGIME_ABSENT = "regime absent: not a test of the claim"
REGIME_UNMEASURED = "regime not measured: not a test of the claim"
NOT_RUN = "not run"
HOLDS_EXACTLY = "holds exactly on every seed"
NOT_YET = "not judged yet: look 1 incomplete"

LABELS = {   # label -> what happened (docs/studies.md's table is checked against this)
    REPRODUCED: "the whole interval lies at or beyond the smallest effect that matters (delta) in the claimed "
                "direction; for a claim of no effect: the interval lies inside (-delta, delta)",
    SMALLER: "the interval excludes 0 in the claimed direction and lies wholly below delta",
    UNDETERMINED: "the interval excludes 0 in the claimed direction and still contains delta (or all differences "
                  "are equal and an exact sign test shows the direction): more seeds can settle the size",
    NO_EFFECT: "the interval lies inside (-delta, delta) and reaches 0 (an equivalence result): against a claimed effect",
    OPPOSITE: "the interval excludes 0 on the other side of the claimed direction",
    EFFECT: "for a claim of no effect: the whole interval lies beyond delta or beyond -delta",
    INCONCLUSIVE: "none of the above, although the seeds give 80 % power at delta at the observed spread; or all "
                  "differences equal with no direction shown (zero spread: the uncertainty is unmeasured, never "
                  "taken as certain); or runs never reached a threshold (censored: the interval cannot bound them)",
    UNDERPOWERED: f"fewer than {MIN_SEEDS} paired seeds, or undecided with fewer seeds than 80 % power at delta "
                  "needs (the number is shown)",
    NO_MECHANISM: "a precondition of the change (e.g. some completions truncated, the clip binding) stayed below "
                  "its floor fixed in advance (the value is shown): the change could not act, nothing to judge",
    REGIME_ABSENT: "a gate on the regime the mechanism needs (the paper's premise, e.g. truncation is noise, entropy "
                   "collapses), measured on the control rows, failed (the value is shown): whatever the interval says "
                   "(kept as face value), this comparison does not test the published claim",
    REGIME_UNMEASURED: "a gate on the regime the mechanism needs could not be measured (the missing curve is named) "
                       "and no gate failed: the comparison is not shown to test the published claim",
    NOT_RUN: "no paired seed has both rows complete",
    NOT_YET: "seeds on demand: not every seed of the first planned look has both rows complete yet (a time limit "
             "paused the study, it still runs, or a row of it failed: --retry-failed); the interval on the pairs complete so far is shown as face value, "
             "an interim look outside the plan's error bound, and the rung joins no family",
    HOLDS_EXACTLY: f"a construction check (the toy is built so that the claim must hold) whose every paired "
                   f"difference is exactly 0, on at least {MIN_SEEDS} seeds: a statement about the seeds run, "
                   "with no interval or level (zero spread)",
}
DECIDED = (REPRODUCED, SMALLER, NO_EFFECT, OPPOSITE, EFFECT, HOLDS_EXACTLY)
NOT_A_TEST = (NO_MECHANISM, REGIME_ABSENT, REGIME_UNMEASURED)    # checks outside the data that more seeds leave as they are


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
    p: dict = field(default_factory=dict)        # hypothesis -> p-value (H0, Hd, Heq; see the module doc)
    p_holm: float = math.nan     # the primary hypothesis' p, Holm-adjusted within its family (with_family)
    family: int = 0              # judged claims in that family
    family_label: str = ""       # the label on the family's Bonferroni interval (with_family)
    family_level: float = math.nan
    looks: int = 1               # sequential looks planned (p-values are multiplied by it in the family)
    diagnostics: tuple = ()      # e.g. a skewed sample, censored runs
    face_value: str = ""         # the data's label when a check outside the data replaced it
    skewed: bool = False         # the skew diagnostic fired: the interval may cover less than its level
    fragile: str = ""            # why the label is fragile (``strength.with_fragility``), '' when it is not
    family_fragile: str = ""     # why the familywise label is fragile (``strength.with_family_fragility``)

    @property
    def interval(self) -> str:
        return f"{100 * self.level:.4g}% paired t"



def _signed(direction: str, low: float, high: float, mean: float) -> tuple[float, float, float]:
    sign = -1.0 if direction == "decrease" else 1.0
    lo, hi = sorted((sign * low, sign * high))
    return lo, hi, sign * mean


def rule(direction: str, low: float, high: float, mean: float, delta: float) -> tuple[str, str]:
    """The data's label and reason from the unsigned interval and estimate (rules 2-3); '' when undecided."""
    lo, hi, est = _signed(direction, low, high, mean)
    band = f"(-{delta:g}, {delta:g})"
    if direction == "none":
        if -delta < lo and hi < delta:
            return REPRODUCED, f"interval inside {band}: no difference that matters"
        if lo >= delta or hi <= -delta:
            return EFFECT, f"interval wholly beyond {'+' if lo >= delta else '-'}{delta:g}"
        return "", f"interval overlaps the {band} margin and beyond"
    if lo >= delta:
        return REPRODUCED, f"interval at or beyond the smallest effect {delta:g} in the claimed direction"
    if lo > 0 and hi < delta:
        return SMALLER, f"interval excludes 0 in the claimed direction and lies below {delta:g}"
    if lo > 0:
        return UNDETERMINED, f"interval excludes 0 in the claimed direction and still contains {delta:g}"
    if hi < 0:
        return OPPOSITE, "interval excludes 0 on the other side"
    if -delta < lo and hi < delta:
        return NO_EFFECT, f"interval reaches 0 and lies inside {band}"
    return "", f"interval spans 0 and reaches beyond {band}"


def hypothesis_p(values: np.ndarray, direction: str, delta: float) -> dict:
    """p-values of H0, Hd and Heq on the signed differences (NaN without a measured spread)."""
    sign = -1.0 if direction == "decrease" else 1.0
    e = sign * values
    target = delta if direction != "none" or e.mean() >= 0 else -delta
    return {"H0": inference.p_mean(e, 0.0, delta), "Hd": inference.p_mean(e, target, delta),
            "Heq": inference.p_equivalence(e, delta)}


def _zero_spread_label(values: np.ndarray, direction: str, level: float, delta: float) -> tuple[str, str, dict]:
    """All differences equal c: the size is unmeasured; the exact sign test may show a direction
    (c within rounding of 0, relative to delta, is 0: no direction)."""
    n, c = len(values), float(values.mean())
    c = 0.0 if abs(c) <= inference.ZERO_SPREAD_RTOL * delta else c
    sign = -1.0 if direction == "decrease" else 1.0
    p = inference.p_sign(n) if c != 0 else math.nan
    what = f"all {n} paired differences equal {c:.4g}: the spread, and so the size, is unmeasured"
    if direction == "none" or not p < 1 - level:
        return "", what + (f"; sign test p {p:.2g}" if c else ""), {"H0": p}
    label = UNDETERMINED if sign * c > 0 else OPPOSITE
    return label, what + f"; the exact sign test of median 0 (p {p:.2g}) shows the direction", {"H0": p}


def paired_verdict(differences: dict, direction: str, smallest_effect: float, level: float = 0.95,
                   looks: int = 1) -> Verdict:
    """Verdict from per-seed paired differences {seed: treatment - control}; ``looks``: the
    sequential looks planned (the interval's level is already the per-look one)."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction: {direction!r}; valid: {', '.join(DIRECTIONS)}")
    if not smallest_effect > 0:
        raise ValueError(f"smallest_effect: must be > 0, got {smallest_effect!r}")
    finite = {s: float(d) for s, d in differences.items() if math.isfinite(d)}
    values = np.array([finite[s] for s in sorted(finite)], dtype=float)
    n, delta = len(values), float(smallest_effect)
    mean, low, high, sd = inference.t_interval(values, level, delta)
    needed = inference.seeds_for_power(sd, delta, equivalence=direction == "none", alpha=1 - level)
    dropped = len(differences) - n
    notes = [f"{dropped} seed(s) without a finite difference left out"] if dropped else []
    g1, threshold, skewed = inference.skew_flag(values, delta)
    if skewed:
        notes.append(f"skewed differences (G1 {g1:.2f}, beyond {threshold:.2f} = 95 % of normal samples of "
                     f"{n}): the interval may cover less than {100 * level:g} % (docs/coverage.md)")
    base = dict(n=n, mean=mean, low=low, high=high, sd=sd, seeds_needed=needed, differences=finite, level=level,
                direction=direction, smallest_effect=delta, diagnostics=tuple(notes), looks=looks, skewed=bool(skewed))
    if n == 0:
        return Verdict(NOT_RUN, "no paired seed with a finite difference" if dropped else "no paired seed", **base)
    if n < 2:
        return Verdict(UNDERPOWERED, f"{n} paired seed: no interval", **base)
    p = hypothesis_p(values, direction, delta)
    if sd == 0:
        label, reason, p = _zero_spread_label(values, direction, level, delta)
    else:
        label, reason = rule(direction, low, high, mean, delta)
    if not label:
        short = needed is not None and needed > n
        label = UNDERPOWERED if short else INCONCLUSIVE
        reason += (f"; 80 % power at {delta:g} needs {needed} seeds at this spread (have {n})" if short else
                   f"; {n} seeds give 80 % power at {delta:g} at this spread" if needed else "")
    if n < MIN_SEEDS:   # decided by n alone, before the data: no test enters the family
        return Verdict(UNDERPOWERED, f"{n} < {MIN_SEEDS} paired seeds ({label} at face value: {reason})", **base)
    return Verdict(label, reason, p=p, **base)


def stops(v: Verdict) -> bool:
    """Whether a look's verdict stops seeds being added: a decided label on an interval whose skew
    flag did not fire (a flagged interval may undercover, so more seeds are taken while the plan has
    looks left), or a check outside the data that more seeds leave as it is (``NOT_A_TEST``)."""
    return v.verdict in NOT_A_TEST or (v.verdict in DECIDED and not v.skewed)


def replaced(v: Verdict, label: str, reason: str, diagnostic: str | None = None) -> Verdict:
    """The verdict with a label set by a check outside the data; the data's label is kept as face value."""
    diagnostics = v.diagnostics + ((diagnostic,) if diagnostic else ())
    return dataclasses.replace(v, verdict=label, reason=f"{reason}; at face value: {v.verdict} ({v.reason})",
                               face_value=v.face_value or v.verdict, diagnostics=diagnostics)


def with_interim_look(v: Verdict, why: str) -> Verdict:
    """``not judged yet`` for a verdict on a first planned look that is not complete (an interim look
    outside the plan's error bound): its face value kept, no fragility, and no p-value, so it joins no
    family. ``not run`` stays as it is."""
    if v.verdict == NOT_RUN:
        return v
    return dataclasses.replace(replaced(v, NOT_YET, why), p={}, fragile="")


def with_mechanism(v: Verdict, metric: str, value: float, floor: float, rows: str) -> Verdict:
    """``precondition not met`` when the precondition's curve (mean over the seeds of ``rows``) is
    below its floor, or was never measured (NaN); otherwise the verdict with the measured value noted."""
    if math.isfinite(value) and value >= floor:
        return dataclasses.replace(v, diagnostics=v.diagnostics + (f"precondition met: {metric} = {value:.3g} >= "
                                                                   f"{floor:g} on {rows}",))
    if v.verdict == NOT_RUN:
        return v
    return replaced(v, NO_MECHANISM, f"{metric} = {value:.3g} < {floor:g} on {rows}")


def with_construction(v: Verdict) -> Verdict:
    """A construction check (``kind: construction_check``, known before the data) tests no hypothesis:
    it joins no family (no p-value enters Holm or the Bonferroni count). Of no effect (direction
    none) with paired differences all exactly 0 on at least MIN_SEEDS seeds, what the construction
    predicts held on every seed, exactly: a t-interval has nothing to say at zero spread
    (``inconclusive`` at face value, kept); the label states what was seen on these seeds and claims
    no level beyond them."""
    v = dataclasses.replace(v, p={})
    values = list(v.differences.values())
    if v.direction != "none" or v.n < MIN_SEEDS or v.face_value or any(d != 0.0 for d in values):
        return v
    return replaced(v, HOLDS_EXACTLY, f"construction check: all {v.n} paired differences are exactly 0")


def with_censoring(v: Verdict, treatment: int, control: int, metric: str) -> Verdict:
    """One censoring policy (claims and tables): a run that never reached a threshold is counted at
    the budget, a lower bound of its true value, and counted on the paired seeds only. The
    t-interval is not monotone in one difference (raising it raises the spread too), so no label
    is robust to the unknown true values: any label with censored pairs becomes ``inconclusive``,
    its face value kept."""
    if not (treatment or control):
        return v
    note = (f"{treatment} treatment and {control} control run(s) of the paired seeds never reached the threshold "
            f"of {metric}: counted at the budget, a lower bound")
    if v.verdict in (NOT_RUN, UNDERPOWERED, INCONCLUSIVE, *NOT_A_TEST):
        return dataclasses.replace(v, diagnostics=v.diagnostics + (note,))
    return replaced(v, INCONCLUSIVE, "censored runs: the interval cannot bound their true values", note)


def with_family(verdicts: list[Verdict], alpha: float = 0.05) -> list[Verdict]:
    """Familywise labels (Bonferroni intervals at 1 - alpha/(k K)) and Holm-adjusted primary p-values
    over the k verdicts of one family that were judged on data (not ``not run``, not under MIN_SEEDS:
    both fixed before the data; nor construction checks, by kind: ``with_construction``)."""
    judged = [i for i, v in enumerate(verdicts) if v.p]
    k = len(judged)
    primary = [min(1.0, verdicts[i].looks * verdicts[i].p.get(primary_hypothesis(verdicts[i]), math.nan))
               for i in judged]
    adjusted = dict(zip(judged, inference.holm(primary)))
    out = []
    for i, v in enumerate(verdicts):
        if i not in adjusted:
            out.append(dataclasses.replace(v, family=k))
            continue
        level = 1 - alpha / (k * v.looks)
        if v.face_value:   # a check outside the data set the label (precondition, regime, censoring): it stands
            label = v.verdict
        else:
            label = paired_verdict(v.differences, v.direction, v.smallest_effect, level).verdict
        out.append(dataclasses.replace(v, family=k, p_holm=adjusted[i], family_label=label, family_level=level))
    return out


def primary_hypothesis(v: Verdict) -> str:
    """Fixed by the claim's direction, before the data: Heq for a claim of no effect, else H0."""
    return "Heq" if v.direction == "none" else "H0"


def holm_text(v: Verdict) -> str:
    """'H0 p 0.004, Holm 0.021 in a family of 8' (the primary test), or why there is none."""
    h = primary_hypothesis(v)
    raw = v.p.get(h, math.nan)
    if not math.isfinite(raw):
        return f"no test ({v.verdict})"
    looks = f" x{v.looks} looks" if v.looks > 1 else ""
    return f"{h} p {raw:.2g}" + (f", Holm {v.p_holm:.2g} in a family of {v.family}{looks}" if math.isfinite(v.p_holm) else "")


def family_text(v: Verdict) -> str:
    """'reproduced at 99.38 % simultaneous (family of 8)' or why there is none."""
    if not v.family_label:
        return f"not in the family ({v.verdict})"
    looks = f" x {v.looks} looks" if v.looks > 1 else ""
    mark = " (*fragile*)" if v.family_fragile else ""
    return f"{v.family_label}{mark} at {100 * v.family_level:.4g} % simultaneous (family of {v.family}{looks})"
