"""The equal-generated-tokens line of a ladder rung, on synthetic histories (no training): a rung
whose rows generate twice the control's tokens is read at its last evaluation within the control's
tokens and compared on the curve's prompts; a rung at the control's tokens gets no second line; a
rung with no such evaluation after step 0, or no common prompt set, says why it is not judged."""

from __future__ import annotations

import pandas as pd
import pytest

from fake_histories import FakeHistories
from grpolab.analysis import ladder_verdicts
from grpolab.analysis.ablation import ladder_table
from grpolab.analysis.equal_tokens import matched_step, tokens_at
from grpolab.analysis.verdicts import paired_verdict
from grpolab.report.tables import answer_lines, render
from grpolab.studies.definition import Objective, Rung, StudyConfig
from grpolab.tracking.held_out import CURVE_SET_KEY, RunHistory

SEEDS = tuple(range(8))
EVAL = {"prompts": 64, "k": 4, "final_prompts": 1024, "final_k": 2, "seed": 1000}
CONTROL_CURVE = [0.20 + 0.01 * (s % 3) for s in SEEDS]          # control's final value on the curve's prompts
GAIN_AT_60 = [0.05, 0.06, 0.04, 0.05, 0.07, 0.03, 0.05, 0.06]    # treatment at step 60 minus that


def _history(per_step: int, evals: dict, curve_final: float | None = None) -> RunHistory:
    """A run generating ``per_step`` tokens a step for 120 steps, with ``evals`` {step: pass@1}; the
    final evaluation (step 120) also logs its value on the curve's prompts when given."""
    out = {s: {"eval/pass_at_1": v} for s, v in evals.items()}
    if curve_final is not None:
        out[120][CURVE_SET_KEY] = curve_final
    return RunHistory(out, {"tokens/cumulative": [(s, float(per_step * s)) for s in range(1, 121)]})


def _ladder(monkeypatch, treatment_per_step=2000, steps=(0, 30, 60, 90, 120), control_curve=True, changes=None):
    cfg = StudyConfig(name="toy", kind="ladder", path="x", base={"eval": dict(EVAL)}, seeds=SEEDS,
                      objectives=(Objective("final:eval/pass_at_1", "maximize", 0.02),),
                      rungs=(Rung("+ Token-level Loss", {}, 42.0), Rung("+ Dynamic Sampling", changes or {"k": 1}, 50.0)))
    rows, FakeHistories.table = [], {}
    for s in SEEDS:
        # the final value on 1,024 prompts (the main line) differs from the curve's: the line must not mix them
        control = _history(1000, {t: 0.2 for t in steps[:-1]} | {120: 0.30}, CONTROL_CURVE[s] if control_curve else None)
        mine = {t: 0.1 for t in steps[:-1]} | {60: CONTROL_CURVE[s] + GAIN_AT_60[s], 120: 0.33 + 0.001 * s}
        treatment = _history(treatment_per_step, {t: mine[t] for t in steps}, 0.5)
        for r, h in ((0, control), (1, treatment)):
            FakeHistories.table[f"r{r}s{s}"] = h
            rows.append({"rung": r, "seed": s, "state": "COMPLETE", "value": h.evals[120]["eval/pass_at_1"],
                         "run_id": f"r{r}s{s}"})
    monkeypatch.setattr(ladder_verdicts, "_Histories", FakeHistories)
    return pd.DataFrame(rows), cfg


def test_twice_the_tokens_is_read_at_the_last_evaluation_within_the_controls_tokens(monkeypatch):
    """Forced: the treatment has generated 120,000 tokens at step 60, exactly the control's total,
    and 180,000 at step 90: step 60 is the last measured point within them."""
    rows, cfg = _ladder(monkeypatch)
    rung = ladder_verdicts.rung_verdicts(rows, cfg)[1][0]
    same = rung.equal_tokens
    assert same.ratio == pytest.approx(2.0) and set(same.steps) == {60}
    assert same.treatment_tokens == same.control_tokens == 120_000 and same.prompts == 64
    expected = paired_verdict(dict(zip(SEEDS, GAIN_AT_60)), "increase", 0.02)
    assert same.verdict.mean == pytest.approx(expected.mean) and same.verdict.verdict == expected.verdict
    assert same.verdict.differences == pytest.approx(dict(zip(SEEDS, GAIN_AT_60)))
    assert same.verdict.family == 0 and not same.verdict.family_label   # outside the familywise family
    frame = ladder_table(rows, cfg)
    line = frame.equal_tokens[1]
    assert line.startswith(f"at equal generated tokens (secondary, outside the familywise family; token ratio 2.00): "
                           f"{expected.verdict}, {expected.mean:+.3f} [{expected.low:+.3f}, {expected.high:+.3f}], "
                           "8 paired seeds; treatment at step 60 (120,000 tokens), control at its end (120,000 tokens), "
                           "on the curve's 64 prompts")
    lines = answer_lines(frame)
    assert lines[-1] == f"+ Dynamic Sampling: {line}" and lines[-2].startswith("+ Dynamic Sampling: ")
    assert "at equal generated tokens" in render(frame, "csv") and frame.equal_tokens[0] == ""


