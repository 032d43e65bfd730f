"""Dashboards: extraction tested on real stored runs, figures built from it, and the HTML report
opened in headless Chromium: no console errors, every panel holds data, a screenshot is saved."""

import json
import os
import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from conftest import REPO
from grpolab.report import dashboard_data as data
from grpolab.report.dashboard import PageView, build_dashboard, curve_figure, load_layout
from grpolab.errors import ConfigError
from grpolab.studies.coordinator import run_study
from grpolab.studies.study_run import StudyRun
from grpolab.tracking.recorder import tracking_uri

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--disable-quic", "--virtual-time-budget=8000"]


@pytest.fixture(scope="module")
def ladder(tmp_path_factory, shared_state):
    tmp = tmp_path_factory.mktemp("dash")
    study = {"kind": "ladder", "name": "dash_ladder", "seeds": [0, 1], "metric": "final:eval/pass_at_1",
             "smallest_effect": 0.05,                      # rung verdicts: the page draws the forest panel too
             "published_source": "DAPO (arXiv:2503.14476), Table 1: AIME 2024 avg@32 of Qwen2.5-32B",   # a long subplot title
             "base": {"method": {"base": "grpo"}, "task": {"name": "addition", "digits": 2}, "model": {"preset": "tiny"},
                      "train": {"group_size": 8, "prompts_per_rollout": 4, "minibatches": 2, "learning_rate": 0.002},
                      "eval": {"prompts": 8, "k": 2}},
             "budget": {"train.steps": 4, "eval.every": 2},
             "rungs": [{"name": "GRPO", "published": 30}, {"name": "+ Clip-Higher", "changes": {"method.eps_high": 0.28},
                                                          "published": 38}]}
    path = tmp / "dash_ladder.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    assert run_study(StudyRun.of(str(path), shared_state, workers=1, echo=lambda s: None)) == 0
    return path


def test_extraction_matches_mlflow_histories(ladder, shared_state):
    runs = data.study_runs(shared_state, "dash_ladder")
    assert len(runs) == 4 and set(runs.label) == {"GRPO", "+ Clip-Higher"}
    curves = data.metric_curves(shared_state, runs, ["entropy", "eval/pass_at_1"])
    client = MlflowClient(tracking_uri(shared_state))
    rid = runs.run_id.iloc[0]
    stored = [(m.step, m.value) for m in client.get_metric_history(rid, "entropy")]
    mine = curves[(curves.run_id == rid) & (curves.metric == "entropy")][["step", "value"]]
    assert sorted(stored) == sorted(map(tuple, mine.values.tolist()))
    summary = data.band_summary(curves)
    first = summary[(summary.label == "GRPO") & (summary.metric == "entropy")].step.min()   # the first log window
    row = summary[(summary.label == "GRPO") & (summary.metric == "entropy") & (summary.step == first)].iloc[0]
    vals = curves[(curves.label == "GRPO") & (curves.metric == "entropy") & (curves.step == first)].value
    assert row["mean"] == pytest.approx(vals.mean()) and row.low == vals.min() and row.high == vals.max() and row.n == 2
    fig = curve_figure(summary, "entropy", "Entropy")
    assert len(fig.data) == 4 and {t.name for t in fig.data if t.showlegend is not False} == {"GRPO", "+ Clip-Higher"}


def test_layout_validation():
    assert load_layout(None)["panels"][0]["metric"] == "eval/pass_at_1"
    assert load_layout(str(REPO / "dashboards/length_and_entropy.yaml"))["title"] == "Length and entropy"
    with pytest.raises(ConfigError, match="unknown key 'colour'"):
        bad = REPO / "tests" / "_bad_layout.yaml"
        try:
            bad.write_text("colour: red\n")
            load_layout(str(bad))
        finally:
            bad.unlink()


def _chromium():
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.fail("chromium is not installed: `make test` installs Debian's chromium package")
    return exe


# the page's narrowest panel: its grid gives each panel at least 560 px (a 600 px window, one column)
NARROW_WINDOW = "--window-size=600,3000"


def _collisions(panel: dict) -> list[str]:
    """Titles (figure title and note, subplot-title annotations, axis titles), legend and toolbar
    of one panel whose boxes intersect (by more than 1 px both ways), or that stick out of it (cut)."""
    boxes, (left, top, right, bottom) = panel["boxes"], panel["box"]
    out = []
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            (al, at, ar, ab), (bl, bt, br, bb) = a["box"], b["box"]
            if min(ar, br) - max(al, bl) > 1 and min(ab, bb) - max(at, bt) > 1:
                out.append(f"{panel['panel']}: {a['kind']} {a['text'][:40]!r} overlaps {b['kind']} {b['text'][:40]!r}")
        (al, at, ar, ab) = a["box"]
        if al < left - 1 or ar > right + 1 or at < top - 1 or ab > bottom + 1:
            out.append(f"{panel['panel']}: {a['kind']} {a['text'][:40]!r} is cut at the panel's edge")
    return out


