"""Regime gates, fragile labels and the answer header, on tiny synthetic ladder rows (no training):
a rung whose control rows lack the regime its mechanism needs reads 'regime absent: not a test of
the claim'; a gate whose curve no row logged says which; a label whose deciding bound sits within
the evaluation noise of its boundary is marked fragile."""

from __future__ import annotations

import math
import re

import pandas as pd
import pytest

from fake_histories import FakeHistories
from grpolab.analysis import ladder_verdicts
from grpolab.analysis.ablation import ladder_table
from grpolab.analysis.regimes import ABSENT, PRESENT, UNMEASURED, check_regime, run_measure
from grpolab.analysis.strength import decided_counts, deciding_bounds, eval_noise_sd, fragility
from grpolab.analysis.verdicts import (NO_EFFECT, OPPOSITE, REGIME_ABSENT, REGIME_UNMEASURED, REPRODUCED, Verdict,
                                       paired_verdict, stops, with_family)
from grpolab.errors import ConfigError
from grpolab.report.tables import answer_header, answer_lines
from grpolab.studies.definition import Objective, Rung, StudyConfig
from grpolab.studies.regime import Gate, parse_regime
from grpolab.tracking.held_out import RunHistory

STEPS = range(0, 101, 10)


def _history(**curves) -> RunHistory:
    """A run whose curve ``key`` is ``(head value, tail value)`` (a step between them at each
    step) or one constant."""
    out = {}
    for key, value in curves.items():
        a, b = value if isinstance(value, tuple) else (value, value)
        out[key.replace("__", "/")] = [(s, a if s <= 25 else b) for s in STEPS]
    return RunHistory({100: {"eval/pass_at_1": 0.3}}, out)


TRUNCATION = parse_regime({"premise": "truncation is noise", "gates": [
    {"measure": "truncated_fraction", "at_least": 0.02}, {"measure": "salvage_rate", "at_least": 0.3}]},
    "regime", ("previous",))


def _ladder(rows_effect: list[float], histories: dict, monkeypatch, base: list[float] | None = None):
    cfg = StudyConfig(name="toy", kind="ladder", path="x", base={"eval": {"final_prompts": 1024, "final_k": 2}},
                      seeds=tuple(range(len(rows_effect))),
                      objectives=(Objective("final:eval/pass_at_1", "maximize", 0.02),),
                      rungs=(Rung("Naive GRPO", {}, 30.0), Rung("+ Overlong Filtering", {"k": 1}, 36.0, None, TRUNCATION)),
                      published_source="DAPO Table 1")
    base = base or [0.25 + 0.01 * (s % 3) for s in range(len(rows_effect))]
    rows = pd.DataFrame([{"rung": r, "seed": s, "state": "COMPLETE", "value": b + (d if r else 0.0),
                          "run_id": f"r{r}s{s}"} for r in (0, 1) for s, (b, d) in enumerate(zip(base, rows_effect))])
    FakeHistories.table = {f"r{r}s{s}": histories[r] for r in (0, 1) for s in range(len(rows_effect))}
    monkeypatch.setattr(ladder_verdicts, "_Histories", FakeHistories)
    return ladder_table(rows, cfg), cfg


CLEAR_RISE = [0.10, 0.11, 0.09, 0.10, 0.12, 0.08, 0.10, 0.11]


def test_a_ladder_without_truncation_reads_regime_absent_for_overlong_filtering(monkeypatch):
    """Forced: no completion is ever truncated on the control rows, so however clearly the rung's
    interval rises it is no test of DAPO's claim, and every output says so."""
    none_truncated = _history(length__truncated_fraction=0.0, length__truncated_salvageable=math.nan)
    frame, cfg = _ladder(CLEAR_RISE, {0: none_truncated, 1: none_truncated}, monkeypatch)
    row = frame.iloc[1]
    assert row.label == REGIME_ABSENT == "regime absent: not a test of the claim"
    assert row.family_label == REGIME_ABSENT                       # familywise, the check outside the data stands
    assert "at face value: reproduced" in row.why
    assert row.regime.startswith("absent: truncation is noise: truncated_fraction = 0 (>= 0.02: failed)")
    line = answer_lines(frame)[1]
    assert line.startswith("+ Overlong Filtering: regime absent: not a test of the claim, +0.101 [")
    assert "familywise: regime absent: not a test of the claim" in line
    assert answer_header(frame, cfg).startswith("0 of 1 decided (0 fragile), 0 familywise (0 fragile); smallest "
                                                "effect that matters 0.02 "
                                                "of final:eval/pass_at_1 beside the published increments +6")


