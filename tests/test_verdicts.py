"""Verdict logic on synthetic paired data with known effects, and the saturating compute fit on
synthetic curves with known parameters (no training: pure statistics)."""

import math

import numpy as np
import pytest

from grpolab.scaling import fit_curve, fit_seeds, saturating
from grpolab.verdicts import (CONTRADICTED, INCONCLUSIVE, REPRODUCED, UNDERPOWERED, paired_verdict,
                              seeds_for_power)


def paired(effect, sd, n, seed=0):
    """{seed: treatment - control} for n seeds: shared per-seed baseline noise cancels in the pair."""
    rng = np.random.default_rng(seed)
    base = rng.normal(0.3, 0.2, n)                     # large seed-to-seed spread, shared by both arms
    noise = rng.normal(0, sd, n)
    noise = (noise - noise.mean()) / noise.std(ddof=1) * sd    # sample mean exactly `effect`, sample sd exactly `sd`
    control = base
    treatment = base + effect + noise
    return {s: t - c for s, (t, c) in enumerate(zip(treatment, control))}


def test_clear_positive_effect_is_reproduced_and_its_interval_covers_the_truth():
    v = paired_verdict(paired(0.10, 0.03, 8), "increase", smallest_effect=0.02, n_resamples=2000)
    assert v.verdict == REPRODUCED and v.n == 8 and v.n_resamples == 2000
    assert v.low > 0 and v.low < 0.10 < v.high
    assert v.mean == pytest.approx(0.10) and v.sd == pytest.approx(0.03)


def test_clear_negative_effect_contradicts_an_increase_and_reproduces_a_decrease():
    diffs = paired(-0.10, 0.03, 8, seed=1)
    up = paired_verdict(diffs, "increase", 0.02, n_resamples=2000)
    down = paired_verdict(diffs, "decrease", 0.02, n_resamples=2000)
    assert up.verdict == CONTRADICTED and "opposite" in up.reason and up.high < 0
    assert down.verdict == REPRODUCED
    assert (up.low, up.high) == (down.low, down.high)     # the interval is of the unsigned difference


def test_null_effect_tight_interval_rules_out_what_matters_wide_interval_is_inconclusive():
    tight = paired(0.0, 0.005, 10, seed=2)
    assert paired_verdict(tight, "increase", 0.05, n_resamples=2000).verdict == CONTRADICTED
    assert paired_verdict(tight, "none", 0.05, n_resamples=2000).verdict == REPRODUCED
    wide = paired(0.0, 0.2, 6, seed=3)
    v = paired_verdict(wide, "increase", 0.05, n_resamples=2000)
    assert v.verdict == INCONCLUSIVE and v.low < 0 < v.high
    # the spread of these differences needs far more than 6 seeds to see 0.05
    assert v.seeds_needed > 20
    assert v.seeds_needed == math.ceil(((1.959964 + 0.841621) * v.sd / 0.05) ** 2)


def test_fewer_than_five_seeds_is_underpowered_even_with_a_clear_effect():
    v = paired_verdict(paired(0.5, 0.01, 4, seed=4), "increase", 0.02, n_resamples=1000)
    assert v.verdict == UNDERPOWERED and "4 < 5" in v.reason and "reproduced at face value" in v.reason
    assert v.low > 0
    one = paired_verdict({0: 0.3}, "increase", 0.02)
    assert one.verdict == UNDERPOWERED and math.isnan(one.low)


def test_identical_differences_give_a_point_interval_and_non_finite_seeds_are_left_out():
    v = paired_verdict({s: 0.0 for s in range(5)} | {9: math.inf}, "none", 0.02)
    assert (v.low, v.high) == (0.0, 0.0) and v.verdict == REPRODUCED and v.n == 5
    assert "1 seed(s) without a finite difference" in v.reason


def test_bootstrap_is_reproducible_and_bad_direction_raises():
    d = paired(0.05, 0.05, 7, seed=5)
    a, b = paired_verdict(d, "increase", 0.01), paired_verdict(d, "increase", 0.01)
    assert (a.low, a.high) == (b.low, b.high)
    with pytest.raises(ValueError, match="direction"):
        paired_verdict(d, "up", 0.01)
    assert seeds_for_power(0.0, 0.1) == 5 and seeds_for_power(math.nan, 0.1) is None


TRUE = {"R0": 0.2, "A": 0.8, "C_mid": 50.0, "B": 1.8}


def test_saturating_curve_has_its_defining_points():
    c = np.array([1e-6, 50.0, 1e9])
    r = saturating(c, *TRUE.values())
    assert r[0] == pytest.approx(0.2, abs=1e-6) and r[1] == pytest.approx(0.5) and r[2] == pytest.approx(0.8, abs=1e-6)