def test_the_main_line_and_its_family_are_the_same_with_or_without_the_second_line(monkeypatch):
    rows, cfg = _ladder(monkeypatch)
    with_line = ladder_table(rows, cfg)
    rows, cfg = _ladder(monkeypatch, treatment_per_step=1000)
    without = ladder_table(rows, cfg)
    assert "equal_tokens" not in without.columns        # ratio 1.0: no second line, the columns as they were
    assert with_line.drop(columns="equal_tokens").equals(without)
    assert len(answer_lines(without)) == 2 and ladder_verdicts.rung_verdicts(rows, cfg)[1][0].equal_tokens is None


def test_only_step_0_within_the_controls_tokens_is_not_judged_and_says_so(monkeypatch):
    rows, cfg = _ladder(monkeypatch, treatment_per_step=2500, steps=(0, 60, 120))   # 150,000 tokens at step 60
    same = ladder_verdicts.rung_verdicts(rows, cfg)[1][0].equal_tokens
    assert same.verdict is None
    assert same.reason == ("not judged at equal generated tokens: 8 of 8 paired seeds have no evaluation at 85-100 % "
                           "of the control's generated tokens (mean 120,000), and judging the rest would select seeds "
                           "by their token ratio (add evaluations: eval.every) (token ratio 2.50 >= 1.05)")
    assert answer_lines(ladder_table(rows, cfg))[-1] == f"+ Dynamic Sampling: {same.reason}"


def test_one_seed_without_an_evaluation_in_time_leaves_the_line_not_judged(monkeypatch):
    """All or none: the seeds that regenerated most are the ones without an evaluation in time, so
    judging the others would judge a subset selected by the treatment's own token ratio."""
    rows, cfg = _ladder(monkeypatch)
    # seed 0's treatment generates 5x the control's tokens a step: 150,000 already at its step-30 evaluation
    FakeHistories.table["r1s0"] = _history(5000, {0: 0.1, 30: 0.3, 60: 0.3, 90: 0.3, 120: 0.4}, 0.5)
    same = ladder_verdicts.rung_verdicts(rows, cfg)[1][0].equal_tokens
    assert same.verdict is None and same.reason.startswith(
        "not judged at equal generated tokens: 1 of 8 paired seeds have no evaluation at 85-100 %")


def test_no_common_prompt_set_is_refused_with_its_reason(monkeypatch):
    rows, cfg = _ladder(monkeypatch, control_curve=False)   # the control's final scored 1,024 prompts only
    reason = ladder_verdicts.rung_verdicts(rows, cfg)[1][0].equal_tokens.reason
    assert reason.startswith(f"not judged at equal generated tokens: 8 of 8 paired seeds logged no {CURVE_SET_KEY}, "
                             "the final evaluation's value on the curve's 64 prompts")
    rows, cfg = _ladder(monkeypatch, changes={"eval.prompts": 32})
    reason = ladder_verdicts.rung_verdicts(rows, cfg)[1][0].equal_tokens.reason
    assert "the curve evaluations differ in prompts (treatment 32 of eval.seed 1000, control 64" in reason


def test_matched_step_takes_measured_points_only():
    h = _history(2000, {0: 0.1, 30: 0.2, 60: 0.3, 90: 0.4, 120: 0.5})
    assert tokens_at(h, 0) == 0 and tokens_at(h, 60) == 120_000
    assert matched_step(h, 120_000) == 60 and matched_step(h, 140_000) == 60        # step 60 at 86 %
    assert matched_step(h, 119_999) is None and matched_step(h, 142_000) is None   # step 30 at 50 %, 60 at 84.5 %
    windows = RunHistory({0: {}, 60: {}}, {"tokens/cumulative": [(56, 1000.0), (64, 1200.0)]})
    assert tokens_at(windows, 60) == 1200.0   # the window holding step 60 generated its tokens before it


def test_a_rung_with_no_row_yet_is_not_called_the_reference(monkeypatch):
    """A rung none of whose rows ran (a time limit paused the study first) reads as its verdict
    ("not run") and why, never as the reference, which only the first rung is."""
    rows, cfg = _ladder(monkeypatch)
    frame = ladder_table(rows[rows.rung == 0], cfg)
    lines = answer_lines(frame)
    assert lines[0].startswith("+ Token-level Loss: reference, mean 0.300 (8 seeds)")
    assert lines[1] == "+ Dynamic Sampling: not run (no paired seed; 0 seeds)"