def test_a_gate_whose_curve_was_never_logged_says_not_measured_and_names_it(monkeypatch):
    truncated = _history(length__truncated_fraction=0.3)          # salvage never logged (an older state)
    frame, _ = _ladder(CLEAR_RISE, {0: truncated, 1: truncated}, monkeypatch)
    row = frame.iloc[1]
    assert row.label == REGIME_UNMEASURED
    assert "salvage_rate >= 0.3: not measured (length/truncated_salvageable not logged; logged with eval.salvage, at an evaluation that truncated)" in row.regime
    assert "truncated_fraction = 0.3 (>= 0.02: met)" in row.regime


def test_a_present_regime_leaves_the_label_and_counts_it_decided(monkeypatch):
    salvageable = _history(length__truncated_fraction=0.1, length__truncated_salvageable=0.45)
    frame, cfg = _ladder(CLEAR_RISE, {0: salvageable, 1: salvageable}, monkeypatch)
    assert frame.iloc[1].label == REPRODUCED and frame.iloc[1].regime.startswith("present: ")
    assert answer_header(frame, cfg).startswith("1 of 1 decided (0 fragile), 1 familywise (0 fragile)")


@pytest.mark.parametrize("measure, curves, value", [
    ("entropy_drop", {"entropy": (0.8, 0.2)}, 0.75),                       # 1 - tail / head
    ("length_cv", {"length__std": 3.0, "length__mean": 12.0}, 0.25),       # sd / mean, scale-free
    ("incorrect_length_growth", {"length__incorrect": (10.0, 15.0)}, 1.5),  # tail / head
    ("accuracy_gain", {"accuracy": (0.2, 0.5)}, 0.3),                      # tail - head
    ("entropy_drop", {"entropy": (0.0, 0.0)}, math.nan),                   # 0 / 0: no value, never a silent 0
    # truncation learned away by the tail: 3 of the 11 logged steps (0, 10, 20) at 0.3, the rest at 0
    ("truncated_fraction", {"length__truncated_fraction": (0.3, 0.0)}, 0.0),               # last quarter only
    ("truncated_fraction_run", {"length__truncated_fraction": (0.3, 0.0)}, 0.9 / 11),      # every step of the run
    ("salvage_rate_run", {"length__truncated_salvageable": (0.6, 0.2)}, (3 * 0.6 + 8 * 0.2) / 11),
])
def test_each_measure_is_its_documented_ratio(measure, curves, value):
    got = run_measure(measure, _history(**curves))
    assert (math.isnan(got) and math.isnan(value)) or got == pytest.approx(value)


def test_regime_status_absent_beats_not_measured_and_present_needs_every_gate():
    h = [_history(length__truncated_fraction=0.0)]
    assert check_regime(TRUNCATION, h, "x").status == ABSENT
    h = [_history(length__truncated_fraction=0.1)]
    assert check_regime(TRUNCATION, h, "x").status == UNMEASURED
    h = [_history(length__truncated_fraction=0.1, length__truncated_salvageable=0.5)]
    assert check_regime(TRUNCATION, h, "x").status == PRESENT
    at_most = parse_regime({"premise": "p", "gates": [{"measure": "correct_in_soft_zone", "at_most": 0.1}]}, "r", ("previous",))
    assert at_most.gates == (Gate("correct_in_soft_zone", 0.1, True),)
    assert check_regime(at_most, [_history(length__soft_penalized_correct_fraction=0.156)], "x").status == ABSENT


