"""Verdict logic on synthetic paired data built for each label (every label in verdicts.LABELS),
and the saturating compute fit on synthetic curves with known parameters (no training)."""

import math

import numpy as np
import pytest
from scipy import stats

from grpolab.analysis import inference
from grpolab.analysis.scaling import fit_curve, fit_seeds, saturating
from grpolab.analysis.verdicts import DECIDED, EFFECT, INCONCLUSIVE, LABELS, NO_EFFECT, NO_MECHANISM, NOT_RUN, OPPOSITE, REPRODUCED, SMALLER, UNDERPOWERED, UNDETERMINED, family_text, holm_text, paired_verdict, with_censoring, with_family, with_mechanism


def paired(effect, sd, n, seed=0):
    """{seed: treatment - control} for n seeds with sample mean exactly ``effect`` and sample sd
    exactly ``sd`` (shared per-seed baseline noise cancels in the pair)."""
    rng = np.random.default_rng(seed)
    noise = rng.normal(0, 1, n)
    noise = (noise - noise.mean()) / noise.std(ddof=1) * sd
    return {s: effect + e for s, e in enumerate(noise)}


def t_half(sd, n, level=0.95):
    return stats.t.ppf(0.5 + level / 2, n - 1) * sd / math.sqrt(n)


COMPATIBLE = ({REPRODUCED}, {EFFECT}, {NO_EFFECT, SMALLER}, {NO_EFFECT, OPPOSITE})
PROVISIONAL = {UNDETERMINED: {REPRODUCED, SMALLER}}   # an undetermined size may settle either way

# (differences, direction, smallest effect) built so that each label is the only right answer
LABEL_DATA = {
    REPRODUCED: (paired(0.10, 0.03, 8), "increase", 0.05),            # [0.075, 0.125]: wholly beyond delta
    SMALLER: (paired(0.03, 0.01, 8), "increase", 0.05),               # [0.022, 0.038]: > 0 and wholly below delta
    UNDETERMINED: (paired(0.05, 0.03, 8), "increase", 0.05),          # [0.025, 0.075]: > 0 and contains delta
    NO_EFFECT: (paired(0.0, 0.01, 8), "increase", 0.05),              # [-0.008, 0.008] inside (-0.05, 0.05)
    OPPOSITE: (paired(-0.10, 0.03, 8), "increase", 0.05),
    EFFECT: (paired(0.10, 0.03, 8), "none", 0.05),                    # a claim of no effect; interval beyond delta
    INCONCLUSIVE: (paired(0.025, 0.045, 10), "increase", 0.05),       # [-0.007, 0.057]; 10 seeds give 80 % power
    UNDERPOWERED: (paired(0.02, 0.2, 8), "increase", 0.05),           # spans both; needs ~130 seeds
    NOT_RUN: ({}, "increase", 0.05),
}


@pytest.mark.parametrize("label", list(LABEL_DATA))
def test_each_label_comes_from_data_built_for_it(label):
    diffs, direction, delta = LABEL_DATA[label]
    v = paired_verdict(diffs, direction, delta)
    assert v.verdict == label, v.reason
    assert label in LABELS and v.reason
    if diffs:
        n, sd = len(diffs), np.std(list(diffs.values()), ddof=1)
        assert (v.low, v.high) == pytest.approx((v.mean - t_half(sd, n), v.mean + t_half(sd, n)))


def test_each_label_rests_on_hypotheses_whose_p_values_match_its_interval():
    """p < 0.05 exactly when the 95 % interval excludes the hypothesis' value: H0 (0), Hd (delta),
    Heq (the interval inside the margin)."""
    v = paired_verdict(paired(0.0, 0.01, 8), "none", 0.05)
    assert v.verdict == REPRODUCED and v.p["Heq"] < 0.05
    rng = np.random.default_rng(11)
    for _ in range(300):
        diffs = paired(rng.normal(0.03, 0.04), abs(rng.normal(0.03, 0.02)) + 1e-3, int(rng.integers(5, 12)))
        v = paired_verdict(diffs, "increase", 0.05)
        assert (v.p["H0"] < 0.05) == (v.low > 0 or v.high < 0)
        assert (v.p["Hd"] < 0.05) == (v.low > 0.05 or v.high < 0.05)
        assert (v.p["Heq"] < 0.05) == (-0.05 < v.low and v.high < 0.05)


def test_decrease_is_the_mirror_of_increase():
    diffs = paired(-0.10, 0.03, 8, seed=1)
    up, down = paired_verdict(diffs, "increase", 0.02), paired_verdict(diffs, "decrease", 0.02)
    assert up.verdict == OPPOSITE and down.verdict == REPRODUCED and (up.low, up.high) == (down.low, down.high)


