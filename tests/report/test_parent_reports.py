"""What the stock MLflow UI shows without grpolab's own pages: a finished study's parent run holds
the table and the dashboard (rewritten by `grpolab table` / `grpolab dashboard`), progress shows
the held-out pass@1, and the opt-in extras (system metrics, a curves figure) land on the run."""

import io
import sys
from pathlib import Path

import pytest
import yaml

from grpolab.cli import main
from grpolab.errors import ConfigError
from grpolab.experiment.config import build_config
from grpolab.experiment.progress import TrainProgress
from grpolab.experiment.runner import run_experiment
from grpolab.report.publish import record_study_tables
from grpolab.studies.coordinator import run_study
from grpolab.studies.study_run import StudyRun
from grpolab.tracking.recorder import client_for

BASE = {"task": {"name": "addition", "digits": 2}, "model": {"preset": "tiny"}, "warm_start": {"enabled": False},
        "method": {"base": "grpo"}, "train": {"group_size": 4, "prompts_per_rollout": 2},
        "eval": {"prompts": 4, "k": 1}, "tracking": {"experiment": "parent-reports"}}
LADDER = {"kind": "ladder", "name": "parent_reports", "seeds": [0], "metric": "final:eval/pass_at_1", "base": BASE,
          "budget": {"train.steps": 1, "eval.every": 0},
          "rungs": [{"name": "GRPO"}, {"name": "clip higher", "changes": {"method.eps_high": 0.28}}]}


class _State:
    def __init__(self, max_steps=0, global_step=0):
        self.max_steps, self.global_step = max_steps, global_step


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_train_progress_shows_the_latest_held_out_pass_at_1():
    stream = _Terminal()
    bar = TrainProgress(stream)
    bar.on_eval(0, {"eval/pass_at_1": 0.25})            # before training: shown on the bar, no line
    bar.on_train_begin(None, _State(max_steps=4), None)
    bar.on_log(None, _State(4, 1), None, logs={"reward/mean": 0.5, "entropy": 1.25})
    bar.on_step_end(None, _State(4, 1), None)
    assert bar.latest == {"pass@1": "0.25", "reward": "0.5", "entropy": "1.25"}
    bar.on_eval(2, {"eval/pass_at_1": 0.375})           # a periodic eval updates the bar
    assert bar.latest["pass@1"] == "0.375" and "pass@1=0.375" in stream.getvalue()
    bar.on_train_end(None, _State(4, 4), None)
    bar.on_eval(4, {"eval/pass_at_1": 0.5})             # the final eval, after the bar closed: a line
    assert stream.getvalue().endswith("held-out pass@1 at step 4: 0.5\n")


def test_train_progress_on_a_pipe_prints_plain_lines():
    stream = io.StringIO()   # not a terminal: no carriage-return redraws
    bar = TrainProgress(stream)
    bar.on_train_begin(None, _State(max_steps=20), None)
    for step in range(1, 21):
        bar.on_log(None, _State(20, step), None, logs={"reward/mean": step / 20, "entropy": 1.5})
        bar.on_step_end(None, _State(20, step), None)
    lines = stream.getvalue().splitlines()
    assert "\r" not in stream.getvalue()
    assert [line.split(" · ")[0] for line in lines] == [f"training: step {s}/20" for s in range(0, 21, 2)]
    assert lines[-1].startswith("training: step 20/20 · reward 1 · entropy 1.5 · ")


def _artifact_text(client, run_id, path, dest):
    return Path(client.download_artifacts(run_id, path, str(dest))).read_text()


