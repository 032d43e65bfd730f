"""The same data give the same label, reason and caveats in every output: ``grpolab verdicts``
(markdown, CSV, dashboard) and a ladder's ``table`` (markdown, CSV, LaTeX) and dashboard. The
ladders here are real Optuna studies in a real journal store whose trials are written directly
(values built for each label), so no training is needed; the claims' rows are the same trials."""

import csv
import io
import math
import re

import numpy as np
import optuna
import pytest
import yaml
from optuna.distributions import CategoricalDistribution, IntDistribution

from grpolab.studies.registration import register_ladder
from grpolab.studies.definition import load_study
from grpolab.studies.rows import ROW_ATTR, RUN_ATTR, row_key
from grpolab.report.ladder_caption import caption_head, ladder_caption
from grpolab.report.tables import study_table
from grpolab.studies.storage import create_or_load, default_storage
from grpolab.analysis.verdicts import NO_EFFECT, OPPOSITE, REPRODUCED, SMALLER, UNDERPOWERED, UNDETERMINED

SEEDS = list(range(8))
BASE = {"task": {"name": "addition", "digits": 2}, "model": {"preset": "tiny"}, "warm_start": {"enabled": False},
        "method": {"base": "grpo"}, "train": {"group_size": 4, "prompts_per_rollout": 2},
        # a final evaluation large enough (4,096 x 8) that no built label is within its noise of a boundary (*fragile*)
        "eval": {"prompts": 4, "k": 1, "final_prompts": 4096, "final_k": 8}}
# rung -> its change over the previous rung on each seed: one label each (smallest effect 0.05)
STEPS = {
    "+ big gain": ([0.10, 0.12, 0.09, 0.11, 0.10, 0.08, 0.12, 0.10], REPRODUCED),
    "+ small gain": ([0.02, 0.03, 0.025, 0.02, 0.03, 0.025, 0.02, 0.03], SMALLER),
    "+ nothing": ([0.001, -0.002, 0.0, 0.002, -0.001, 0.001, 0.0, -0.001], NO_EFFECT),
    "+ loss": ([-0.10, -0.12, -0.09, -0.11, -0.10, -0.08, -0.12, -0.10], OPPOSITE),
    "+ noise": ([0.3, -0.25, 0.2, -0.3, 0.35, -0.2, 0.1, -0.15], UNDERPOWERED),
    "+ steady": ([0.04, 0.04, 0.04, 0.04, 0.04, 0.04, 0.04, 0.04], UNDETERMINED),    # zero spread: sign test
}
LABELS = [label for _, label in STEPS.values()]


def write_ladder(tmp_path, state, name="labels_ladder", objectives=None, values=None, deviations=None):
    """A ladder file and its Optuna study with one COMPLETE trial per row carrying ``values``."""
    # each rung a learning rate the previous one did not have (the default is 2e-4): no rung repeats another
    study = {"kind": "ladder", "name": name, "seeds": SEEDS, "base": BASE, "budget": {"train.steps": 1},
             "rungs": [{"name": "base"}] + [{"name": n, "changes": {"train.learning_rate": 1e-4 * (i + 3)}}
                                            for i, n in enumerate(STEPS)]}
    study.update({"objectives": objectives} if objectives else {"metric": "final:eval/pass_at_1", "smallest_effect": 0.05})
    if deviations:
        study["deviations"] = deviations
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    cfg = load_study(path)
    opt = create_or_load(cfg, default_storage(state))
    register_ladder(state, cfg, opt)
    dists = {"rung": IntDistribution(0, len(cfg.rungs) - 1), "seed": CategoricalDistribution(SEEDS)}
    for (rung, seed), vals in values(cfg).items():
        opt.add_trial(optuna.trial.create_trial(params={"rung": rung, "seed": seed}, distributions=dists, values=vals,
                                                user_attrs={ROW_ATTR: row_key(rung, seed), RUN_ATTR: ""}))
    return path, cfg