@pytest.mark.parametrize("raw, message", [
    ({"premise": "p", "gates": [{"measure": "entropy", "at_least": 0.5}]}, "measure: 'entropy'; valid: truncated_fraction"),
    ({"premise": "p", "gates": [{"measure": "entropy_drop", "at_least": 0.5, "at_most": 0.9}]}, "at_least: NUMBER} or"),
    ({"premise": "", "gates": [{"measure": "entropy_drop", "at_least": 0.5}]}, "premise: expected the paper's premise"),
    ({"premise": "p", "gates": []}, "gates: expected a non-empty list"),
    ({"premise": "p", "gates": [{"measure": "entropy_drop", "at_least": "half"}]}, "at_least: expected a number"),
])
def test_bad_regimes_are_refused_naming_what_is_valid(raw, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("{", r"\{").replace("}", r"\}")):
        parse_regime(raw, "rungs[1].regime", ("previous",))


def test_eval_noise_is_the_binomial_sd_of_the_mean_paired_difference():
    # p 0.258, 1,024 prompts x avg@2, 64 pairs: sqrt(2 x 0.258 x 0.742 / (1024 x 2 x 64)) = 0.001709
    assert eval_noise_sd(0.258, 1024, 2, 64) == pytest.approx(0.0017091, abs=1e-7)
    assert math.isnan(eval_noise_sd(1.5, 1024, 2, 64))


def test_eval_draws_are_the_final_evaluation_of_a_pass_rate_metric():
    from grpolab.analysis.strength import eval_draws
    ev = {"prompts": 64, "k": 4, "final_prompts": 1024, "final_k": 2,
          "benchmarks": [{"name": "aime24", "source": "held_out", "size": 30, "n": 32}, {"name": "mine", "source": "held_out"}]}
    assert eval_draws("final:eval/pass_at_1", ev) == (1024, 2)
    assert eval_draws("final:eval/pass_at_1", {**ev, "final_prompts": 0, "final_k": 0}) == (64, 4)
    assert eval_draws("final:eval/aime24/avg@32", ev) == (30, 32) == eval_draws("final:eval/aime24/avg_at_32", ev)
    assert eval_draws("final:eval/mine/avg@8", ev) == (1024, 8)               # a held-out draw of the final size
    assert eval_draws("final:eval/other/avg@8", ev) is None and eval_draws("tail:entropy", ev) is None
    # AIME 2024 avg@32 at p 0.4 over 15 seeds: sqrt(2 x 0.24 / (30 x 32 x 15)) = 0.0058
    assert eval_noise_sd(0.4, 30, 32, 15) == pytest.approx(0.005774, abs=1e-6)


def _verdict(label: str, low: float, high: float, direction: str = "increase") -> Verdict:
    return Verdict(label, "", 64, (low + high) / 2, low, high, 0.04, None, direction=direction, smallest_effect=0.02)


def test_a_label_whose_bound_is_within_eval_noise_of_its_boundary_is_fragile():
    """Soft Overlong Punishment's v4 line: opposite direction with its upper bound at -0.0005,
    against an evaluation noise sd of 0.0017: a fresh avg@2 draw could cross 0."""
    knife = _verdict(OPPOSITE, -0.029, -0.0005)
    assert deciding_bounds(knife) == [("upper", -0.0005, 0.0)]
    assert fragility(knife, 0.0017).startswith("fragile: the upper bound -0.0005 is 0.0005 from its boundary +0")
    assert fragility(_verdict(OPPOSITE, -0.029, -0.005), 0.0017) == ""       # clears 0 by 3 sd
    # a drop tested as a drop: the unsigned lower bound -0.0005 decides 'reproduced' against -delta
    drop = _verdict(NO_EFFECT, -0.0195, 0.01)
    assert [b[0] for b in deciding_bounds(drop)] == ["lower", "upper"] and "lower bound -0.0195" in fragility(drop, 0.0017)
    assert fragility(knife, math.nan) == ""                                    # no pass-rate metric: not assessed