def test_fit_recovers_known_parameters_from_a_noise_free_curve():
    c = np.linspace(5, 400, 25)
    fit = fit_curve(c, saturating(c, *TRUE.values()))
    for name, value in TRUE.items():
        assert fit[name] == pytest.approx(value, rel=1e-3)


def test_seed_fits_give_intervals_that_cover_the_truth_with_r0_pinned():
    rng = np.random.default_rng(0)
    c = np.array([0, 10, 20, 40, 60, 80, 120, 160, 240, 320], float)
    curves = {}
    for seed in range(6):
        values = saturating(np.where(c == 0, 1e-9, c), *TRUE.values()) + rng.normal(0, 0.01, len(c))
        values[0] = TRUE["R0"]
        curves[seed] = (c, values)
    fit = fit_seeds(curves)
    assert fit.fitted == 6 and fit.seeds == 6
    for name in ("A", "C_mid"):
        mean, half = fit.params[name]
        assert abs(mean - TRUE[name]) <= half + 1e-9, name
        assert half < 0.1 * TRUE[name]
    assert fit.params["R0"] == (pytest.approx(0.2), pytest.approx(0.0))


def test_too_few_points_give_no_fit():
    assert fit_curve([10, 20, 30], [0.1, 0.2, 0.3]) is None
    assert fit_seeds({0: ([0, 10], [0.1, 0.2])}).fitted == 0


def test_ladder_table_verdict_column_tests_the_published_direction_per_rung():
    import pandas as pd

    from grpolab.study_tables import ladder_table
    from grpolab.study_config import Objective, Rung, StudyConfig
    cfg = StudyConfig(name="x", kind="ladder", path="x", base={}, seeds=tuple(range(6)),
                      objectives=(Objective("final:eval/pass_at_1"),), smallest_effect=0.02,
                      rungs=(Rung("a", {}, 30.0), Rung("b", {"k": 1}, 36.0), Rung("c", {"k": 2}, 20.0),
                             Rung("d", {"k": 3}, None)))
    base = [0.1, 0.3, 0.2, 0.25, 0.15, 0.35]                 # big seed-to-seed spread, shared by all rungs
    bump = [0.09, 0.11, 0.10, 0.12, 0.08, 0.10]              # rung b: a clear +0.1 on every seed
    wobble = [0.05, -0.04, 0.03, -0.05, 0.04, -0.03]         # rung c vs b: no effect either way
    values = {0: base, 1: [b + d for b, d in zip(base, bump)]}
    values[2] = [v + w for v, w in zip(values[1], wobble)]
    values[3] = values[2][:4] + [math.nan, math.nan]
    rows = pd.DataFrame([{"rung": r, "seed": s, "state": "COMPLETE" if math.isfinite(v) else "FAIL", "value": v}
                         for r, vs in values.items() for s, v in enumerate(vs)])
    t = ladder_table(rows, cfg)
    assert t.loc[1, "verdict_vs_prev"] == "reproduced"
    # published 36 -> 20 is a drop: tested as a drop, and the data show neither a drop nor a rise
    assert t.loc[2, "verdict_vs_prev"] == "inconclusive (tested: drop)"
    assert t.loc[3, "verdict_vs_prev"] == "inconclusive (underpowered)"       # 4 paired seeds
    low, high = map(float, t.loc[1, "delta_bca95"].strip("[]").split(","))
    assert 0 < low < 0.1 < high


def test_verdict_panel_scales_by_smallest_effect_and_marks_the_published_direction():
    from grpolab.verdict_report import seed_figure, verdict_figure
    fig = verdict_figure(["entropy", "tokens"], [0.04, -30.0], [0.01, -50.0], [0.07, -10.0], [0.02, 10.0],
                         ["increase", "decrease"], ["reproduced", "reproduced"], "t")
    effect, published = fig.data
    assert list(effect.x) == pytest.approx([2.0, -3.0])                       # effect / smallest effect
    assert list(effect.error_x.array) == pytest.approx([1.5, 2.0])            # (high - mean) / delta
    assert list(effect.error_x.arrayminus) == pytest.approx([1.5, 2.0])       # (mean - low) / delta
    assert list(published.x) == [1.0, -1.0] and list(published.marker.symbol) == ["triangle-right", "triangle-left"]
    assert [s.x0 for s in fig.layout.shapes] == [0, -1, 1]                    # zero line, +-1 smallest effect
    seeds = seed_figure(["entropy"], [{0: 0.02, 1: 0.06}], [0.02], "s")
    assert list(seeds.data[0].x) == pytest.approx([1.0, 3.0])