def cumulative(cfg):
    """rung r, seed s -> base_s + the sum of the built steps up to r."""
    base = np.linspace(0.2, 0.4, len(SEEDS))
    out = {}
    for s in SEEDS:
        level = base[s]
        for r in range(len(cfg.rungs)):
            if r:
                level += list(STEPS.values())[r - 1][0][s]
            out[(r, s)] = [float(level)]
    return out


def claim_results(tmp_path, state):
    """One judged claim per built step (``STEPS``: one label each) on a written ladder, as a
    ``grpolab verdicts`` run returns them (with their family)."""
    from grpolab.analysis.claim_runs import ClaimResult
    from grpolab.analysis.claims import load_claim
    from grpolab.analysis.verdicts import paired_verdict, with_family
    write_ladder(tmp_path, state, values=cumulative)
    folder = tmp_path / "claims"
    folder.mkdir()
    results = []
    for i, (rung, (steps, _)) in enumerate(STEPS.items()):
        (folder / f"c{i}.yaml").write_text(yaml.safe_dump({
            "source": "t (arXiv:0000.00000), Section 1", "statement": f"{rung} helps", "study": "../labels_ladder.yaml",
            "treatment": {"rung": rung}, "control": {"rung": "base" if i == 0 else list(STEPS)[i - 1]},
            "metric": "final:eval/pass_at_1", "direction": "increase", "smallest_effect": 0.05}))
        results.append(ClaimResult(load_claim(folder / f"c{i}.yaml"), paired_verdict(dict(enumerate(steps)), "increase", 0.05),
                                   preregistration="not pre-registered: test"))
    for r, v in zip(results, with_family([r.verdict for r in results])):
        r.verdict = v
    return results


def test_every_ladder_output_gives_the_same_labels_and_caveats(tmp_path):
    state = tmp_path / "state"
    dev = [{"date": "2026-11-25", "change": "smallest_effect 0.05", "after_seeing": "a pilot"}]
    path, cfg = write_ladder(tmp_path, state, values=cumulative, deviations=dev)
    md = study_table(str(path), state, None, "markdown")
    rows = list(csv.DictReader(io.StringIO(study_table(str(path), state, None, "csv"))))
    latex = study_table(str(path), state, None, "latex")
    assert [r["verdict_vs_prev"] for r in rows[1:]] == LABELS
    for r in rows[1:]:
        assert r["why"] and r["why"].replace("|", "\\|") in md                  # reason beside the label
        assert "Holm" in r["tests"] and "in a family of 6" in r["tests"]
        assert r["familywise"].endswith("% simultaneous (family of 6)")
    assert rows[1]["familywise"].startswith(REPRODUCED + " at 99.17 %")
    for label in LABELS:
        assert f"| {label} " in md and label in latex
    assert "unmeasured" not in rows[1]["why"] and "size, is unmeasured" in rows[6]["why"]
    caption = ladder_caption(cfg, 0, state)
    dated = "2026-11-25: smallest_effect 0.05 (after seeing a pilot)"
    assert caption.deviation_lines() == [dated] and len(caption_head(caption).splitlines()) == 2
    assert "but 1 deviation(s) declared: changed after results were seen" in caption.registration
    assert caption_head(caption) in md and f"\n\ndeviations:\n- {dated}\n\ncolumns:\n" in md   # a list after the table
    assert md.index("| rung") < md.index("deviations:") and all(f"- {note}" in md for note in caption.columns)
    assert "Deviations:\n\\begin{itemize}\n\\item 2026-11-25: smallest\\_effect 0.05" in latex
    assert {r["deviations"] for r in rows} == {dated}
    assert "pre-registered" not in md and any("Bonferroni interval at 1 - 0.05/(rungs x looks)" in n for n in caption.columns)
    # the dashboard's panels and table: the same labels
    from grpolab.report.dashboard import _ladder_sections
    sections, tables = [], []
    _ladder_sections(state, str(path), None, cfg, {"ablation": True, "paired_delta": True}, sections, tables)
    panel = dict(sections)["Rung verdicts"]
    assert list(panel.data[0].text) == LABELS
    # the paired-delta bars carry the verdict's paired t-interval (the forest panel's), level named
    bars = dict(sections)["Paired delta vs previous rung"]
    forest = [(hi * 0.05, lo * 0.05) for hi, lo in zip(panel.data[0].error_x.array, panel.data[0].error_x.arrayminus)]
    whiskers = list(zip(bars.data[0].error_y.array, bars.data[0].error_y.arrayminus))
    shown = [i for i, f in enumerate(forest) if math.isfinite(f[0])]
    assert len(shown) == 5 and [x for i in shown for x in whiskers[i]] == pytest.approx([x for i in shown for x in forest[i]])
    plain = [re.sub(r"<[^>]*>|\s", "", fig.layout.title.text) for fig in (bars, panel)]   # titles are wrapped
    assert "95%pairedt-interval" in plain[0] and "95%pairedtCI" in plain[1]
    page = "".join(tables)   # the answer lines first, then the table with its caption
    assert all(label in tables[0] for label in LABELS)
    opened = re.search(r'<details class="deviations"><summary>(.*?)</summary><ol>(.*?)</ol></details>', page)
    assert opened.groups() == ("Deviations: 1 change made after results were seen",
                               "<li><time>2026-11-25</time>: smallest_effect 0.05 (after seeing a pilot)</li>")
    assert page.index("<table") < opened.start()   # the table first, the deviations to open below it


