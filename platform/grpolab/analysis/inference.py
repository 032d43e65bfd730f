"""Paired-seed inference: the interval, p-values, power, multiplicity and sequential looks behind
every verdict. Pure numpy/scipy; no grpolab imports, so it is the ground every verdict stands on.

Detail: docs/studies.md, "grpolab.analysis.inference".
"""

from __future__ import annotations

import functools
import math
import warnings

import numpy as np
from scipy import stats

# The skew diagnostic is a 5 % test of symmetry: |G1| above the 95th percentile of |G1| in normal
# samples of the same n (simulated once per n). At n = 5-10 it flags 24-53 % of lognormal samples,
# whose t-intervals cover only 83-85 % (docs/coverage.md): a warning, not a guarantee.
SKEW_TEST_LEVEL = 0.05
# differences equal up to this relative rounding are a zero-spread sample (the spread is unmeasured)
ZERO_SPREAD_RTOL = 1e-9


def zero_spread(values, scale: float = 0.0) -> bool:
    """Equal up to float rounding: sd <= 1e-9 * max(|values|, scale), where ``scale`` is the size that
    matters (the smallest effect), so rounding noise around 0 is no measured spread either."""
    x = np.asarray(values, dtype=float)
    return len(x) > 1 and float(x.std(ddof=1)) <= ZERO_SPREAD_RTOL * max(float(np.abs(x).max()), abs(scale))


def t_interval(values, level: float = 0.95, scale: float = 0.0) -> tuple[float, float, float, float]:
    """(mean, low, high, sd) of the paired t-interval; NaN bounds with fewer than 2 values; a
    zero-spread sample (``zero_spread``) gives NaN bounds and sd 0: its uncertainty is unmeasured,
    not zero."""
    x = np.asarray(values, dtype=float)
    n = len(x)
    if n == 0:
        return math.nan, math.nan, math.nan, math.nan
    mean = float(x.mean())
    if n < 2:
        return mean, math.nan, math.nan, math.nan
    sd = float(x.std(ddof=1))
    if zero_spread(x, scale):   # equal up to float rounding (0.3 + 0.04 - 0.3)
        return mean, math.nan, math.nan, 0.0
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * sd / math.sqrt(n)
    return mean, mean - half, mean + half, sd


def skewness(values, scale: float = 0.0) -> float:
    """Adjusted Fisher-Pearson skewness G1 = sqrt(n(n-1))/(n-2) * m3 / m2^1.5 (NaN below 3 values
    or with zero spread)."""
    x = np.asarray(values, dtype=float)
    if len(x) < 3 or zero_spread(x, scale):
        return math.nan
    with warnings.catch_warnings():    # near-identical values: scipy warns of precision loss
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(stats.skew(x, bias=False))


@functools.lru_cache(maxsize=64)
def skew_threshold(n: int, reps: int = 40_000) -> float:
    """95th percentile of |G1| over normal samples of size n (fixed seed: the same every time)."""
    x = np.random.default_rng(12345).normal(size=(reps, n))
    return float(np.quantile(np.abs(stats.skew(x, axis=1, bias=False)), 1 - SKEW_TEST_LEVEL))


def skew_flag(values, scale: float = 0.0) -> tuple[float, float, bool]:
    """(G1, threshold, flagged): flagged when the sample is more skewed than 95 % of normal ones."""
    g1 = skewness(values, scale)
    if not math.isfinite(g1):
        return g1, math.nan, False
    threshold = skew_threshold(len(values))
    return g1, threshold, abs(g1) > threshold


def p_mean(values, mu0: float = 0.0, scale: float = 0.0) -> float:
    """Two-sided paired t-test of mean ``mu0``: p < 1 - level exactly when the level-``level``
    t-interval excludes mu0 (NaN without a measured spread)."""
    mean, _, _, sd = t_interval(values, scale=scale)
    n = len(values)
    if n < 2 or not sd > 0:
        return math.nan
    return float(2 * stats.t.sf(abs(mean - mu0) / (sd / math.sqrt(n)), n - 1))


def p_sign(n: int) -> float:
    """Exact two-sided sign test when all n differences share one sign: 2 / 2^n (ties excluded)."""
    return min(1.0, 2.0 / 2 ** n) if n > 0 else math.nan