def test_the_fragile_case_is_marked_in_the_answer_line(monkeypatch):
    """Eight seeds whose mean rise clears 0 by less than the evaluation noise: 'direction holds'
    at face value, marked *fragile* in the line."""
    salvageable = _history(length__truncated_fraction=0.1, length__truncated_salvageable=0.45)
    diffs = [0.0045, 0.0060, 0.0050, 0.0055, 0.0040, 0.0065, 0.0050, 0.0055]
    frame, _ = _ladder(diffs, {0: salvageable, 1: salvageable}, monkeypatch)
    row = frame.iloc[1]
    assert row.label.startswith("direction holds") and "(*fragile*)" in row.verdict_vs_prev
    assert "fragile: the lower bound" in row.why
    assert "(*fragile*)" in answer_lines(frame)[1]


def test_header_counts_per_rung_and_familywise_labels():
    rise = paired_verdict({s: 0.05 + 0.004 * (s % 3) for s in range(16)}, "increase", 0.02, 0.9875, 4)
    # upper bound +0.0195 at 98.75 % per look, inside delta; at the family's 99.375 % it passes 0.02
    small = paired_verdict({s: 0.005 + 0.04 * ((s % 4) - 1.5) for s in range(64)}, "increase", 0.02, 0.9875, 4)
    family = with_family([rise, small])
    assert small.verdict == NO_EFFECT and small.high == pytest.approx(0.01949, abs=1e-5)
    assert family[1].family_label == "underpowered"
    assert decided_counts(family) == (2, 0, 1, 0, 2)  # the small one is decided per rung, not familywise
    frame = pd.DataFrame({"label": ["", family[0].verdict, family[1].verdict, REGIME_ABSENT],
                          "family_label": ["", family[0].family_label, family[1].family_label, REGIME_ABSENT]})
    cfg = StudyConfig(name="x", kind="ladder", path="x", base={}, seeds=(0,),
                      objectives=(Objective("final:eval/pass_at_1", "maximize", 0.02),),
                      rungs=(Rung("a", {}, 30.0), Rung("b", {"k": 1}, 36.0), Rung("c", {"k": 2}, 38.0),
                             Rung("d", {"k": 3}, 41.0)))
    assert answer_header(frame, cfg) == ("2 of 3 decided (0 fragile), 1 familywise (0 fragile); smallest effect "
                                         "that matters 0.02 of final:eval/pass_at_1 beside the published "
                                         "increments +6, +2, +3")


def test_a_familywise_label_is_checked_for_fragility_on_its_own_interval():
    """Mean rise 0.010 over 16 seeds, smaller than claimed: at 95 % its bounds +0.0026 and +0.0174
    clear 0 and 0.02 by more than 2 sd (0.0012); at the family's 97.5 % they are +0.0014 and
    +0.0186, within 2 sd: the familywise label is fragile, crossing with probability
    Phi(-0.00137 / 0.0012) = 13 %, and the header counts it."""
    from grpolab.analysis.strength import with_family_fragility, with_fragility
    rung = paired_verdict({s: 0.010 + 0.012 * ((s % 4) - 1.5) for s in range(16)}, "increase", 0.02)
    other = paired_verdict({s: 0.05 + 0.004 * (s % 3) for s in range(16)}, "increase", 0.02)
    family = with_family([with_fragility(rung, 0.0012), other])
    v = with_family_fragility(family[0], 0.0012)
    assert v.verdict == v.family_label == "direction holds, smaller than claimed"
    assert v.low == pytest.approx(0.00262, abs=1e-5) and v.fragile == ""
    assert v.family_fragile.startswith("fragile: the familywise lower bound +0.0014 is 0.0014 from its boundary +0")
    assert "crosses it with probability 13 %; fragile: the familywise upper bound +0.0186" in v.family_fragile
    assert decided_counts([v, family[1]]) == (2, 0, 2, 1, 2)
    frame = pd.DataFrame({"label": [v.verdict], "family_label": [v.family_label], "fragile": [False],
                          "family_fragile": [True]})
    cfg = StudyConfig(name="x", kind="ladder", path="x", base={}, seeds=(0,),
                      objectives=(Objective("final:eval/pass_at_1", "maximize", None),), rungs=())
    assert answer_header(frame, cfg) == "1 of 1 decided (0 fragile), 1 familywise (1 fragile)"