def test_each_objective_is_tested_in_its_own_direction(tmp_path):
    """`table --metric final:eval/pass_at_1` of dynamic_sampling_efficiency: +0.05 pass@1 on every
    seed (and fewer steps) reads as an improvement, not as a failed drop (the old bug)."""
    from grpolab.analysis import claims
    src = load_study(claims.CLAIMS_DIR.parent / "dynamic_sampling_efficiency.yaml")
    state = tmp_path / "state"
    objectives = [{"metric": o.metric, "direction": o.direction, "smallest_effect": o.smallest_effect}
                  for o in src.objectives]
    rng = np.random.default_rng(0)

    def values(cfg):
        out = {}
        for s in SEEDS:
            steps, tokens, acc = 100.0, 50_000.0, 0.40 + rng.normal(0, 0.02)
            for r in range(len(cfg.rungs)):
                out[(r, s)] = [steps - 20 * r - 10 * (s % 2) * r, tokens + (30_000 + 1_000 * s) * r, acc + (0.05 + 0.003 * (s % 3)) * r]
        return out
    path, cfg = write_ladder(tmp_path, state, "objective_dirs", objectives, values)
    by_metric = {}
    for o in cfg.objectives:
        rows = list(csv.DictReader(io.StringIO(study_table(str(path), state, None, "csv", o.metric))))
        by_metric[o.metric] = rows[1]["verdict_vs_prev"]
    assert by_metric["final:eval/pass_at_1"] == REPRODUCED                         # maximize: a rise
    assert by_metric["steps_to:eval/pass_at_1>=0.5"] == REPRODUCED + " (tested: drop)"   # minimize: fewer steps
    assert by_metric["tokens_to:eval/pass_at_1>=0.5"].startswith("opposite direction")   # more tokens
    md = study_table(str(path), state, None, "markdown", "final:eval/pass_at_1")
    assert "final:eval/pass_at_1 (maximize)" in md and "smallest effect that matters 0.02" in md


def test_a_study_level_smallest_effect_with_several_objectives_is_refused(tmp_path):
    from grpolab.errors import ConfigError
    study = {"kind": "ladder", "name": "x", "seeds": [0], "base": BASE, "smallest_effect": 0.02,
             "objectives": ["final:eval/pass_at_1", {"metric": "steps_to:eval/pass_at_1>=0.5", "direction": "minimize"}],
             "rungs": [{"name": "a"}]}
    (tmp_path / "x.yaml").write_text(yaml.safe_dump(study))
    with pytest.raises(ConfigError, match="give each its own"):
        load_study(tmp_path / "x.yaml")