def test_a_finished_study_puts_table_and_dashboard_on_its_parent_and_commands_rewrite_them(tmp_path, capsys):
    state, study = tmp_path / "state", tmp_path / "parent_reports.yaml"
    study.write_text(yaml.safe_dump(LADDER, sort_keys=False))
    lines = []
    assert run_study(StudyRun.of(str(study), state, workers=1, echo=lines.append, publish=record_study_tables)) == 0
    client = client_for(state)
    exp = client.get_experiment_by_name("parent-reports")
    parent = client.search_runs([exp.experiment_id], "attributes.run_name = 'parent_reports'")[0]
    pid = parent.info.run_id
    # Progress lines name the last finished row's final held-out pass@1 (rows run in order here).
    last_row = client.search_runs([exp.experiment_id], "attributes.run_name = 'r1 clip higher · seed 0'")[0]
    assert lines[-1].startswith("rows 2/2 done") and lines[-1].endswith(
        f"last finished r1-s0: pass@1 {last_row.data.metrics['eval/pass_at_1']:.3g}")

    names = {a.path for a in client.list_artifacts(pid)}
    assert {"study.yaml", "table.md", "table.csv", "dashboard.html"} <= names
    page = _artifact_text(client, pid, "dashboard.html", tmp_path / "a")
    built = state / "dashboards" / "parent_reports.html"
    assert page == built.read_text() and "clip higher" in page and len(page) > 3_000_000   # one offline file
    end_time = parent.info.end_time

    # `grpolab dashboard` on the study rewrites the parent's page (here the small shared-plotly.js one) ...
    assert main(["--state", str(state), "dashboard", str(study), "--plotlyjs", "shared"]) == 0
    page = _artifact_text(client, pid, "dashboard.html", tmp_path / "b")
    assert page == built.read_text() and len(page) < 1_000_000
    assert any(a.path.startswith("plotly-") for a in client.list_artifacts(pid))
    # ... another view goes beside it, named after what it shows, with its script in its folder
    assert main(["--state", str(state), "dashboard", str(study), "--x", "seconds", "--plotlyjs", "shared"]) == 0
    beside = {a.path for a in client.list_artifacts(pid, "dashboards")}
    assert "dashboards/parent_reports-seconds.html" in beside and any("plotly-" in p for p in beside)
    # `grpolab table` rewrites table.md / table.csv (one removed from the store comes back)
    stored = Path(client.get_run(pid).info.artifact_uri.removeprefix("file://")) / "table.md"
    stored.unlink()
    capsys.readouterr()
    assert main(["--state", str(state), "table", str(study)]) == 0
    printed = capsys.readouterr().out
    assert stored.read_text().strip() == printed.strip() and "clip higher" in printed
    # None of this re-opens or re-closes the finished parent run.
    again = client.get_run(pid)
    assert again.info.status == "FINISHED" and again.info.end_time == end_time


def test_system_metrics_and_curves_figure_on_the_run(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL", "0.2")
    cfg = build_config({**BASE, "name": "extras", "train": {**BASE["train"], "steps": 2},
                        "eval": {**BASE["eval"], "every": 1},
                        "tracking": {"experiment": "extras", "system_metrics": True, "figures": True}})
    result = run_experiment(cfg, tmp_path / "state")
    client = client_for(tmp_path / "state")
    metrics = client.get_run(result.run_id).data.metrics
    cpu = client.get_metric_history(result.run_id, "system/cpu_utilization_percentage")
    assert cpu and all(0 <= m.value <= 100 for m in cpu) and "system/system_memory_usage_megabytes" in metrics
    figure = Path(client.download_artifacts(result.run_id, "curves.png", str(tmp_path)))
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and figure.stat().st_size > 10_000
    # the monitor thread ended with the run
    import threading
    assert not any(t.name == "SystemMetricsMonitor" and t.is_alive() for t in threading.enumerate())


def test_system_metrics_without_psutil_is_refused_before_anything_runs(monkeypatch):
    monkeypatch.setitem(sys.modules, "psutil", None)   # what importlib sees when psutil is not installed
    with pytest.raises(ConfigError, match=r"tracking.system_metrics: true needs the psutil package"):
        build_config({**BASE, "name": "no_psutil", "tracking": {"system_metrics": True}})
    assert build_config({**BASE, "name": "off", "tracking": {"system_metrics": False}}).tracking.system_metrics is False