def test_fragile_means_within_two_eval_sd_and_says_the_crossing_probability():
    """A bound 1.5 sd from its boundary crosses on a fresh draw with probability Phi(-1.5) = 6.7 %:
    fragile (the old one-sd rule let it stand); at 2.5 sd (0.6 %) it is not."""
    from grpolab.analysis.strength import crossing_probability
    assert crossing_probability(0.0017, 0.0017) == pytest.approx(0.1587, abs=1e-4)
    assert crossing_probability(-0.0034, 0.0017) == pytest.approx(0.02275, abs=1e-5)
    note = fragility(_verdict(OPPOSITE, -0.029, -0.00255), 0.0017)
    assert note.startswith("fragile: the upper bound -0.0026 is 0.0026 from its boundary +0, within 2 x the evaluation")
    assert note.endswith("crosses it with probability 6.7 %")
    assert fragility(_verdict(OPPOSITE, -0.029, -0.00425), 0.0017) == ""


def test_eval_draws_read_a_whole_benchmark_files_rows_and_its_pass_at_1(tmp_path):
    """size 0 on a file benchmark reads every row: P is the file's row count; pass_at_1 of a named
    benchmark has the same binomial bound, with k its n samples."""
    from grpolab.analysis.strength import eval_draws
    data = tmp_path / "bench.jsonl"
    data.write_text("".join(f'{{"prompt": "{i}+1", "answer": "{i + 1}"}}\n' for i in range(37)))
    ev = {"prompts": 64, "k": 4, "final_prompts": 1024, "final_k": 2,
          "benchmarks": [{"name": "mine", "source": {"path": str(data)}, "size": 0, "n": 8}]}
    assert eval_draws("final:eval/mine/avg@8", ev) == (37, 8)
    assert eval_draws("final:eval/mine/pass_at_1", ev) == (37, 8)
    ev["benchmarks"][0]["size"] = 20
    assert eval_draws("final:eval/mine/pass_at_1", ev) == (20, 8)


def test_a_skewed_or_not_a_test_look_does_not_stop_like_a_decided_one():
    clean = paired_verdict({s: 0.05 + 0.004 * (s % 3) for s in range(8)}, "increase", 0.02)
    skewed = paired_verdict({**{s: 0.03 for s in range(7)}, 7: 0.2}, "increase", 0.02)
    assert clean.verdict in (REPRODUCED,) and stops(clean)
    assert skewed.skewed and skewed.verdict != "inconclusive" and not stops(skewed)
    assert stops(_verdict(REGIME_ABSENT, 0.0, 0.1))


def test_the_soft_zone_share_of_correct_completions_counts_right_answers_only():
    """cap 24, L_cache 5: the zone is |o| > 19. Correct: 3, 20, 19, 21 -> 2 of 4 in the zone; the
    incorrect 24s (truncated) count in the all-rows fraction only."""
    import torch

    from grpolab.trainer.metrics import rollout_metrics
    lengths = torch.tensor([3, 20, 19, 21, 24, 24, 10, 4], dtype=torch.float32)
    correct = torch.tensor([1, 1, 1, 1, 0, 0, 0, 0]).bool()
    out = rollout_metrics(torch.zeros(8), correct, lengths, lengths >= 24, 4, overlong=(24, 0))
    assert out["length/soft_penalized_correct_fraction"] == 0.5
    assert out["length/soft_penalized_fraction"] == 0.5            # 20, 21, 24, 24 of 8
    none_right = rollout_metrics(torch.zeros(8), torch.zeros(8).bool(), lengths, lengths >= 24, 4, overlong=(24, 0))
    assert math.isnan(none_right["length/soft_penalized_correct_fraction"])