def test_a_changed_claim_field_is_flagged_declared_or_not(tmp_path):
    from grpolab.studies.registration import Deviation, record, status
    state = tmp_path / "s"
    fields = {"metric": "final:eval/pass_at_1", "smallest_effect": 0.02}
    record(state, "claim:x", fields, rows_done=0)
    assert status(state, "claim:x", fields, ()).startswith("registered in this state ")
    assert "pre-registered" not in status(state, "claim:x", fields, ())
    record(state, "claim:x", {**fields, "smallest_effect": 9}, rows_done=5)      # the first record stays
    moved = {**fields, "smallest_effect": 0.05}
    assert "CHANGED" in status(state, "claim:x", moved, ()) and "smallest_effect" in status(state, "claim:x", moved, ())
    assert "UNDECLARED" in status(state, "claim:x", moved, ())
    today = __import__("datetime").date.today().isoformat()
    assert "declared in deviations" in status(state, "claim:x", moved, (Deviation(today, "0.02 -> 0.05", "data"),))
    record(state, "claim:late", fields, rows_done=3)
    assert status(state, "claim:late", fields, ()).startswith("not registered before its rows: first registered")
    assert math.isfinite(len(status(state, "claim:none", fields, ())))


def test_claim_outputs_agree_and_carry_kind_deviations_and_family(tmp_path):
    """verdicts' markdown, CSV and dashboard of the same results: same labels and reasons, the
    construction-check and statistic notes, deviations, pre-registration and the family statement."""
    from grpolab.analysis.claim_runs import ClaimResult
    from grpolab.analysis.claims import load_claim
    from grpolab.report.verdict_page import family_statement, render_verdicts, write_claims_dashboard
    from grpolab.analysis.verdicts import paired_verdict, with_family
    state = tmp_path / "state"
    write_ladder(tmp_path, state, values=cumulative)
    claims_dir = tmp_path / "claims"
    claims_dir.mkdir()
    results = []
    for i, (rung, (steps, label)) in enumerate(list(STEPS.items())[:4]):
        data = {"source": "t (arXiv:0000.00000), Section 1", "statement": f"{rung} | helps", "study": "../labels_ladder.yaml",
                "treatment": {"rung": rung}, "control": {"rung": "base" if i == 0 else list(STEPS)[i - 1]},
                "metric": "final:eval/pass_at_1", "direction": "increase", "smallest_effect": 0.05,
                "kind": "construction_check" if i == 0 else "reproduction",
                "statistic_note": "mean, not max" if i == 1 else "",
                "deviations": [{"date": "2026-11-20", "change": "delta 0.03 -> 0.05", "after_seeing": "pilot"}] if i == 2 else []}
        (claims_dir / f"c{i}.yaml").write_text(yaml.safe_dump(data))
        claim = load_claim(claims_dir / f"c{i}.yaml")
        results.append(ClaimResult(claim, paired_verdict(dict(enumerate(steps)), "increase", 0.05),
                                   preregistration="not pre-registered: test"))
    for r, v in zip(results, with_family([r.verdict for r in results])):
        r.verdict = v
    md, text = render_verdicts(results, "markdown"), render_verdicts(results, "csv")
    rows = list(csv.DictReader(io.StringIO(text)))
    html_text = (tmp_path / "v.html").read_text() if write_claims_dashboard(results, tmp_path / "v.html") else ""
    assert [r["verdict"] for r in rows] == LABELS[:4]
    assert "construction check" in rows[0]["kind"] and "mean, not max" in rows[1]["kind"]
    assert rows[2]["deviations"] == "2026-11-20: delta 0.03 -> 0.05 (after seeing pilot)" and rows[3]["deviations"] == "none"
    assert all("Holm" in r["tests"] and "in a family of 4" in r["tests"] for r in rows)
    assert all(r["familywise"].endswith("simultaneous (family of 4)") for r in rows)
    for r in rows:
        assert r["why"].replace("|", "\\|") in md and r["verdict"] in html_text
    assert "+ big gain \\| helps" in md                                      # a | in a cell no longer breaks the row
    assert family_statement(results) in md and "hold together with probability &gt;= 95%" in html_text
    assert all(line.count("|") - line.count("\\|") == md.splitlines()[0].count("|") for line in md.splitlines()[:6])


