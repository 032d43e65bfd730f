"""Claims that test their premise, judged on synthetic rows (no training): each shipped claim that
names a dynamic gates it on the rows it reads; a ratio claim is judged as a ratio; a threshold is
relative to the static arm; `grpolab verdicts` counts empirical claims apart from construction
checks."""

from __future__ import annotations

import math
import re

import pytest
import yaml

from grpolab.analysis import claim_runs
from grpolab.analysis.claims import CLAIMS_DIR, load_claim
from grpolab.analysis.verdicts import (HOLDS_EXACTLY, NO_MECHANISM, REGIME_ABSENT, REGIME_UNMEASURED, REPRODUCED, SMALLER,
                                       paired_verdict, with_family)
from grpolab.errors import ConfigError
from grpolab.tracking.held_out import RunHistory

SEEDS = range(100, 108)
STEPS = range(0, 81, 10)


def _curve(head: float, tail: float) -> list:
    return [(s, head if s <= 20 else tail) for s in STEPS]


def _judge(monkeypatch, tmp_path, name: str, histories: dict) -> claim_runs.ClaimResult:
    """Judge shipped claim ``name`` on ``histories`` {rung name: [RunHistory per seed]}."""
    runs = {rung: {s: f"{rung}-{s}" for s in SEEDS} for rung in histories}
    table = {f"{rung}-{s}": h for rung, hs in histories.items() for s, h in zip(SEEDS, hs)}
    monkeypatch.setattr(claim_runs, "_claim_rows", lambda *a, **k: (runs, table, (0.95, 1), "", False))
    return claim_runs.judge(load_claim(CLAIMS_DIR / f"{name}.yaml"), tmp_path / "state", None)


def _entropy_rows(control_head: float, control_tail: float) -> dict:
    control = [RunHistory({80: {}}, {"entropy": _curve(control_head, control_tail + 0.001 * i),
                                     "clip/high_fraction": _curve(0.01, 0.01)}) for i in range(8)]
    treatment = [RunHistory({80: {}}, {"entropy": _curve(control_head, control_tail + 0.1 + 0.002 * (i % 3)),
                                       "clip/high_fraction": _curve(0.01, 0.01)}) for i in range(8)]
    return {"eps_high 0.2": control, "eps_high 0.28": treatment}


def test_clip_higher_entropy_is_no_test_without_a_collapse_in_the_control(monkeypatch, tmp_path):
    """The same +0.1 entropy gap: reproduced when the control's entropy falls by 75 %, regime absent
    when it falls by 10 % (the claim says 'collapses faster')."""
    collapsed = _judge(monkeypatch, tmp_path, "clip_higher_entropy", _entropy_rows(0.8, 0.2))
    assert collapsed.verdict.verdict == REPRODUCED and collapsed.premise.status == "present"
    assert collapsed.premise.gates[0].value == pytest.approx(1 - (0.2 + 0.0035) / 0.8)
    flat = _judge(monkeypatch, tmp_path, "clip_higher_entropy", _entropy_rows(0.5, 0.45))
    assert flat.verdict.verdict == REGIME_ABSENT and flat.verdict.face_value == REPRODUCED
    assert "entropy_drop = 0.093 (>= 0.5: failed)" in flat.verdict.reason   # 1 - 0.4535 / 0.5


def test_a_premise_reads_only_the_judged_paired_seeds(monkeypatch, tmp_path):
    """Seed 107 has a control row but no treatment row: it is not paired, so its entropy (rising
    from 0.8 to 4.0, a drop of -4) stays out of the premise, as out of the interval."""
    rows = _entropy_rows(0.8, 0.2)
    rows["eps_high 0.28"] = rows["eps_high 0.28"][:7]
    rows["eps_high 0.2"][7] = RunHistory({80: {}}, {"entropy": _curve(0.8, 4.0), "clip/high_fraction": _curve(0.01, 0.01)})
    runs = {rung: {s: f"{rung}-{s}" for s, _ in zip(SEEDS, hs)} for rung, hs in rows.items()}
    table = {f"{rung}-{s}": h for rung, hs in rows.items() for s, h in zip(SEEDS, hs)}
    monkeypatch.setattr(claim_runs, "_claim_rows", lambda *a, **k: (runs, table, (0.95, 1), "", False))
    result = claim_runs.judge(load_claim(CLAIMS_DIR / "clip_higher_entropy.yaml"), tmp_path / "state", None)
    assert result.verdict.n == 7 and result.premise.status == "present"
    assert result.premise.gates[0].value == pytest.approx(1 - (0.2 + 0.003) / 0.8)   # seeds 100-106: tails 0.200-0.206
    assert "of the 7 paired seeds" in result.premise.rows


