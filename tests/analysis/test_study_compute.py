"""A study's measured compute (the hours column of `grpolab table`, the total beside `--plan`),
one prompt's completions across rungs and seeds (`grpolab samples`), and the ScaleRL-style fit's
early window and prefix extrapolation check."""

import re

import numpy as np
import pytest
import yaml

from conftest import tiny_two_rung_ladder
from grpolab.analysis.scaling import fit_seeds, saturating
from grpolab.errors import ConfigError

TRUE = {"R0": 0.2, "A": 0.8, "C_mid": 50.0, "B": 2.0}


@pytest.fixture(scope="module")
def ladder(tmp_path_factory, shared_state):
    """A 2-rung x 2-seed tiny ladder of 4 steps evaluated at each (5 points for a scaling fit), run
    once for this module's tests: (study file, state)."""
    from grpolab.studies.coordinator import run_study
    from grpolab.studies.study_run import StudyRun
    path = tmp_path_factory.mktemp("ladder") / "compute_ladder.yaml"
    data = tiny_two_rung_ladder(name="compute_ladder", seeds=[0, 1], budget={"train.steps": 4, "eval.every": 1})
    path.write_text(yaml.safe_dump(data))
    assert run_study(StudyRun.of(str(path), shared_state, workers=1, echo=lambda s: None)) == 0
    return path, shared_state


def test_table_shows_each_rungs_measured_cpu_hours(ladder):
    from mlflow.tracking import MlflowClient

    from grpolab.analysis.ablation import ladder_rows, load_results
    from grpolab.report.tables import study_table
    from grpolab.tracking.recorder import tracking_uri
    path, state = ladder
    cfg, study = load_results(str(path), state, None)
    client = MlflowClient(tracking_uri(state))
    rows = ladder_rows(study, cfg)
    tagged = {r.rung: 0.0 for r in rows.itertuples()}
    for r in rows.itertuples():
        tags = client.get_run(r.run_id).data.tags
        assert tags["grpolab.accelerator"] == "CPU"
        tagged[r.rung] += float(tags["grpolab.accelerator_hours"])
    csv = study_table(str(path), state, None, "csv")
    header, *lines = csv.strip().splitlines()
    assert header.split(",")[-1] == "CPU-hours"
    hours = [float(line.split(",")[-1]) for line in lines]
    assert hours == pytest.approx([tagged[0], tagged[1]]) and min(hours) > 0
    markdown = study_table(str(path), state, None, "markdown")
    assert re.search(r"\|\s+CPU-hours\s+\|", markdown)   # the column, and its note saying what it counts
    assert "- GPU-hours (CPU-hours where the runs trained on CPUs, GPU+CPU-hours where both): processes x wall " \
        "seconds of training" in markdown


def test_plan_prints_the_measured_total_beside_its_estimate(ladder, capsys):
    from grpolab.cli import main
    path, state = ladder
    assert main(["study", str(path), "--plan", "--state", str(state)]) == 0
    out = capsys.readouterr().out
    found = re.search(r"measured so far: ([0-9.e-]+) CPU-hours over 4 of the 4 runs started", out)
    assert found and float(found.group(1)) > 0, out


def test_the_plan_finds_the_journal_a_study_writes(tmp_path):
    from grpolab.analysis.compute_hours import DEFAULT_JOURNAL
    from grpolab.studies.storage import default_storage
    assert default_storage(tmp_path) == f"journal:{(tmp_path / DEFAULT_JOURNAL).resolve()}"