def test_both_dapo_ladders_gate_every_rung_by_the_same_scale_free_rule():
    """Toy and Qwen ladders: every rung after the first names its premise, with the same gates
    (fractions and ratios only, so no bound is in tokens), measured on the previous rung's rows."""
    from conftest import REPO
    from grpolab.planning import planning
    from grpolab.studies.definition import load_study
    with planning():   # the Qwen file's GPU-only settings are recorded, not refused, on CPU
        toy, qwen = (load_study(REPO / "studies" / f"{n}.yaml") for n in ("dapo_table1", "dapo_table1_qwen"))
    assert toy.rungs[0].regime is None and all(r.regime is not None for r in toy.rungs[1:])
    assert toy.base["eval"]["salvage"] is qwen.base["eval"]["salvage"] is True   # the salvage gate's curve is logged
    assert [r.regime for r in toy.rungs] == [r.regime for r in qwen.rungs]
    assert [g.measure for r in toy.rungs[1:] for g in r.regime.gates] == [
        "truncated_fraction_run", "salvage_rate_run", "entropy_drop", "correct_in_soft_zone", "length_cv",
        "incorrect_length_growth", "all_correct_groups"]


def test_salvage_continues_only_truncated_samples_to_twice_the_cap_and_scores_the_whole_answer():
    """Cap 4: two of four samples reach it; continued from prompt + prefix, one of them ends with
    the right answer (the prefix and its continuation are judged together), so the rate is 1/2."""
    from grpolab.world.generation import EvalOptions, evaluate, salvaged
    from grpolab.world.task import Example

    class Sums:
        name, max_completion_length = "sums", 4

        def is_correct(self, ex, text):
            return text.strip() == ex.answer

    calls = []

    def sampler(prompts, n, max_new, temp=1.0, greedy=False):
        calls.append((list(prompts), n, max_new))
        if n == 1 and not greedy and prompts[0].endswith("12"):            # the salvage call
            return ["345", "9"], [3, 1]                                      # "12" + "345" is right
        if greedy:
            return ["x"] * len(prompts), [1] * len(prompts)
        return ["12", "7", "1234", "99"], [4, 1, 4, 2]

    ex = Example(prompt="q:", answer="12345")
    assert salvaged(sampler, Sums(), [ex] * 4, ["12", "7", "1234", "99"], [4, 1, 4, 2], 4, 1.0) == (2, 1)
    assert calls[-1] == (["q:12", "q:1234"], 1, 4)                           # 4 more tokens: twice the cap
    calls.clear()
    result = evaluate(None, None, Sums(), [ex], EvalOptions(4, max_new_tokens=4, salvage=True), sampler=sampler)
    assert result.truncated == 2 and result.salvage_rate == 0.5 and len(calls) == 3
    plain = evaluate(None, None, Sums(), [ex], EvalOptions(4, max_new_tokens=4), sampler=sampler)
    assert math.isnan(plain.salvage_rate) and plain.truncated == 0 and len(calls) == 5   # no salvage call


def test_salvage_moves_no_random_draw_of_the_evaluation_or_of_training():
    """The continuations sample with the torch generator restored afterwards: the next prompt's
    draw and the generator state left for training are the same with salvage on or off."""
    import torch

    from grpolab.world.generation import EvalOptions, evaluate
    from grpolab.world.task import Example

    class Sums:
        name, max_completion_length = "sums", 4

        def is_correct(self, ex, text):
            return text.strip() == ex.answer

    def sampler(prompts, n, max_new, temp=1.0, greedy=False):
        draws = torch.rand(len(prompts) * n)
        return (["1234" if d < 0.5 else "5" for d in draws], [4 if d < 0.5 else 1 for d in draws])

    runs = []
    for salvage in (False, True):
        torch.manual_seed(7)
        result = evaluate(None, None, Sums(), [Example(prompt=f"q{i}:", answer="5") for i in range(8)],
                          EvalOptions(4, max_new_tokens=4, batch_prompts=2, salvage=salvage), sampler=sampler)
        runs.append((result.pass_at_1, torch.rand(1).item()))
    assert runs[0] == runs[1] and result.truncated > 0