def test_zero_spread_is_never_certain_and_fewer_than_five_seeds_is_underpowered():
    v = paired_verdict({s: 0.0 for s in range(8)} | {9: math.inf}, "none", 0.02)
    assert v.verdict == INCONCLUSIVE and "size, is unmeasured" in v.reason and math.isnan(v.low)
    assert "1 seed(s) without a finite difference" in "; ".join(v.diagnostics) and v.n == 8
    # +0.05 on every seed: the exact sign test (2/2^8) shows the direction, the size stays unmeasured
    up = paired_verdict({s: 0.05 for s in range(8)}, "increase", 0.02)
    assert up.verdict == UNDETERMINED and up.p["H0"] == pytest.approx(2 / 256) and math.isnan(up.low)
    assert paired_verdict({s: 0.05 for s in range(8)}, "decrease", 0.02).verdict == OPPOSITE
    assert paired_verdict({s: 0.05 for s in range(5)}, "increase", 0.02).verdict == INCONCLUSIVE   # 2/32 > 0.05
    # rounding noise around 0 is no measured spread (relative to the smallest effect)
    r = (0.1 + 0.1 + 0.1) / 3 - 0.1
    assert paired_verdict({s: (r if s == 0 else 0.0) for s in range(8)}, "increase", 0.02).verdict == INCONCLUSIVE
    few = paired_verdict(paired(0.5, 0.01, 4), "increase", 0.02)
    assert few.verdict == UNDERPOWERED and "4 < 5" in few.reason and "reproduced at face value" in few.reason


def test_the_label_is_monotone_in_the_evidence():
    """Narrowing the interval around the same estimate never turns a decided label into one that
    contradicts it (the BCa rules turned 'reproduced' into 'contradicted' that way). Compatible:
    an effect below delta may read 'no effect that matters' and, more precisely measured, 'direction
    holds, smaller than claimed' or 'opposite direction' (both still below delta); 'reproduced' and
    'effect that matters' never change once reached."""
    rng = np.random.default_rng(7)
    for _ in range(400):
        est, delta, direction = rng.normal(0, 0.1), 0.05, rng.choice(["increase", "decrease", "none"])
        labels = [paired_verdict(paired(est, sd, 8), direction, delta).verdict for sd in (0.4, 0.2, 0.1, 0.05, 0.01, 0.001)]
        decided = set(x for x in labels if x in DECIDED)
        assert any(decided <= group for group in COMPATIBLE), (est, direction, labels)
        first = next((i for i, x in enumerate(labels) if x in DECIDED), len(labels))
        assert all(x in DECIDED for x in labels[first:]), labels
        for i, x in enumerate(labels[:-1]):      # an undetermined size settles as reproduced or smaller
            if x == UNDETERMINED:
                assert labels[i + 1] in PROVISIONAL[x] | {UNDETERMINED}, labels


def test_power_is_t_based_and_matches_the_textbook_value():
    # a standardised effect of 1 needs 10 pairs for 80 % power (two-sided 5 %), 8 give 0.69 (noncentral t)
    assert inference.seeds_for_power(1.0, 1.0) == 10
    assert inference.power_direction(10, 1.0, 1.0) == pytest.approx(0.8031, abs=1e-3)
    assert inference.seeds_for_power(0.0, 0.1) is None and inference.seeds_for_power(math.nan, 0.1) is None
    v = LABEL_DATA[UNDERPOWERED]
    u = paired_verdict(*v)
    assert u.seeds_needed == inference.seeds_for_power(0.2, 0.05) and f"needs {u.seeds_needed} seeds" in u.reason


