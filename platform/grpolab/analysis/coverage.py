"""Measured coverage of the verdict interval, and the error rate of sequential verdicts.

An interval states a level only where a simulation shows it keeps that level at the seed counts
used. ``coverage_table`` draws many paired samples of n seeds from each generator below (the
true mean of the paired difference known), computes the verdict's paired t-interval
(``inference.t_interval``, vectorised here) and counts how often it covers the truth. The
generators are the shapes grpolab's paired differences really take:

- ``normal``, ``t3``: the textbook case and heavy tails;
- ``pass@1, 64 prompts x 4``: a held-out pass@1 of each arm on the same 64 prompts (per-prompt
  difficulty shared by both arms and varying by seed; 4 samples per prompt; resolution 1/256);
- ``steps to threshold (eval every 10)``: steps until an accuracy threshold, a multiple of 10,
  many ties;
- ``clip fraction near 0``: fractions of clipped tokens of order 1e-3, bounded below by 0;
- ``lognormal``: strong skew, where the t-interval's assumption fails (reported, not asserted).

``sequential_error`` measures how often ``--until-decided`` (looks at start, start+batch, ...,
max seeds; per-look level from ``inference.sequential_level``) ever excludes a true null, against
naive re-testing at the nominal level at every look.

``python -m grpolab.analysis.coverage`` prints the table of docs/coverage.md.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from scipy import stats

from grpolab.analysis.inference import ZERO_SPREAD_RTOL, planned_looks, sequential_level, skew_threshold

SEED_COUNTS = (5, 8, 10)


def _normal(rng, reps, n):
    return rng.normal(0.05, 1.0, (reps, n)), 0.05


def _t3(rng, reps, n):
    return 0.05 + rng.standard_t(3, (reps, n)), 0.05


def _lognormal(rng, reps, n):
    return rng.lognormal(0.0, 1.0, (reps, n)), math.exp(0.5)


def _pass_at_1(rng, reps, n, prompts=64, samples=4, effect=0.3):
    """Per seed s and prompt j: logit q_sj = a_s + b_j (seed skill, prompt difficulty); treatment adds
    ``effect`` on the logit scale; each arm's pass@1 is Binomial(samples, sigmoid(q)) / samples
    averaged over prompts. True mean: E[sigmoid(q + effect) - sigmoid(q)] by a large draw."""
    def draw(shape):
        skill = rng.normal(-0.8, 0.5, (*shape, 1))
        hard = rng.normal(0.0, 1.5, (*shape, prompts))
        return skill + hard
    q = draw((reps, n))
    p_c, p_t = 1 / (1 + np.exp(-q)), 1 / (1 + np.exp(-(q + effect)))
    arm = lambda p: rng.binomial(samples, p).mean(-1) / samples   # noqa: E731
    big = draw((200_000,))
    truth = float((1 / (1 + np.exp(-(big + effect))) - 1 / (1 + np.exp(-big))).mean())
    return arm(p_t) - arm(p_c), truth


def _steps_to(rng, reps, n, every=10):
    """Steps to a threshold checked every 10 steps: ceil(rate * Gamma(4) seed speed + Exp noise) x 10."""
    def draw(shape):
        speed = rng.gamma(4.0, 1.0, shape)
        control = every * np.ceil(3.0 * speed + rng.exponential(1.0, shape))
        treatment = every * np.ceil(2.4 * speed + rng.exponential(1.0, shape))
        return treatment - control
    return draw((reps, n)), float(draw((2_000_000,)).mean())


def _clip_fraction(rng, reps, n):
    """Fractions of clipped tokens: seed-level scale shared by both arms, Gamma(1.5) noise per run."""
    def draw(shape):
        scale = rng.lognormal(0.0, 0.4, shape) * 1e-3
        return rng.gamma(1.5, 1.5 * scale) - rng.gamma(1.5, scale)
    return draw((reps, n)), float(draw((2_000_000,)).mean())


GENERATORS = {
    "normal": (_normal, True),
    "t3": (_t3, True),
    "pass@1, 64 prompts x 4": (_pass_at_1, True),
    "steps to threshold (eval every 10)": (_steps_to, True),
    "clip fraction near 0": (_clip_fraction, True),
    "lognormal (strong skew)": (_lognormal, False),
}   # name -> (generator, whether the t-interval's assumptions hold well enough to assert its level)


def t_bounds(x: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    """Row-wise paired t-interval of (reps, n) samples (zero-spread rows: NaN, never covering)."""
    n = x.shape[1]
    mean, sd = x.mean(1), x.std(1, ddof=1)
    half = stats.t.ppf(0.5 + level / 2, n - 1) * sd / math.sqrt(n)
    half = np.where(sd > ZERO_SPREAD_RTOL * np.abs(x).max(1), half, np.nan)
    return mean - half, mean + half


def coverage(name: str, n: int, reps: int = 4000, level: float = 0.95, seed: int = 0) -> dict:
    """Coverage of the verdict interval for one generator and seed count, with the fraction of
    samples the skew diagnostic flags and the coverage among the unflagged ones."""
    gen, _ = GENERATORS[name]
    x, truth = gen(np.random.default_rng(seed), reps, n)
    low, high = t_bounds(x, level)
    covered = (low <= truth) & (truth <= high)
    with np.errstate(all="ignore"), warnings.catch_warnings():   # zero-spread rows: no skewness (not flagged)
        warnings.simplefilter("ignore", RuntimeWarning)
        flagged = np.abs(stats.skew(x, axis=1, bias=False)) > skew_threshold(n)
    kept = covered[~flagged]
    return {"generator": name, "n": n, "reps": reps, "coverage": float(covered.mean()),
            "mc_se": float(math.sqrt(level * (1 - level) / reps)), "skew_flagged": float(flagged.mean()),
            "coverage_unflagged": float(kept.mean()) if kept.size else math.nan,
            "zero_spread": float((x.std(1) == 0).mean())}


def coverage_table(reps: int = 4000, level: float = 0.95) -> list[dict]:
    return [coverage(name, n, reps, level) for name in GENERATORS for n in SEED_COUNTS]


def sequential_error(start: int, batch: int, max_seeds: int, reps: int = 20_000, level: float = 0.95,
                     adjusted: bool = True, seed: int = 0, df_draw=None) -> float:
    """Probability that some planned look's interval excludes the true mean 0 (a false 'direction
    holds' either way). Normal differences unless ``df_draw(rng, shape)`` is given."""
    rng = np.random.default_rng(seed)
    x = df_draw(rng, (reps, max_seeds)) if df_draw else rng.normal(0.0, 1.0, (reps, max_seeds))
    looks = planned_looks(start, batch, max_seeds)
    per_look = sequential_level(level, len(looks)) if adjusted else level
    wrong = np.zeros(reps, bool)
    for n in looks:
        low, high = t_bounds(x[:, :n], per_look)
        wrong |= (low > 0) | (high < 0)
    return float(wrong.mean())


def markdown(rows: list[dict]) -> str:
    lines = ["| differences | n | coverage | skew flagged | coverage when not flagged | zero spread |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['generator']} | {r['n']} | {100 * r['coverage']:.1f} % | {100 * r['skew_flagged']:.0f} % | "
                     f"{100 * r['coverage_unflagged']:.1f} % | {100 * r['zero_spread']:.1f} % |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown(coverage_table()))
    for start, batch, top in ((5, 1, 20), (8, 2, 16), (8, 4, 24)):
        print(f"sequential start {start} batch {batch} max {top}: adjusted "
              f"{sequential_error(start, batch, top):.4f}, naive {sequential_error(start, batch, top, adjusted=False):.4f}")