def test_a_salvage_gate_on_rows_that_never_log_salvage_is_refused_at_load(tmp_path):
    """salvage_rate reads length/truncated_salvageable, logged only with eval.salvage: true; a
    ladder whose gated rows leave it off could only ever read 'regime not measured'."""
    from conftest import REPO
    from grpolab.studies.definition import load_study
    text = (REPO / "studies" / "dapo_table1.yaml").read_text()
    assert load_study(REPO / "studies" / "dapo_table1.yaml").rung_experiment(0, 100)["eval"]["salvage"] is True
    off = tmp_path / "ladder.yaml"
    off.write_text(text.replace("salvage: true}", "salvage: false}"))
    with pytest.raises(ConfigError, match=r"rungs\[1\] \(\+ Overlong Filtering\)\.regime: the gate salvage_rate_run: "
                                          r"run:length/truncated_salvageable reads a curve logged only with eval\.salvage: "
                                          r"true.*set eval\.salvage: true where they turn it off \(the study's base"):
        load_study(off)


def test_the_saturation_gate_reports_the_all_wrong_share_beside_it():
    """Dynamic sampling's filter drops all-wrong groups too; the gate stays on all-correct groups
    (DAPO's stated premise) and says what share was all wrong, ungated."""
    regime = parse_regime({"premise": "saturation", "gates": [{"measure": "all_correct_groups", "at_least": 0.2}]},
                          "regime", ("previous",))
    rows = [_history(groups__all_correct=0.05, groups__all_wrong=0.4), _history(groups__all_correct=0.07,
                                                                              groups__all_wrong=0.3)]
    check = check_regime(regime, rows, "'Token-level Loss' rows")
    assert check.status == ABSENT
    assert check.gates[0].text() == "all_correct_groups = 0.06 (>= 0.2: failed; all_wrong_groups = 0.35 beside it, not gated)"


def test_mechanism_floors_read_the_previous_rung_and_the_length_floor_is_scale_free():
    """A floor on the rung's own rows would partly measure its own effect: the DAPO rungs' floors
    read the previous rung's rows; the token-level loss floor is length sd / mean, not tokens."""
    import torch

    from conftest import REPO
    from grpolab.planning import planning
    from grpolab.studies.definition import load_study
    from grpolab.trainer.metrics import rollout_metrics
    with planning():
        for name in ("dapo_table1", "dapo_table1_qwen"):
            study = load_study(REPO / "studies" / f"{name}.yaml")
            # dynamic sampling's rounds exist only where it is on: its own rows, whether it acted at all
            assert [r.mechanism.rows for r in study.rungs[1:]] == ["previous"] * 4 + ["this"]
            assert study.rungs[4].mechanism.metric == "tail:length/cv" and study.rungs[4].mechanism.at_least == 0.15
            # the two cap mechanisms act on whatever each step holds, and a policy learns the cap: the whole run
            assert [study.rungs[i].mechanism.metric for i in (1, 3)] == [
                "run:length/truncated_fraction", "run:length/soft_penalized_fraction"]
            assert "all-wrong groups" in study.rungs[5].regime.premise
    lengths = torch.tensor([4.0, 8.0, 12.0, 16.0])   # mean 10, sd (N-1) 5.164
    out = rollout_metrics(torch.zeros(4), torch.zeros(4).bool(), lengths, lengths >= 24, 2)
    assert out["length/cv"] == pytest.approx(0.5164, abs=1e-4)


@pytest.mark.parametrize("metric, message", [
    ("run:eval/pass_at_1", "run: reads a training curve"),
    ("head:", "head: reads a training curve"),
    ("mean:length/truncated_fraction", "expected <window>:<key> with window in final, auc, tail, steps_to, tokens_to, head, run"),
])
def test_a_floor_reads_head_or_run_of_a_training_curve_only(metric, message):
    from grpolab.studies.definition import parse_mechanism
    from grpolab.studies.objectives import check_window_metric
    check_window_metric("run:length/truncated_fraction")
    check_window_metric("tail:clip/high_fraction")
    with pytest.raises(ConfigError, match=f"rungs\\[1\\].mechanism.metric: metric '{re.escape(metric)}': .*{message}"):
        parse_mechanism({"metric": metric, "at_least": 0.02}, "rungs[1].mechanism", ("this", "previous"), check_window_metric)