def test_a_family_gets_holm_on_primary_tests_and_bonferroni_familywise_labels():
    assert inference.holm([0.01, 0.04, 0.03, math.nan]) == pytest.approx([0.03, 0.06, 0.06, math.nan], nan_ok=True)
    family = with_family([paired_verdict(*LABEL_DATA[k]) for k in (REPRODUCED, INCONCLUSIVE, NOT_RUN, EFFECT)])
    assert [v.family for v in family] == [3, 3, 3, 3]                     # not run is outside the family
    # primary hypotheses fixed by direction: H0 for increase, Heq for the claim of no effect
    raw = [family[0].p["H0"], family[1].p["H0"], family[3].p["Heq"]]
    expected = inference.holm(raw)
    assert [family[i].p_holm for i in (0, 1, 3)] == pytest.approx(expected)
    assert holm_text(family[0]).startswith("H0 p ") and "in a family of 3" in holm_text(family[0])
    assert holm_text(family[2]) == "no test (not run)" and family_text(family[2]).startswith("not in the family")
    # the familywise label is the same rules on the Bonferroni interval at 1 - 0.05/3
    again = paired_verdict(LABEL_DATA[REPRODUCED][0], "increase", 0.05, level=1 - 0.05 / 3)
    assert family[0].family_label == again.verdict and family[0].family_level == pytest.approx(1 - 0.05 / 3)
    # sequential looks: p x K before Holm, and the familywise interval at 1 - 0.05/(k K)
    k = with_family([paired_verdict(*LABEL_DATA[SMALLER], looks=5)])[0]
    assert k.p_holm == pytest.approx(min(1, 5 * k.p["H0"])) and k.family_level == pytest.approx(1 - 0.05 / 5)


def test_familywise_labels_keep_the_familywise_error_on_direction_and_size():
    """The reviews' cases, 8 claims of n = 8 per family: (a) nothing there: no
    familywise label claims a direction in more than 5 % of families (choosing each claim's test
    after its label let 29 % through); (b) every true mean 0.9 delta: no familywise 'reproduced'
    (which asserts at least delta) in more than 5 % of families (200 families: +3 SE is 9.6 %)."""
    rng = np.random.default_rng(5)
    wrong_direction = wrong_size = 0
    for _ in range(200):
        null = with_family([paired_verdict(dict(enumerate(rng.normal(0, 0.01, 8))), "increase", 0.05)
                            for _ in range(8)])
        wrong_direction += any(v.family_label in (SMALLER, OPPOSITE, UNDETERMINED, REPRODUCED) for v in null)
        near = with_family([paired_verdict(dict(enumerate(rng.normal(0.045, 0.03, 8))), "increase", 0.05)
                            for _ in range(8)])
        wrong_size += any(v.family_label == REPRODUCED for v in near)
    bound = 0.05 + 3 * math.sqrt(0.05 * 0.95 / 200)
    assert wrong_direction / 200 <= bound and wrong_size / 200 <= bound


def test_mechanism_floor_replaces_the_label_and_keeps_the_face_value():
    v = paired_verdict(*LABEL_DATA[REPRODUCED])
    off = with_mechanism(v, "tail:clip/high_fraction", 0.00056, 0.005, "'Naive GRPO' rows")
    assert off.verdict == NO_MECHANISM and off.face_value == REPRODUCED
    assert "tail:clip/high_fraction = 0.00056 < 0.005" in off.reason
    assert with_mechanism(v, "m", math.nan, 0.005, "x").verdict == NO_MECHANISM          # never measured
    on = with_mechanism(v, "m", 0.02, 0.005, "x")
    assert on.verdict == REPRODUCED and "precondition met" in on.diagnostics[-1]


def test_censored_pairs_make_a_label_inconclusive_because_the_interval_cannot_bound_them():
    """The review's case: a decrease claim (fewer steps), one control censored at 200. Counted at the
    budget it reads 'reproduced'; its true value 600 gives an interval spanning 0. So no label is
    kept with censored pairs, whichever side."""
    t, c = [100, 110, 90, 100, 120, 100, 110, 90], [200, 150, 140, 150, 160, 150, 140, 150]
    v = paired_verdict({s: t[s] - c[s] for s in range(8)}, "decrease", 20)
    assert v.verdict == REPRODUCED
    c[0] = 600
    assert paired_verdict({s: t[s] - c[s] for s in range(8)}, "decrease", 20).verdict != REPRODUCED
    for sides in ((0, 1), (1, 0)):
        hidden = with_censoring(v, *sides, "steps_to:x")
        assert hidden.verdict == INCONCLUSIVE and hidden.face_value == REPRODUCED and "cannot bound" in hidden.reason


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

    from grpolab.studies.definition import Objective, Rung, StudyConfig
    from grpolab.analysis.ablation import ladder_table
    cfg = StudyConfig(name="x", kind="ladder", path="x", base={}, seeds=tuple(range(8)),
                      objectives=(Objective("final:eval/pass_at_1", "maximize", 0.02),),
                      rungs=(Rung("a", {}, 30.0), Rung("b", {"k": 1}, 36.0), Rung("c", {"k": 2}, 20.0),
                             Rung("d", {"k": 3}, None)))
    base = [0.1, 0.3, 0.2, 0.25, 0.15, 0.35, 0.22, 0.28]                  # big seed-to-seed spread, shared
    bump = [0.09, 0.11, 0.10, 0.12, 0.08, 0.10, 0.11, 0.09]               # rung b: a clear +0.1 on every seed
    wobble = [0.05, -0.04, 0.03, -0.05, 0.04, -0.03, 0.02, -0.02]         # rung c vs b: no effect either way
    values = {0: base, 1: [b + d for b, d in zip(base, bump)]}
    values[2] = [v + w for v, w in zip(values[1], wobble)]
    values[3] = values[2][:4] + [math.nan] * 4
    rows = pd.DataFrame([{"rung": r, "seed": s, "state": "COMPLETE" if math.isfinite(v) else "FAIL", "value": v,
                          "run_id": ""} for r, vs in values.items() for s, v in enumerate(vs)])
    t = ladder_table(rows, cfg)
    assert t.loc[1, "verdict_vs_prev"] == REPRODUCED
    # published 36 -> 20 is a drop: tested as a drop; the data show neither a drop nor a rise of 0.02
    assert t.loc[2, "verdict_vs_prev"] == UNDERPOWERED + " (tested: drop)" and "needs" in t.loc[2, "why"]
    assert t.loc[3, "verdict_vs_prev"] == UNDERPOWERED and "4 < 5" in t.loc[3, "why"]
    d = [b for b in bump]
    assert t.loc[1, "delta_ci95"] == pytest.approx(t_half(np.std(d, ddof=1), 8))
    assert "Holm" in t.loc[1, "tests"] and t.loc[1, "precondition"] == "none named" and t.loc[1, "regime"] == "none declared"