def test_all_correct_rising_needs_accuracy_to_rise(monkeypatch, tmp_path):
    def rows(acc_tail):
        return {"static sampling": [RunHistory({80: {}}, {"groups/all_correct": _curve(0.1, 0.2 + 0.01 * i),
                                                          "accuracy": _curve(0.3, acc_tail)}) for i in range(8)]}
    rising = _judge(monkeypatch, tmp_path, "all_correct_fraction_rises", rows(0.5))
    assert rising.verdict.verdict == REPRODUCED
    flat = _judge(monkeypatch, tmp_path, "all_correct_fraction_rises", rows(0.31))
    assert flat.verdict.verdict == REGIME_ABSENT and "accuracy_gain = 0.01 (>= 0.02: failed)" in flat.verdict.reason


def test_gspo_is_judged_as_a_ratio_against_two_orders_of_magnitude(monkeypatch, tmp_path):
    """GSPO clips 9x what GRPO clips (+0.32 absolute, far beyond the old 0.01): log10 9 = 0.95, an
    order of magnitude, below the paper's two: 'smaller than claimed', never 'reproduced'."""
    grpo = [RunHistory({80: {}}, {"clip/region_fraction": _curve(0.04, 0.04 * (1 + 0.02 * (i % 4)))}) for i in range(8)]
    gspo = [RunHistory({80: {}}, {"clip/region_fraction": _curve(0.36, 0.36)}) for i in range(8)]
    result = _judge(monkeypatch, tmp_path, "gspo_clips_more_tokens",
                    {"GRPO (token ratio, eps 0.2)": grpo, "GSPO (sequence ratio, eps 3e-4/4e-4)": gspo})
    v = result.verdict
    assert v.verdict == SMALLER and 0.9 < v.mean < 0.96 and v.smallest_effect == 2
    assert v.differences[100] == pytest.approx(math.log10(0.36 / 0.04))


def test_dynamic_sampling_steps_are_timed_to_a_threshold_relative_to_the_static_arm(monkeypatch, tmp_path):
    """Static rows end at pass@1 0.50 + 0.01 i, so seed i's threshold is 0.9 x that; the static row
    first reaches it at step 70, the dynamic row at step 30: -40 steps on every seed."""
    def evals(cross: int, final: float) -> dict:
        return {s: {"eval/pass_at_1": 0.3 if s < cross else final} for s in STEPS}
    static = [RunHistory(evals(70, 0.5 + 0.01 * i), {"groups/zero_variance": _curve(0.3, 0.3)}) for i in range(8)]
    dynamic = [RunHistory(evals(30 + 10 * (i % 2), 0.5 + 0.01 * i), {"tokens/cumulative": _curve(1e4, 1e5)})
               for i in range(8)]
    result = _judge(monkeypatch, tmp_path, "dynamic_sampling_fewer_steps",
                    {"static sampling": static, "+ dynamic sampling": dynamic})
    assert result.control_values == {s: 70.0 for s in SEEDS}
    assert sorted(set(result.treatment_values.values())) == [30.0, 40.0]
    assert result.verdict.verdict == REPRODUCED and result.censored == 0


def test_upper_clipped_probability_says_not_testable_where_low_probability_tokens_are_not_measured(monkeypatch, tmp_path):
    rows = [RunHistory({80: {}}, {"clip/high_old_prob": _curve(0.4, 0.41), "clip/high_fraction": _curve(0.01, 0.01)})
            for _ in range(8)]
    result = _judge(monkeypatch, tmp_path, "upper_clipped_low_probability", {"eps_high 0.2": rows})
    assert result.verdict.verdict == REGIME_UNMEASURED
    assert "not testable here" in result.verdict.reason and "clip/low_old_prob_fraction not logged" in result.verdict.reason
    sampled = [RunHistory(h.evals, {**h.train_curves, "clip/low_old_prob_fraction": _curve(0.01, 0.01)}) for h in rows]
    assert _judge(monkeypatch, tmp_path, "upper_clipped_low_probability",
                  {"eps_high 0.2": sampled}).verdict.verdict == REGIME_ABSENT


