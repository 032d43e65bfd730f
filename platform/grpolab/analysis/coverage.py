"""Measured coverage of the verdict interval, and the error rate of sequential verdicts.

Detail: docs/coverage.md, "grpolab.analysis.coverage".
"""

from __future__ import annotations

import math
import warnings
from typing import NamedTuple

import numpy as np
from scipy import stats

from grpolab.analysis.inference import ZERO_SPREAD_RTOL, planned_looks, sequential_level, skew_threshold
from grpolab.studies.until_decided import rows_needed

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


class SeedSchedule(NamedTuple):
    """A sequential plan's looks: at ``start`` seeds, then every ``batch`` more, up to ``max_seeds``."""
    start: int
    batch: int
    max_seeds: int


def sequential_error(schedule: SeedSchedule, reps: int = 20_000, level: float = 0.95, adjusted: bool = True,
                     seed: int = 0, df_draw=None) -> float:
    """Probability that some planned look's interval excludes the true mean 0 (a false 'direction
    holds' either way). Normal differences unless ``df_draw(rng, shape)`` is given."""
    max_seeds = schedule.max_seeds
    rng = np.random.default_rng(seed)
    x = df_draw(rng, (reps, max_seeds)) if df_draw else rng.normal(0.0, 1.0, (reps, max_seeds))
    looks = planned_looks(*schedule)
    per_look = sequential_level(level, len(looks)) if adjusted else level
    wrong = np.zeros(reps, bool)
    for n in looks:
        low, high = t_bounds(x[:, :n], per_look)
        wrong |= (low > 0) | (high < 0)
    return float(wrong.mean())


# Decided labels of ``verdicts.rule`` (direction: increase), coded; 0: undecided (undetermined,
# inconclusive, underpowered: more seeds are added)
REPRODUCED, SMALLER, NO_EFFECT, OPPOSITE = 1, 2, 3, 4
LADDER_LOOKS = (16, 32, 48, 64)   # the shipped ladder's plan (studies/dapo_table1.yaml)
LADDER_SCENARIOS = {   # true paired effect of each of the 5 rungs on the previous one
    "no rung has an effect": (0.0,) * 5,
    "every rung at the smallest effect": (0.02,) * 5,
    "mixed: 0, 0.01, 0.02, -0.02, 0.08": (0.0, 0.01, 0.02, -0.02, 0.08),
}


def decided_labels(low: np.ndarray, high: np.ndarray, delta: float) -> np.ndarray:
    """``verdicts.rule`` vectorised for a claimed increase: the decided label's code, else 0."""
    codes = np.zeros(low.shape, int)
    codes[(low > -delta) & (high < delta) & (low <= 0)] = NO_EFFECT
    codes[high < 0] = OPPOSITE
    codes[(low > 0) & (high < delta)] = SMALLER
    codes[low >= delta] = REPRODUCED
    return codes


def wrong_labels(codes: np.ndarray, truth: np.ndarray, delta: float) -> np.ndarray:
    """Decided labels the true effect contradicts: reproduced below delta, smaller than claimed
    outside (0, delta), no effect that matters at |effect| >= delta, opposite at effect >= 0."""
    return (((codes == REPRODUCED) & (truth < delta)) | ((codes == SMALLER) & ((truth <= 0) | (truth >= delta)))
            | ((codes == NO_EFFECT) & (np.abs(truth) >= delta)) | ((codes == OPPOSITE) & (truth >= 0)))


def _ladder_noise(rng, rows: str, shape) -> np.ndarray:
    """Row noise of unit paired sd: each paired difference e[r] - e[r-1] has sd 1. The skewed rows
    alternate their sign by rung, so that a difference adds two same-signed skews (G1 ~1.0, gamma)."""
    if rows == "normal":
        return rng.normal(0.0, 1.0, shape) / math.sqrt(2)
    if rows == "t3":
        return rng.standard_t(3, shape) / math.sqrt(3) / math.sqrt(2)
    if rows == "skewed (gamma 2)":
        sign = np.where(np.arange(shape[1]) % 2 == 0, 1.0, -1.0)[None, :, None]
        return sign * (rng.gamma(2.0, 1.0, shape) - 2.0) / math.sqrt(2.0) / math.sqrt(2)
    raise ValueError(f"rows: {rows!r}; valid: normal, t3, skewed (gamma 2)")


class LadderPlan(NamedTuple):
    """How a ladder decides: paired seeds at each look, the smallest effect that matters, the cap
    on rows run, and the per-look level (None: 1 - 0.05/K over the K looks)."""
    looks: tuple = LADDER_LOOKS
    delta: float = 0.02
    max_rows: int | None = 340
    per_look_level: float | None = None