def test_verdict_panel_scales_by_smallest_effect_and_marks_the_published_direction():
    from grpolab.report.verdict_page import VerdictItems, seed_figure, verdict_figure
    fig = verdict_figure(VerdictItems(["entropy", "tokens"], [0.04, -30.0], [0.01, -50.0], [0.07, -10.0], [0.02, 10.0],
                                      ["increase", "decrease"], ["reproduced", "reproduced"]), "t")
    effect, published = fig.data
    assert list(effect.x) == pytest.approx([2.0, -3.0])                       # effect / smallest effect
    assert list(effect.error_x.array) == pytest.approx([1.5, 2.0])            # (high - mean) / delta
    assert list(effect.error_x.arrayminus) == pytest.approx([1.5, 2.0])       # (mean - low) / delta
    assert list(published.x) == [1.0, -1.0] and list(published.marker.symbol) == ["triangle-right", "triangle-left"]
    assert [s.x0 for s in fig.layout.shapes] == [0, -1, 1]                    # zero line, +-1 smallest effect
    seeds = seed_figure(["entropy"], [{0: 0.02, 1: 0.06}], [0.02], "s")
    assert list(seeds.data[0].x) == pytest.approx([1.0, 3.0])


def test_the_studies_page_defines_every_label_in_one_table():
    from conftest import REPO
    studies = (REPO / "docs" / "studies.md").read_text()
    for label, meaning in LABELS.items():
        assert f"| `{label}` | {meaning} |" in studies, label


def test_a_construction_check_holds_exactly_only_when_every_difference_is_zero():
    from grpolab.analysis.verdicts import HOLDS_EXACTLY, with_construction
    zeros = paired_verdict({s: 0.0 for s in range(8)}, "none", 0.02)
    assert zeros.verdict == INCONCLUSIVE                       # a t-interval says nothing at zero spread
    held = with_construction(zeros)
    assert held.verdict == HOLDS_EXACTLY and held.face_value == INCONCLUSIVE and "all 8 paired differences" in held.reason
    assert HOLDS_EXACTLY in DECIDED
    other = paired_verdict({s: 0.05 + 0.01 * (s % 3) for s in range(8)}, "increase", 0.02)
    one_moved = paired_verdict({**{s: 0.0 for s in range(7)}, 7: 0.001}, "none", 0.02)
    assert with_construction(one_moved).verdict == one_moved.verdict != HOLDS_EXACTLY
    in_family, moved, tested = with_family([held, with_construction(one_moved), other])
    assert in_family.family_label == "" and family_text(in_family) == f"not in the family ({HOLDS_EXACTLY})"
    assert moved.family_label == ""                        # by kind, whatever its outcome: no test joins
    assert tested.family == 1 and tested.family_level == pytest.approx(0.95)
    assert with_construction(paired_verdict({s: 0.0 for s in range(4)}, "none", 0.02)).verdict == UNDERPOWERED
    assert with_construction(paired_verdict({s: 0.0 for s in range(8)}, "increase", 0.02)).verdict == INCONCLUSIVE