def _plain(text: str) -> str:
    """A title's text without markup and whitespace (wrapped lines join without a space)."""
    return re.sub(r"<[^>]*>|\s", "", text)


def _assert_titles_clear(panels) -> None:
    for p in panels:
        kinds = [b["kind"] for b in p["boxes"]]
        assert "gtitle" in kinds and "modebar" in kinds, p          # the boxes are recorded at all
    assert [c for p in panels for c in _collisions(p)] == []


def test_collision_check_sees_overlaps():
    """The check itself: two intersecting boxes and a box past the panel's edge are reported."""
    panel = {"panel": "p", "box": [0, 0, 560, 400], "boxes": [
        {"kind": "gtitle", "text": "a long title", "box": [10, 20, 400, 40]},
        {"kind": "modebar", "text": "", "box": [300, 2, 558, 25]},
        {"kind": "xtitle", "text": "x", "box": [200, 380, 300, 396]}]}
    assert len(_collisions(panel)) == 1 and "overlaps modebar" in _collisions(panel)[0]
    panel["boxes"][2]["box"] = [500, 380, 600, 396]
    assert len(_collisions(panel)) == 2 and "cut" in _collisions(panel)[1]


def test_report_in_headless_chromium(ladder, shared_state, tmp_path):
    out = build_dashboard(shared_state, tmp_path / "report.html", str(ladder))
    page = out.read_text()
    assert re.search(r"<script[^>]+src=", page) is None       # no external script: plotly.js is embedded
    assert len(page) > 3_000_000
    profile = tmp_path / "profile"
    dom = subprocess.run([_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--enable-logging=stderr",
                          "--v=0", NARROW_WINDOW, "--dump-dom", out.as_uri()], capture_output=True, text=True, timeout=120)
    check = json.loads(re.search(r'<pre id="grpolab-self-check">([^<]*)</pre>', dom.stdout).group(1))
    console_errors = [l for l in dom.stderr.splitlines() if "CONSOLE" in l and ("Uncaught" in l or "Error" in l)]
    assert console_errors == [] and check["errors"] == []
    panels = {p["panel"]: p for p in check["panels"]}
    for name in ("Ablation table", "Held-out pass@1", "Policy entropy", "Length of incorrect completions",
                 "Clip fraction (either bound binds)", "All-wrong groups (zero variance)", "KL to the reference"):
        assert name in panels, name
    for p in check["panels"]:
        assert p["rendered"] and p["traces"] > 0 and p["points"] > 0, p
    # no two titles, legend or toolbar overlap, none is cut, at the narrowest panel (issue 27)
    assert {"Paired delta vs previous rung", "Rung verdicts"} <= set(panels)
    assert 550 <= panels["Ablation table"]["box"][2] - panels["Ablation table"]["box"][0] < 600   # 560 less padding
    _assert_titles_clear(check["panels"])
    titles = {name: _plain(" ".join(b["text"] for b in p["boxes"] if b["kind"] in ("gtitle", "annotation-text")))
              for name, p in panels.items()}                                      # titles are wrapped: no spaces
    assert "band:min-maxover2seeds" in titles["Policy entropy"]                     # the band says what it is
    assert "95%pairedt-interval" in titles["Paired delta vs previous rung"]         # one interval, level named
    assert "95%pairedtCI" in titles["Rung verdicts"] and "95%t-interval" in titles["Ablation table"]
    assert not any("bca" in t.lower() or "bootstrap" in t.lower() for t in titles.values())
    shot = tmp_path / "dashboard.png"
    subprocess.run([_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile2'}", "--window-size=1400,2400",
                    f"--screenshot={shot}", out.as_uri()], capture_output=True, timeout=120)
    assert shot.exists() and shot.stat().st_size > 50_000
    keep = os.environ.get("GRPOLAB_ARTIFACTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(keep) / "dashboard.png")


def test_claims_page_titles_clear_of_each_other_and_the_toolbar_in_chromium(tmp_path):
    """The verdicts page (``grpolab verdicts``): forest and per-seed panels at the narrowest panel
    width, no title, legend or toolbar overlapping another or cut; a screenshot is kept."""
    from test_verdict_outputs import claim_results
    from grpolab.report.verdict_page import write_claims_dashboard
    out = Path(write_claims_dashboard(claim_results(tmp_path, tmp_path / "state"), tmp_path / "verdicts.html"))
    dom = subprocess.run([_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", NARROW_WINDOW,
                          "--dump-dom", out.as_uri()], capture_output=True, text=True, timeout=120)
    check = json.loads(re.search(r'<pre id="grpolab-self-check">([^<]*)</pre>', dom.stdout).group(1))
    assert check["errors"] == [] and [p["panel"] for p in check["panels"]] == ["Verdicts", "Per-seed paired differences"]
    _assert_titles_clear(check["panels"])
    forest = check["panels"][0]
    assert any(b["kind"] == "legend" for b in forest["boxes"])
    assert "95%pairedtCI" in _plain(next(b["text"] for b in forest["boxes"] if b["kind"] == "gtitle"))
    keep = os.environ.get("GRPOLAB_ARTIFACTS")
    if keep:
        shot = Path(keep) / "verdicts.png"
        Path(keep).mkdir(parents=True, exist_ok=True)
        subprocess.run([_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile2'}",
                        "--window-size=1400,2400", f"--screenshot={shot}", out.as_uri()], capture_output=True, timeout=120)


def test_dashboard_of_chosen_runs_and_no_runs_error(ladder, shared_state, tmp_path):
    runs = data.study_runs(shared_state, "dash_ladder")
    out = build_dashboard(shared_state, tmp_path / "runs.html", run_ids=runs.run_id.tolist()[:2],
                          view=PageView(layout_path=str(REPO / "dashboards/length_and_entropy.yaml")))
    meta = json.loads(out.with_suffix(".json").read_text())
    assert "Policy entropy" in meta["panels"] and len(meta["runs"]) == 2
    with pytest.raises(ConfigError, match="give a study file or --runs"):
        build_dashboard(shared_state, tmp_path / "x.html")


def _self_check(page: Path, profile: Path) -> dict:
    dom = subprocess.run([_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", NARROW_WINDOW, "--dump-dom",
                          page.as_uri()], capture_output=True, text=True, timeout=120)
    check = json.loads(re.search(r'<pre id="grpolab-self-check">([^<]*)</pre>', dom.stdout).group(1))
    assert check["errors"] == []
    _assert_titles_clear(check["panels"])
    return {p["panel"]: p for p in check["panels"]}


def test_x_axes_seed_lines_and_clipped_ci_bars_in_chromium(ladder, shared_state, tmp_path):
    layout = tmp_path / "axes.yaml"
    layout.write_text(yaml.safe_dump({"seeds": "both", "panels": [
        {"title": "pass by step", "metric": "eval/pass_at_1", "x": "steps"},
        {"title": "entropy by tokens", "metric": "entropy", "x": "tokens"},
        {"title": "reward by seconds", "metric": "reward/mean", "x": "seconds"}]}))
    out = build_dashboard(shared_state, tmp_path / "out" / "axes.html", str(ladder), view=PageView(layout_path=str(layout)),
                          plotlyjs="shared")
    assert out.stat().st_size < 1_000_000 and re.search(r'<script src="plotly-[\d.]+\.min\.js">', out.read_text())
    panels = _self_check(out, tmp_path / "profile")
    # expected x extents straight from MLflow
    client = MlflowClient(tracking_uri(shared_state))
    runs = data.study_runs(shared_state, "dash_ladder")
    tokens_max, seconds_max = 0.0, 0.0
    for rid in runs.run_id:
        last_entropy = max(m.step for m in client.get_metric_history(rid, "entropy"))
        tokens = [m.value for m in client.get_metric_history(rid, "tokens/cumulative") if m.step <= last_entropy]
        tokens_max = max(tokens_max, max(tokens))
        stamps = [m.timestamp for k in ("eval/pass_at_1", "entropy", "reward/mean") for m in client.get_metric_history(rid, k)]
        rewards = [m.timestamp for m in client.get_metric_history(rid, "reward/mean")]
        seconds_max = max(seconds_max, (max(rewards) - min(stamps)) / 1000)
    steps, tok, sec = panels["pass by step"], panels["entropy by tokens"], panels["reward by seconds"]
    assert steps["xTitle"] == "optimizer step" and steps["xMax"] == 4
    assert tok["xTitle"].startswith("completion tokens") and tok["xMax"] == pytest.approx(tokens_max)
    assert sec["xTitle"].startswith("wall-clock seconds") and sec["xMax"] == pytest.approx(seconds_max, abs=1e-3)
    assert tokens_max > 4 and 0 < seconds_max < 600
    for p in (steps, tok, sec):
        assert p["seedLines"] == 4 and p["rendered"], p                 # 2 rungs x 2 seeds
        note = _plain(next(b["text"] for b in p["boxes"] if b["kind"] == "gtitle"))
        assert "band:min-maxover2seeds" in note and "thinlines:oneperseed" in note
    ablation = panels["Ablation table"]
    toy = next(b for b in ablation["errorBars"] if b["meta"] == "toy")
    assert 0 <= toy["low"] and toy["high"] <= 1                           # pass@1 CIs stay inside [0, 1]
    assert ablation["yAxes"] == 2 and ablation["overlaying"] == 0         # published: own panel, own axis
    assert panels["Paired delta vs previous rung"]["errorBars"][0]["meta"] == "delta"


def test_ci_bars_are_cut_at_the_metric_range():
    from grpolab.report.figures import ablation_figure, clipped_error
    from grpolab.studies.objectives import metric_range
    assert metric_range("final:eval/pass_at_1") == (0.0, 1.0) and metric_range("tail:length/incorrect")[0] == 0.0
    plus, minus = clipped_error([0.9, 0.05, 0.5, 0.4], [0.3, 0.2, float("nan"), 0.1], 0.0, 1.0)
    assert plus == pytest.approx([0.1, 0.2, 0.0, 0.1]) and minus == pytest.approx([0.3, 0.05, 0.0, 0.1])
    import pandas as pd
    table = pd.DataFrame({"rung": ["a", "b"], "mean": [0.95, 0.02], "ci95": [0.4, 0.5], "published": [30.0, 38.0]})
    fig = ablation_figure(table, "final:eval/pass_at_1", "paper")
    toy, published = fig.data
    assert list(toy.error_y.array) == pytest.approx([0.05, 0.5]) and list(toy.error_y.arrayminus) == pytest.approx([0.4, 0.02])
    assert published.yaxis == "y2" and fig.layout.yaxis2.overlaying is None


def test_latex_table_compiles_with_pdflatex(ladder, shared_state, tmp_path):
    from grpolab.report.tables import study_table
    body = study_table(str(ladder), shared_state, None, "latex")
    assert r"dash\_ladder" in body and r"95\%" in body                  # the caption's _ and % are escaped
    doc = tmp_path / "table.tex"
    doc.write_text("\\documentclass{article}\n\\usepackage{booktabs}\n\\begin{document}\n" + body + "\n\\end{document}\n")
    exe = shutil.which("pdflatex")
    if exe is None:
        pytest.fail("pdflatex is not installed: `make test` installs texlive-latex-base and texlive-latex-recommended")
    done = subprocess.run([exe, "-interaction=nonstopmode", "-halt-on-error", doc.name], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:]
    assert (tmp_path / "table.pdf").stat().st_size > 1000


def test_ladder_table_and_dashboard_open_with_one_answer_line_per_rung(ladder, shared_state, tmp_path):
    """The answer first: a header counting the decided labels (per rung and familywise) beside the
    published increment, then one line per rung (label, effect on the previous rung and its interval,
    seeds used, familywise label, regime) above the caption and the full table, in the printed
    table and on the page."""
    import html as html_lib
    from grpolab.report.tables import study_table
    frame = data.ablation_frame(shared_state, str(ladder), None)
    lines = study_table(str(ladder), shared_state, None).splitlines()
    delta, half = frame.delta_vs_prev.iloc[1], frame.delta_ci95.iloc[1]
    assert lines[1] == f"- GRPO: reference, mean {frame['mean'].iloc[0]:.3f} (2 seeds)"
    interval = "[interval not measured]" if math.isnan(half) else f"[{delta - half:+.3f}, {delta + half:+.3f}]"
    assert lines[0].startswith("dash_ladder: 0 of 1 decided (0 fragile), 0 familywise (0 fragile); smallest effect "
                               "that matters 0.05 of final:eval/pass_at_1 beside the published increments +8 (DAPO")
    assert lines[2] == (f"- + Clip-Higher: {frame.verdict_vs_prev.iloc[1]}, {delta:+.3f} {interval} (2 paired seeds); "
                        "familywise: not in the family (underpowered); regime none declared")   # 2 < 5 seeds: no test
    assert lines[3] == "" and lines[4].startswith("dash_ladder: final:eval/pass_at_1")   # then the caption
    page = build_dashboard(shared_state, tmp_path / "answer.html", str(ladder)).read_text()
    body = page.split("<body>", 1)[1]
    assert body.index('<section id="answer">') < body.index("<h2>Ablation table</h2>") < body.index('class="grid"')
    answer = re.search(r'<section id="answer">(.*?)</section>', body).group(1)
    assert "<p>0 of 1 decided (0 fragile), 0 familywise (0 fragile); smallest effect that matters 0.05" in answer
    assert [html_lib.unescape(item) for item in re.findall(r"<li>(.*?)</li>", answer)] == [lines[1][2:], lines[2][2:]]