def p_equivalence(values, delta: float) -> float:
    """TOST against (-delta, delta), scaled to the two-sided level: 2 * max(p_low, p_high), capped
    at 1, so p < 1 - level exactly when the level-``level`` t-interval lies inside the margin."""
    mean, _, _, sd = t_interval(values, scale=delta)
    n = len(values)
    if n < 2 or not sd > 0:
        return math.nan
    se = sd / math.sqrt(n)
    p_low = stats.t.sf((mean + delta) / se, n - 1)      # H0: mean <= -delta
    p_high = stats.t.cdf((mean - delta) / se, n - 1)    # H0: mean >= +delta
    return float(min(1.0, 2 * max(p_low, p_high)))


def power_direction(n: int, sd: float, delta: float, alpha: float = 0.05) -> float:
    """Power of the two-sided paired t-test at level alpha when the true mean is delta:
    P(|T| > t_{n-1,1-alpha/2}) with T ~ noncentral t(n-1, delta sqrt(n) / sd)."""
    if n < 2 or not (sd > 0 and delta > 0):
        return math.nan
    crit, nc = stats.t.ppf(1 - alpha / 2, n - 1), delta * math.sqrt(n) / sd
    wrong_side = stats.nct.cdf(-crit, n - 1, nc)    # scipy gives NaN far in the tail, where it is ~0
    return float(stats.nct.sf(crit, n - 1, nc) + (0.0 if math.isnan(wrong_side) else wrong_side))


def power_equivalence(n: int, sd: float, delta: float, alpha: float = 0.05) -> float:
    """Lower bound on the power of the TOST (each side at alpha/2) when the true mean is 0:
    1 - 2 P(T' < t_{n-1,1-alpha/2}), T' ~ noncentral t(n-1, delta sqrt(n) / sd)."""
    if n < 2 or not (sd > 0 and delta > 0):
        return math.nan
    crit, nc = stats.t.ppf(1 - alpha / 2, n - 1), delta * math.sqrt(n) / sd
    below = stats.nct.cdf(crit, n - 1, nc)
    return float(max(0.0, 1 - 2 * (0.0 if math.isnan(below) else below)))


def seeds_for_power(sd: float, delta: float, equivalence: bool = False, power: float = 0.8,
                    alpha: float = 0.05, max_seeds: int = 10_000) -> int | None:
    """The smallest n >= 3 whose t-test power (above) reaches ``power`` at the observed sd (None when
    the spread is unmeasured or delta is not positive; ``max_seeds`` caps the search)."""
    if not (math.isfinite(sd) and sd > 0 and delta > 0):
        return None
    fn = power_equivalence if equivalence else power_direction
    lo, hi = 3, 3
    while not fn(hi, sd, delta, alpha) >= power:   # doubling, then bisection: power is monotone in n
        if hi >= max_seeds:
            return max_seeds
        lo, hi = hi, min(2 * hi, max_seeds)
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if not fn(mid, sd, delta, alpha) >= power else (lo, mid)
    return hi


def holm(pvalues) -> list[float]:
    """Holm's step-down adjusted p-values (NaN stays NaN and is not counted in the family):
    p_(i)^adj = max_{j <= i} min(1, (m - j + 1) p_(j)) over the m finite p-values in ascending order."""
    finite = [(p, i) for i, p in enumerate(pvalues) if p is not None and math.isfinite(p)]
    out = [math.nan] * len(pvalues)
    m, running = len(finite), 0.0
    for rank, (p, i) in enumerate(sorted(finite)):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


def sequential_level(level: float, looks: int) -> float:
    """Per-look confidence level that keeps the familywise error over ``looks`` planned looks at
    1 - level (Bonferroni alpha spending: alpha / K at each look; conservative, valid for any
    stopping rule that stops at one of the planned looks)."""
    if looks < 1:
        raise ValueError(f"looks: must be >= 1, got {looks}")
    return 1 - (1 - level) / looks


def planned_looks(start: int, batch: int, max_seeds: int) -> list[int]:
    """Seed counts at which a sequential verdict looks: start, start + batch, ..., max_seeds."""
    if batch < 1 or start < 2 or max_seeds < start:
        raise ValueError(f"need batch >= 1 and 2 <= start <= max_seeds, got start={start}, batch={batch}, "
                         f"max_seeds={max_seeds}")
    looks = list(range(start, max_seeds + 1, batch))
    return looks if looks[-1] == max_seeds else [*looks, max_seeds]
