"""The verdict interval keeps its stated level at the seed counts grpolab uses, and sequential
verdicts (``verdicts --until-decided``) keep their error rate: simulations, not assumptions.
docs/coverage.md holds the full table (``python -m grpolab.analysis.coverage``)."""

import numpy as np
import pytest

from grpolab.analysis.coverage import GENERATORS, SEED_COUNTS, SeedSchedule, coverage, sequential_error, t_bounds
from grpolab.analysis.verdicts import paired_verdict

HOLDS = [name for name, (_, holds) in GENERATORS.items() if holds]


def test_the_simulated_interval_is_the_one_verdicts_report():
    x = np.random.default_rng(3).gamma(1.5, 1.0, (20, 8))
    low, high = t_bounds(x, 0.95)
    for row, lo, hi in zip(x, low, high):
        v = paired_verdict(dict(enumerate(row)), "increase", 0.1)
        assert (v.low, v.high) == pytest.approx((lo, hi))


@pytest.mark.parametrize("n", SEED_COUNTS)
@pytest.mark.parametrize("name", HOLDS)
def test_interval_covers_93_to_97_percent_where_its_assumptions_hold(name, n):
    """4000 samples per cell: Monte Carlo standard error 0.34 points, so 93-97 % is +-6 SE around 95."""
    result = coverage(name, n, reps=4000)
    assert 0.93 <= result["coverage"] <= 0.97, result


def test_strong_skew_undercovers_and_the_diagnostic_says_so():
    """Lognormal differences: the t-interval covers well under 95 %; the skew diagnostic (a 5 % test
    of symmetry) flags several times its 5 % false-alarm rate on them."""
    skewed = coverage("lognormal (strong skew)", 8, reps=4000)
    normal = coverage("normal", 8, reps=4000)
    assert skewed["coverage"] < 0.90
    assert skewed["skew_flagged"] > 0.25 and normal["skew_flagged"] < 0.07
    v = paired_verdict(dict(enumerate([0.1, 0.12, 0.11, 0.13, 0.1, 0.12, 0.11, 2.5])), "increase", 0.05)
    assert any("skewed differences" in d for d in v.diagnostics)


@pytest.mark.parametrize("start, batch, top", [(5, 1, 20), (8, 2, 16), (8, 4, 24)])
def test_sequential_looks_keep_the_error_rate_and_naive_looks_do_not(start, batch, top):
    """Under no effect, the chance that ANY planned look's interval excludes 0: at most 5 % with the
    per-look level 1 - 0.05/K (20,000 runs: SE 0.15 points), well above it re-testing at 95 %."""
    assert sequential_error(SeedSchedule(start, batch, top), reps=20_000) <= 0.05
    assert sequential_error(SeedSchedule(start, batch, top), reps=20_000, adjusted=False) > 0.08
    heavy = sequential_error(SeedSchedule(start, batch, top), reps=20_000, df_draw=lambda rng, shape: rng.standard_t(3, shape))
    assert heavy <= 0.05


def test_the_ladder_simulation_labels_as_verdicts_do():
    """``decided_labels`` is ``verdicts.rule`` for a claimed increase (0: not decided)."""
    from grpolab.analysis.coverage import NO_EFFECT, OPPOSITE, REPRODUCED, SMALLER, decided_labels
    from grpolab.analysis.verdicts import NO_EFFECT as NONE_, OPPOSITE as OPP, REPRODUCED as REP, SMALLER as SMA
    names = {REPRODUCED: REP, SMALLER: SMA, NO_EFFECT: NONE_, OPPOSITE: OPP}
    rng = np.random.default_rng(5)
    x = rng.normal(rng.uniform(-0.04, 0.06, (400, 1)), rng.uniform(0.005, 0.03, (400, 1)), (400, 16))
    low, high = t_bounds(x, 0.9875)
    seen = set()
    for row, code in zip(x, decided_labels(low, high, 0.02)):
        label = paired_verdict(dict(enumerate(row)), "increase", 0.02, 0.9875).verdict
        assert names.get(code, "undecided") == (label if label in names.values() else "undecided")
        seen.add(code)
    assert seen == {0, REPRODUCED, SMALLER, NO_EFFECT, OPPOSITE}


@pytest.mark.parametrize("scenario", ["no rung has an effect", "every rung at the smallest effect",
                                      "mixed: 0, 0.01, 0.02, -0.02, 0.08"])
@pytest.mark.parametrize("rows, sd", [("normal", 0.048), ("t3", 0.048), ("skewed (gamma 2)", 0.048), ("normal", 0.035)])
def test_the_shipped_ladder_plan_keeps_each_rungs_error_rate(scenario, rows, sd):
    """The shipped ladder's plan (looks at 16/32/48/64 paired seeds, each at 1 - 0.05/4, per-rung
    stopping, max_rows 340, smallest effect 0.02) at the design's paired sd 0.048 (and 0.035, the
    spread the v4 run's intervals imply): a wrong
    decided label on any one rung in at most 5 % of ladders, and on any rung's familywise label
    too (2,000 ladders: SE under 0.5 points near 5 %)."""
    from grpolab.analysis.coverage import LADDER_SCENARIOS, ladder_plan_error
    e = ladder_plan_error(LADDER_SCENARIOS[scenario], sd, reps=2000, rows=rows, seed=1)
    assert max(e["per_rung"]) <= 0.05 and e["any_rung_familywise"] <= 0.05, e


def test_re_testing_the_ladder_at_95_percent_every_look_errs_more():
    """The same ladders judged at 95 % at every look: wrong labels on some rung several times as
    often (what the per-look level 1 - 0.05/4 prevents)."""
    from grpolab.analysis.coverage import LadderPlan, ladder_plan_error
    null = (0.0,) * 5
    adjusted = ladder_plan_error(null, reps=2000, seed=2)
    naive = ladder_plan_error(null, plan=LadderPlan(per_look_level=0.95), reps=2000, seed=2)
    assert naive["any_rung"] > 3 * adjusted["any_rung"] and max(naive["per_rung"]) > max(adjusted["per_rung"])