def ladder_plan_error(effects, sd: float = 0.048, plan: LadderPlan = LadderPlan(), reps: int = 4000, seed: int = 0,
                      rows: str = "normal") -> dict:
    """A ladder of len(effects) + 1 rungs run as ``until_decided`` runs it (``plan``: looks ``looks``,
    smallest effect ``delta``, at most ``max_rows`` rows): rows x[r, s] = sum of the
    first r effects + noise (paired sd ``sd``); look j judges each rung on the seeds of the last look
    its pair ran, at 1 - 0.05/K (or ``per_look_level``); the next look runs ``rows_needed`` of the
    undecided rungs unless it would pass ``max_rows``. Returns the rates, over ``reps`` ladders, of
    a wrong decided label on each rung, on any rung, and on any rung's familywise label (the
    Bonferroni label at 1 - 0.05/(rungs x K) on the same seeds), with the mean rows run."""
    looks, delta, max_rows, per_look_level = plan
    rng, k, truth = np.random.default_rng(seed), len(effects), np.asarray(effects, float)
    x = np.cumsum(np.concatenate([np.zeros(1), truth]))[None, :, None] + sd * _ladder_noise(rng, rows, (reps, k + 1, looks[-1]))
    d = x[:, 1:] - x[:, :-1]                                             # (reps, k, seeds)
    level = per_look_level or sequential_level(0.95, len(looks))
    family = 1 - 0.05 / (k * len(looks))
    by_look = [[decided_labels(*t_bounds(d[:, i, :n], lv), delta) for i in range(k)] for lv in (level, family)
               for n in looks]
    labels = np.array(by_look[:len(looks)]).transpose(2, 1, 0)          # (reps, k, looks)
    fw = np.array(by_look[len(looks):]).transpose(2, 1, 0)
    last = np.zeros((reps, k), int)                                     # the look each pair last ran
    used = np.full(reps, (k + 1) * looks[0])
    running = np.ones(reps, bool)
    for j in range(len(looks) - 1):
        for r in np.flatnonzero(running):
            now = labels[r, np.arange(k), last[r]]
            open_rungs = [i + 1 for i in range(k) if now[i] == 0]
            need = rows_needed(open_rungs) if open_rungs else ()
            more = len(need) * (looks[j + 1] - looks[j])
            if not open_rungs or (max_rows is not None and used[r] + more > max_rows):
                running[r] = False
                continue
            used[r] += more
            for i in range(1, k + 1):
                if i - 1 in need and i in need:
                    last[r, i - 1] = j + 1
    pick = lambda a: np.take_along_axis(a, last[..., None], 2)[..., 0]   # noqa: E731
    wrong, wrong_fw = wrong_labels(pick(labels), truth, delta), wrong_labels(pick(fw), truth, delta)
    return {"per_rung": wrong.mean(0).tolist(), "any_rung": float(wrong.any(1).mean()),
            "any_rung_familywise": float(wrong_fw.any(1).mean()), "decided": float((pick(labels) > 0).mean()),
            "rows": float(used.mean()), "reps": reps, "level": level}


def markdown_ladder(reps: int = 4000) -> str:
    """The ladder plan's table: each scenario at the design's paired sd 0.048 with three row shapes,
    and normal rows at 0.035, the spread the v4 run's intervals imply."""
    lines = ["| true effects of the 5 rungs | rows | paired sd | wrong label, worst rung | wrong label, any rung | "
             "wrong familywise label, any rung | rungs decided | mean rows |", "|---|---|---|---|---|---|---|---|"]
    for name, effects in LADDER_SCENARIOS.items():
        for rows, sd in (("normal", 0.048), ("t3", 0.048), ("skewed (gamma 2)", 0.048), ("normal", 0.035)):
            e = ladder_plan_error(effects, sd, reps=reps, rows=rows)
            lines.append(f"| {name} | {rows} | {sd:g} | {100 * max(e['per_rung']):.2f} % | {100 * e['any_rung']:.2f} % | "
                         f"{100 * e['any_rung_familywise']:.2f} % | {100 * e['decided']:.0f} % | {e['rows']:.0f} |")
    return "\n".join(lines)


def markdown(rows: list[dict]) -> str:
    lines = ["| differences | n | coverage | skew flagged | coverage when not flagged | zero spread |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['generator']} | {r['n']} | {100 * r['coverage']:.1f} % | {100 * r['skew_flagged']:.0f} % | "
                     f"{100 * r['coverage_unflagged']:.1f} % | {100 * r['zero_spread']:.1f} % |")
    return "\n".join(lines)


if __name__ == "__main__":
    import sys
    if sys.argv[1:] == ["ladder"]:
        print(markdown_ladder())
        sys.exit(0)
    print(markdown(coverage_table()))
    for start, batch, top in ((5, 1, 20), (8, 2, 16), (8, 4, 24)):
        print(f"sequential start {start} batch {batch} max {top}: adjusted "
              f"{sequential_error(SeedSchedule(start, batch, top)):.4f}, "
              f"naive {sequential_error(SeedSchedule(start, batch, top), adjusted=False):.4f}")
    print(markdown_ladder())