def _result(kind: str, label: str, family_label: str = ""):
    claim = load_claim(CLAIMS_DIR / ("zero_variance_no_learning.yaml" if kind == "construction_check"
                                     else "grpo_lengthens_incorrect.yaml"))
    v = paired_verdict({s: 0.1 + 0.01 * (s % 3) for s in range(8)}, "increase", 0.05)
    import dataclasses
    return claim_runs.ClaimResult(claim, dataclasses.replace(v, verdict=label, family_label=family_label))


def test_verdicts_count_empirical_claims_apart_from_construction_checks():
    from grpolab.report.verdict_page import claims_count, family_statement
    results = [_result("construction_check", HOLDS_EXACTLY), _result("reproduction", REPRODUCED, REPRODUCED),
               _result("reproduction", SMALLER, "inconclusive"), _result("reproduction", REGIME_ABSENT, REGIME_ABSENT),
               _result("reproduction", NO_MECHANISM, NO_MECHANISM)]
    assert claims_count(results) == ("2 empirical claims decided, 1 construction checks hold (of 4 empirical claims, "
                                     "1 decided familywise; of 1 construction checks)")
    assert family_statement(results).endswith(claims_count(results) + ".")


def test_the_shipped_construction_check_is_counted_apart():
    kinds = {load_claim(p).name: load_claim(p).kind for p in sorted(CLAIMS_DIR.glob("*.yaml"))}
    assert [n for n, k in kinds.items() if k == "construction_check"] == ["zero_variance_no_learning"]