def test_seeds_for_power_is_an_integer_in_every_output(tmp_path):
    """``seeds for 80% power`` prints as an integer (``7``, not ``7.0`` or ``7.000``) in the verdicts'
    markdown, CSV and HTML page, whatever number type the power search handed back."""
    import dataclasses
    from grpolab.report.verdict_page import render_verdicts, verdict_frame, write_claims_dashboard
    results = claim_results(tmp_path, tmp_path / "state")
    results[4].verdict = dataclasses.replace(results[4].verdict, seeds_needed=7.0)          # a float 7
    results[5].verdict = dataclasses.replace(results[5].verdict, seeds_needed=np.int64(12))
    column = "seeds for 80% power"
    rows = list(csv.DictReader(io.StringIO(render_verdicts(results, "csv"))))
    assert [r[column] for r in rows] == ["--"] * 4 + ["7", "12"]   # a decided label shows none: it conditions on the outcome
    md = render_verdicts(results, "markdown").splitlines()
    at = [c.strip() for c in md[0].split("|")].index(column)
    cells = [[c.strip() for c in line.split("|")][at] for line in md[2:2 + len(results)]]
    assert cells[4:] == ["7", "12"] and all(re.fullmatch(r"\d+|--", c) for c in cells), cells
    page = (tmp_path / "v.html")
    write_claims_dashboard(results, page)
    table = page.read_text().split("<h2>Verdicts</h2>", 1)[1]
    assert "<td>7</td>" in table and "<td>12</td>" in table and not re.search(r"<td>\d+\.0+</td>", table)
    assert list(verdict_frame(results)[column][4:]) == ["7", "12"]


def test_a_ladder_without_deviations_says_none_in_every_output():
    """No deviation is stated as 'none' (never left out): the markdown list, the LaTeX list, the
    csv column and the dashboard's section, whose summary counts them; two dated items, two rows."""
    import pandas as pd

    from grpolab.report.ladder_caption import LadderCaption, caption_html, caption_lists, latex_lists
    from grpolab.report.tables import escape_latex, render
    from grpolab.studies.registration import Deviation
    bare = LadderCaption("toy: final:eval/pass_at_1 (maximize)", "", (), ("n: seeds run",))
    frame = pd.DataFrame({"rung": ["a", "b"], "mean": [0.1, 0.2]})
    assert caption_lists(bare).startswith("deviations:\n- none\n\ncolumns:\n- n: seeds run")
    assert "Deviations:\n\\begin{itemize}\n\\item none\n" in latex_lists(bare, escape_latex)
    assert list(pd.read_csv(io.StringIO(render(frame, "csv", bare))).deviations) == ["none", "none"]
    assert "<summary>Deviations: none</summary><p>none declared</p>" in caption_html(bare)[1]
    two = bare._replace(deviations=(Deviation("2026-11-20", "a -> b", "look 1"), Deviation("2026-11-21", "c", "d")))
    below = caption_html(two)[1]
    assert "<summary>Deviations: 2 changes made after results were seen</summary>" in below
    assert re.findall(r"<li><time>(.*?)</time>", below) == ["2026-11-20", "2026-11-21"]
    assert caption_lists(two).startswith("deviations:\n- 2026-11-20: a -> b (after seeing look 1)\n- 2026-11-21: c")