def test_samples_shows_one_prompt_from_every_rung_and_seed(ladder, capsys):
    from grpolab.analysis.side_by_side import side_by_side
    from grpolab.cli import main
    path, state = ladder
    view = side_by_side(str(path), state, step=1)
    # seed 0's two rungs saw the same prompts, seed 1's others: the chosen prompt is one both rungs of a seed logged
    assert view.runs == 4 and len(view.without) == 2
    assert set(view.frame.rung) == {"a", "b"} and view.frame.seed.nunique() == 1
    assert (view.frame.groupby("rung").size() == 4).all()   # a whole group (group_size 4) per rung
    assert view.frame.advantage.notna().all() and (view.frame.step == 1).all()
    assert side_by_side(str(path), state).frame.step.nunique() >= 1   # without --step: every step that prompt was logged at
    seed = view.frame.seed.iloc[0]
    assert main(["samples", str(path), "--prompt", view.prompt[-12:], "--step", "1", "--state", str(state)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"prompt: {view.prompt!r}") and "8 completions from 2 of 4 runs" in out
    assert re.search(rf"\|\s*a\s*\|\s*{seed}\s*\|", out) and re.search(rf"\|\s*b\s*\|\s*{seed}\s*\|", out)
    from grpolab.analysis.ablation import load_results
    _, study = load_results(str(path), state, None)
    parent = study.user_attrs["mlflow_parent_run_id"]   # the study's parent run: its rows, the same view
    assert main(["samples", parent, "--step", "1", "--prompt", view.prompt, "--state", str(state)]) == 0
    assert "8 completions from 2 of 4 runs" in capsys.readouterr().out
    one = view.frame.run.iloc[0]
    run_id = next(r for r in study_run_ids(path, state) if r.startswith(one))
    assert main(["samples", run_id, "--step", "1", "--state", str(state)]) == 0   # one run: its own rows
    assert "4 completions from 1 of 1 runs" in capsys.readouterr().out
    assert main(["samples", str(path), "--step", "7", "--state", str(state)]) == 2
    assert "no logged completions at step 7" in capsys.readouterr().err
    assert main(["samples", str(path), "--prompt", "no such prompt", "--state", str(state)]) == 2


def study_run_ids(path, state):
    from grpolab.analysis.side_by_side import study_runs
    return [run_id for *_, run_id in study_runs(str(path), state, None)]


def _curves(c, late=None, seeds=4):
    rng = np.random.default_rng(0)
    curves = {}
    for seed in range(seeds):
        values = saturating(np.where(c == 0, 1e-9, c), *TRUE.values()) + rng.normal(0, 0.002, len(c))
        values[0] = TRUE["R0"]
        if late is not None:
            values = late(c, values)
        curves[seed] = (c, values)
    return curves


def test_fit_on_a_prefix_checks_its_extrapolation_on_the_rest():
    c = np.array([0, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320], float)
    good = fit_seeds(_curves(c), fit_upto=0.5)
    assert good.fitted == 4 and good.extrapolation_error < 0.01
    # past the prefix the runs fall off (a collapse the early points cannot foresee): the check says so
    collapse = fit_seeds(_curves(c, lambda c, v: np.where(c > 160, v - 0.3, v)), fit_upto=0.5)
    assert collapse.extrapolation_error > 0.1
    assert np.isnan(fit_seeds(_curves(c)).extrapolation_error)   # fitted on every point: nothing to check


def test_leaving_out_the_early_window_fits_past_a_noisy_start():
    c = np.array([0, 2, 4, 6, 20, 30, 40, 60, 80, 120, 160, 240, 320], float)
    noisy = lambda c, v: np.where((c > 0) & (c < 10), 0.9, v)   # noqa: E731 - an early spike unrelated to the trend
    skipped = fit_seeds(_curves(c, noisy), skip_below=10)
    assert skipped.params["A"][0] == pytest.approx(TRUE["A"], abs=0.02)
    assert skipped.params["C_mid"][0] == pytest.approx(TRUE["C_mid"], rel=0.1)
    kept = fit_seeds(_curves(c, noisy))
    assert abs(kept.params["C_mid"][0] - TRUE["C_mid"]) > 5   # the spike drags the fit


def test_fit_window_refuses_bad_bounds():
    c = np.array([0, 10, 20, 40, 80], float)
    with pytest.raises(ConfigError, match=r"fit_upto: .*\(0, 1\]"):
        fit_seeds(_curves(c), fit_upto=0)
    with pytest.raises(ConfigError, match="skip_below: .*>= 0"):
        fit_seeds(_curves(c), skip_below=-1)


def test_dashboard_curves_can_use_accelerator_hours_as_x(ladder):
    from mlflow.tracking import MlflowClient

    from grpolab.report import dashboard_data as data
    from grpolab.tracking.recorder import tracking_uri
    _, state = ladder
    runs = data.study_runs(state, "compute_ladder")
    curves = data.metric_curves(state, runs, ["eval/pass_at_1"], x="accelerator_hours")
    client = MlflowClient(tracking_uri(state))
    for run_id in runs.run_id:
        hours = {m.step: m.value for m in client.get_metric_history(run_id, "time/accelerator_hours")}
        mine = curves[curves.run_id == run_id].set_index("step").x
        assert sorted(hours) == [1, 2, 3, 4] and mine[0] == 0.0   # one rollout per step
        assert [mine[s] for s in (1, 2, 3, 4)] == pytest.approx([hours[s] for s in (1, 2, 3, 4)])
        assert 0 < hours[1] < hours[2] < hours[3] < hours[4]


def test_run_hours_reads_the_tag_else_the_last_curve_point_and_labels_the_device():
    from types import SimpleNamespace

    from grpolab.analysis.compute_hours import hours_label, run_hours

    class Client:   # three runs: finished on a GPU, killed on a CPU before its end tags, from before the measurement
        runs = {"done": ({"grpolab.accelerator_hours": "1.5", "grpolab.accelerator": "GPU"},
                         {"time/accelerator_hours": 1.2}),
                "killed": ({"grpolab.accelerator": "CPU"}, {"time/accelerator_hours": 0.25}),
                "old": ({}, {"reward/mean": 0.1})}

        def get_run(self, run_id):
            tags, metrics = self.runs[run_id]
            return SimpleNamespace(data=SimpleNamespace(tags=tags, metrics=metrics))
    got = [run_hours(Client(), r) for r in ("done", "killed", "old", "")]
    assert got[:2] == [(1.5, "GPU"), (0.25, "CPU")] and all(np.isnan(h) and k == "" for h, k in got[2:])
    assert hours_label(["CPU", "", "CPU"]) == "CPU-hours" and hours_label(["GPU", "CPU"]) == "GPU+CPU-hours"
    assert hours_label([""]) == "GPU-hours"


def test_table_fits_scaling_on_accelerator_hours_with_a_prefix_check(ladder, capsys):
    from grpolab.cli import main
    path, state = ladder
    assert main(["table", str(path), "--scaling-x", "accelerator_hours", "--scaling-fit-upto", "0.8",
                 "--state", str(state)]) == 0
    out = capsys.readouterr().out
    assert "C = measured accelerator-hours" in out and "fitted on C <= 0.8 x each run's largest C" in out
    assert "extrapolation |error|" in out
    assert main(["table", str(path), "--scaling-fit-upto", "1.5", "--state", str(state)]) == 2
    assert "fit_upto: the fraction of each run's compute the fit uses, in (0, 1]; got 1.5" in capsys.readouterr().err


def test_dashboard_shows_the_same_prompt_side_by_side(ladder, tmp_path):
    import html as html_lib

    from grpolab.analysis.side_by_side import side_by_side
    from grpolab.report.dashboard import build_dashboard
    path, state = ladder
    view = side_by_side(str(path), state, step=4)   # the page shows the last logged rollout
    page = build_dashboard(state, tmp_path / "page.html", str(path)).read_text()
    section = re.search(r'<section id="completions">(.*?)</section>', page, re.S).group(1)
    assert f"<code>{html_lib.escape(view.prompt)}</code>: {len(view.frame)} completions from 2 of 4 runs" in section
    assert section.count("<tr") == len(view.frame) + 1 and "<th>advantage</th>" in section   # the header, then one per completion


def test_samples_on_a_state_without_runs_answers_and_writes_nothing(tmp_path, capsys, monkeypatch):
    from grpolab.cli import main
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    study = tmp_path / "s.yaml"
    study.write_text(yaml.safe_dump(tiny_two_rung_ladder(name="never_ran")))
    state = tmp_path / "state"
    state.mkdir()
    assert main(["samples", str(study), "--state", str(state)]) == 2
    assert "the study has not run in" in capsys.readouterr().err
    assert main(["samples", "0123abcd", "--state", str(state)]) == 2
    assert "neither a study file nor a run" in capsys.readouterr().err
    assert list(state.iterdir()) == []