def _claim_file(tmp_path, **changes):
    data = yaml.safe_load((CLAIMS_DIR / "dynamic_sampling_fewer_steps.yaml").read_text())
    data.update(changes)
    data["study"] = str(CLAIMS_DIR.parent / "dynamic_sampling_efficiency.yaml")
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("changes, message", [
    ({"scale": "log"}, "scale: 'log'; valid: linear, log10"),
    ({"threshold_of": "no such rung"}, "threshold_of: 'no such rung' is not a rung of dynamic_sampling_efficiency"),
    ({"metric": "final:eval/pass_at_1"}, "threshold_of: needs a steps_to:/tokens_to: metric"),
    ({"metric": "steps_to:eval/pass_at_1>=1.5"}, "threshold is a fraction in (0, 1]"),
    ({"premise": {"premise": "p", "gates": [{"measure": "entropy_drop", "at_least": 0.5}], "rows": "both"}},
     "premise.rows: 'both'; valid: control, treatment"),
    # a premise on the rows the change was applied to partly measures the change's own effect
    ({"premise": {"premise": "p", "gates": [{"measure": "all_correct_groups", "at_least": 0.2}], "rows": "treatment"}},
     "premise.rows: treatment measures the premise on the rows the change was applied to, partly its own effect; "
     "use rows: control (the 'static sampling' rows)"),
])
def test_bad_claim_premises_scales_and_thresholds_are_refused(tmp_path, changes, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_claim(_claim_file(tmp_path, **changes))


@pytest.mark.parametrize("changes, where", [
    ({}, "treatment"),
    ({"treatment": {"rung": "cold start", "metric": "final:eval/greedy_accuracy"},
      "metric": "final:eval/greedy_accuracy", "report": ["run:policy/param_change"]}, "report"),
    ({"treatment": {"rung": "cold start", "metric": "final:eval/greedy_accuracy"},
      "metric": "final:eval/greedy_accuracy", "mechanism": {"metric": "tail:policy/param_change", "at_least": 0.0,
                                                            "rows": "treatment"}}, "mechanism"),
])
def test_a_claim_reading_a_curve_its_rows_turn_off_is_refused_at_load(tmp_path, changes, where):
    """policy/param_change is logged only with eval.param_change (on by default): a claim that reads
    it, as a side, a reported metric or a floor, from rows that turn it off could only read "not
    measured", so loading it fails naming the claim's field, the setting and its rows."""
    study = yaml.safe_load((CLAIMS_DIR.parent / "zero_variance.yaml").read_text())
    study["base"]["eval"]["param_change"] = False
    (tmp_path / "zero_variance.yaml").write_text(yaml.safe_dump(study))
    claim = yaml.safe_load((CLAIMS_DIR / "zero_variance_no_learning.yaml").read_text()) | changes
    (tmp_path / "claims").mkdir()
    (tmp_path / "claims" / "c.yaml").write_text(yaml.safe_dump(claim))
    with pytest.raises(ConfigError, match=rf"c\.yaml: {where}: \S+:policy/param_change reads a curve logged only with "
                                          r"eval\.param_change: true, which the rows it reads \(zero_variance_v2-r0\) "
                                          r"turn off"):
        load_claim(tmp_path / "claims" / "c.yaml")
    study["base"]["eval"]["param_change"] = True     # on (its default): the same claim loads
    (tmp_path / "zero_variance.yaml").write_text(yaml.safe_dump(study))
    assert load_claim(tmp_path / "claims" / "c.yaml").name == "c"


def test_a_study_objective_or_floor_its_rows_never_log_is_refused_at_load(tmp_path):
    from grpolab.studies.definition import load_study
    study = yaml.safe_load((CLAIMS_DIR.parent / "zero_variance.yaml").read_text())
    study["base"]["eval"]["param_change"] = False
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**study, "objectives": [{"metric": "tail:policy/param_change"}]}))
    with pytest.raises(ConfigError, match=r"metric: tail:policy/param_change reads a curve logged only with "
                                          r"eval\.param_change: true"):
        load_study(path)
    rung = {"name": "faster", "changes": {"train.learning_rate": 0.002},
            "mechanism": {"metric": "tail:policy/param_change", "at_least": 0.0}}
    path.write_text(yaml.safe_dump({**study, "rungs": [*study["rungs"], rung]}))
    with pytest.raises(ConfigError, match=r"rungs\[1\] \(faster\)\.mechanism: tail:policy/param_change reads"):
        load_study(path)
    search = yaml.safe_load((CLAIMS_DIR.parent / "search_clip_lr.yaml").read_text())
    search["objectives"] = [{"metric": "tail:policy/param_change", "direction": "maximize"}]
    search["pruner"] = {}
    path.write_text(yaml.safe_dump(search))
    assert load_study(path).kind == "search"   # eval.param_change on by default: the objective is logged
    search["space"]["eval.param_change"] = {"type": "categorical", "choices": [True, False]}
    path.write_text(yaml.safe_dump(search))
    with pytest.raises(ConfigError, match=r"metric \(space: eval\.param_change = False\): tail:policy/param_change "
                                          r"reads a curve logged only with eval\.param_change: true"):
        load_study(path)


def test_shipped_premises_read_the_control_unless_the_control_is_a_fixed_value():
    """Every shipped claim with a premise gates it on the control rows; the only treatment-side one
    is a one-arm claim against a fixed value, where no change was applied to the rows it reads."""
    sides = {p.stem: (c.premise.rows, c.control.rung) for p in sorted(CLAIMS_DIR.glob("*.yaml"))
             if (c := load_claim(p)).premise is not None}
    assert sides["all_correct_fraction_rises"] == ("control", "static sampling")
    assert sides["upper_clipped_low_probability"] == ("treatment", None)
    assert all(rows == "control" for name, (rows, rung) in sides.items() if rung is not None)


def test_a_threshold_relative_to_a_rung_is_set_per_seed():
    claim = load_claim(CLAIMS_DIR / "dynamic_sampling_fewer_steps.yaml")
    runs = {"static sampling": {1: "a"}}
    histories = {"a": RunHistory({0: {"eval/pass_at_1": 0.2}, 80: {"eval/pass_at_1": 0.6}}, {})}
    assert claim_runs.seed_threshold(claim, "steps_to:eval/pass_at_1>=0.9", 1, runs, histories) == \
        f"steps_to:eval/pass_at_1>={0.9 * 0.6!r}"
    assert claim_runs.seed_threshold(claim, "steps_to:eval/pass_at_1>=0.9", 2, runs, histories) is None
    assert claim_runs.seed_threshold(claim, "final:eval/pass_at_1", 1, runs, histories) == "final:eval/pass_at_1"
