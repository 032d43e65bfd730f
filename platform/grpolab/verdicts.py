"""Verdicts on paired seeds: does a published direction hold, with stated uncertainty?

A claim compares a treatment with a control on the same seeds (same warm start, prompt stream and
eval set per seed), so the unit of evidence is the per-seed paired difference

    d_s = treatment_s - control_s,        s = 1..n

signed so that the published direction is positive: e_s = +d_s for ``increase``, -d_s for
``decrease``. The interval is scipy's bias-corrected and accelerated (BCa) bootstrap of the mean of
e over the seeds (``n_resamples`` resamples, fixed random state, so a verdict is reproducible).

Rules, with delta the smallest effect that matters (pre-registered with the claim):

- fewer than ``MIN_SEEDS`` paired seeds -> ``inconclusive (underpowered)``, whatever the interval;
- ``increase``/``decrease``: ``contradicted`` when the upper end of the interval of e is below
  delta (every effect the data allow is smaller than what matters, or goes the other way);
  ``reproduced`` when the lower end is above 0 (the direction holds) and the upper end reaches
  delta; otherwise ``inconclusive``;
- ``none`` (no effect expected): ``reproduced`` when the whole interval lies inside (-delta, delta);
  ``contradicted`` when it lies wholly outside (lower end >= delta or upper end <= -delta);
  otherwise ``inconclusive``.

Power: the seeds a two-sided 5 % test needs to detect delta with 80 % power at the observed spread
of the paired differences, n = ceil(((z_0.975 + z_0.8) * sd / delta)^2) (normal approximation;
at least MIN_SEEDS).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

MIN_SEEDS = 5
DIRECTIONS = ("increase", "decrease", "none")
REPRODUCED, CONTRADICTED, INCONCLUSIVE = "reproduced", "contradicted", "inconclusive"
UNDERPOWERED = "inconclusive (underpowered)"


@dataclass(frozen=True)
class Verdict:
    verdict: str
    reason: str
    n: int                       # paired seeds used
    n_resamples: int
    mean: float                  # mean paired difference (treatment - control), unsigned
    low: float                   # BCa interval of the mean paired difference, unsigned
    high: float
    sd: float                    # sample std of the paired differences
    seeds_needed: int | None     # for 80 % power at the smallest effect (None: no spread measured)
    differences: dict = field(default_factory=dict)    # seed -> paired difference
    level: float = 0.95


def bca_interval(values: np.ndarray, level: float, n_resamples: int, seed: int) -> tuple[float, float]:
    """BCa bootstrap interval of the mean; a degenerate sample (all equal) has the point interval."""
    if len(values) < 2:
        return math.nan, math.nan
    if np.ptp(values) == 0:
        return float(values[0]), float(values[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # BCa warns on near-degenerate jackknife; the interval is still reported
        res = stats.bootstrap((values,), np.mean, method="BCa", n_resamples=n_resamples,
                              confidence_level=level, random_state=np.random.default_rng(seed))
    low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if not (math.isfinite(low) and math.isfinite(high)):   # BCa undefined: fall back to percentile, said in reason
        res = stats.bootstrap((values,), np.mean, method="percentile", n_resamples=n_resamples,
                              confidence_level=level, random_state=np.random.default_rng(seed))
        low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return low, high


def seeds_for_power(sd: float, smallest_effect: float, alpha: float = 0.05, power: float = 0.8) -> int | None:
    """n = ceil(((z_{1-alpha/2} + z_power) * sd / delta)^2), at least MIN_SEEDS."""
    if not math.isfinite(sd) or smallest_effect <= 0:
        return None
    z = stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)
    return max(MIN_SEEDS, math.ceil((z * sd / smallest_effect) ** 2))


def _rule(direction: str, low: float, high: float, delta: float) -> tuple[str, str]:
    if direction == "none":
        if -delta < low and high < delta:
            return REPRODUCED, f"CI inside (-{delta:g}, {delta:g}): no effect that matters"
        if low >= delta or high <= -delta:
            return CONTRADICTED, f"CI wholly outside (-{delta:g}, {delta:g}): an effect that matters"
        return INCONCLUSIVE, f"CI overlaps the (-{delta:g}, {delta:g}) band and beyond"
    sign = 1.0 if direction == "increase" else -1.0
    lo, hi = sorted((sign * low, sign * high))    # the interval of the signed effect e
    if hi < delta:
        return CONTRADICTED, ("CI in the opposite direction" if hi < 0 else
                              f"CI below the smallest effect that matters ({delta:g})")
    if lo > 0:
        return REPRODUCED, "CI excludes 0 in the published direction"
    return INCONCLUSIVE, "CI spans 0"


def paired_verdict(differences: dict, direction: str, smallest_effect: float, level: float = 0.95,
                   n_resamples: int = 9999, seed: int = 0) -> Verdict:
    """Verdict from per-seed paired differences {seed: treatment - control}."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction: {direction!r}; valid: {', '.join(DIRECTIONS)}")
    finite = {s: float(d) for s, d in differences.items() if math.isfinite(d)}
    values = np.array([finite[s] for s in sorted(finite)], dtype=float)
    n = len(values)
    mean = float(values.mean()) if n else math.nan
    sd = float(values.std(ddof=1)) if n > 1 else math.nan
    low, high = bca_interval(values, level, n_resamples, seed)
    needed = seeds_for_power(sd, smallest_effect)
    dropped = len(differences) - n
    note = f"; {dropped} seed(s) without a finite difference left out" if dropped else ""
    if n < 2:
        return Verdict(UNDERPOWERED, f"{n} paired seed(s): no interval" + note, n, n_resamples, mean,
                       low, high, sd, needed, finite, level)
    verdict, reason = _rule(direction, low, high, smallest_effect)
    if n < MIN_SEEDS:
        verdict, reason = UNDERPOWERED, f"{n} < {MIN_SEEDS} paired seeds ({verdict} at face value: {reason})"
    return Verdict(verdict, reason + note, n, n_resamples, mean, low, high, sd, needed, finite, level)


def ladder_step(rows, cfg, rung: int, objective_direction: str | None = None) -> tuple[Verdict, str]:
    """Verdict that rung ``rung`` improves on rung ``rung - 1`` of a ladder, paired by seed.

    The direction is the published one when both rungs carry a published value (a published
    drop is tested as a drop), otherwise the study objective's (maximize -> increase)."""
    now, prev = cfg.rungs[rung], cfg.rungs[rung - 1]
    if now.published is not None and prev.published is not None and now.published != prev.published:
        direction = "increase" if now.published > prev.published else "decrease"
    else:
        objective = objective_direction or cfg.objectives[0].direction
        direction = "increase" if objective == "maximize" else "decrease"
    done = rows[rows.state == "COMPLETE"]
    mine = done[done.rung == rung].set_index("seed")["value"]
    before = done[done.rung == rung - 1].set_index("seed")["value"]
    diffs = {int(s): float(mine[s] - before[s]) for s in sorted(set(mine.index) & set(before.index))}
    return paired_verdict(diffs, direction, float(getattr(cfg, "smallest_effect", 0.0) or 0.0)), direction
