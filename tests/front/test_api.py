"""The Python API (grpolab.run / load / study / results / curves) against the real stores: the
tidy results frame reproduces the printed table, a run from a dict with overrides records what
was asked, curves equal MLflow's histories, bad input raises before anything is written, and
docs/api.md's "Use from Python" code blocks run as written."""

from __future__ import annotations

import io
import math
import re
import shutil
import subprocess
import sys
from contextlib import redirect_stdout

import pytest
import yaml
from mlflow.tracking import MlflowClient
from scipy import stats

import grpolab
from conftest import REPO
from grpolab.tracking.recorder import tracking_uri

FAST = {"warm_start": {"enabled": False}, "eval": {"every": 0, "prompts": 8, "k": 2},
        "train": {"group_size": 4, "prompts_per_rollout": 4}}
EXPERIMENT = {"name": "api_dict", "method": "grpo", "task": {"name": "addition", "digits": 2},
              "model": {"preset": "tiny"}, **FAST}


@pytest.fixture(scope="module")
def api_state(tmp_path_factory):
    return tmp_path_factory.mktemp("api-state")


@pytest.fixture(scope="module")
def dict_run(api_state):
    """A DAPO-on-GRPO run from a dict: the method, one axis and the step budget are overrides."""
    return grpolab.run(EXPERIMENT, state=api_state, seed=1, method="dapo", train={"steps": 2},
                       **{"method.eps_high": 0.3})


@pytest.fixture(scope="module")
def ladder(api_state, tmp_path_factory):
    """A 2-rung x 2-seed ladder with two objectives. A coin-flip reward gives the untrained model
    non-zero advantages, so the rungs' learning rates act and the paired deltas are not zero."""
    path = tmp_path_factory.mktemp("api-study") / "api_ladder.yaml"
    path.write_text(yaml.safe_dump({
        "kind": "ladder", "name": "api_ladder", "seeds": [0, 1], "budget": {"train.steps": 2},
        "base": {"method": "grpo", "task": {"name": "random_reward", "digits": 2}, "model": {"preset": "tiny"}, **FAST},
        "objectives": ["final:eval/mean_length", "tail:entropy"],
        "rungs": [{"name": "grpo", "published": 30}, {"name": "+ lr 0.02", "changes": {"train.learning_rate": 0.02}}]}))
    outcome = grpolab.study(path, state=api_state, progress=False)
    assert outcome.complete and outcome.name == "api_ladder"
    return outcome


def printed_table(path, state, metric):
    """`grpolab table --format csv` as a user runs it, parsed."""
    from grpolab.cli import main
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["table", str(path), "--format", "csv", "--metric", metric, "--state", str(state)]) == 0
    import pandas as pd
    return pd.read_csv(io.StringIO(out.getvalue()))


@pytest.mark.slow
@pytest.mark.parametrize("metric", ["final:eval/mean_length", "tail:entropy"])
def test_results_aggregation_reproduces_the_printed_table(ladder, api_state, metric):
    frame = grpolab.results(ladder)
    assert list(frame.columns[:6]) == ["rung", "seed", "step", "metric", "value", "run_id"]
    assert len(frame) == 2 * 2 * 2 and set(frame.state) == {"COMPLETE"} and (frame.step == 2).all()
    mine = frame[frame.metric == metric]
    assert (mine.groupby("rung").value.std() > 0).all()  # seeds differ: the interval is not degenerate
    table = printed_table(ladder.path, api_state, metric)
    for rung, group in mine.groupby("rung"):
        values = list(group.sort_values("seed").value)
        mean = sum(values) / 2
        half = stats.t.ppf(0.975, 1) * stats.tstd(values) / math.sqrt(2)
        assert table.loc[rung, "mean"] == pytest.approx(mean, rel=1e-6)
        assert table.loc[rung, "ci95"] == pytest.approx(half, rel=1e-6)
        assert table.loc[rung, "n"] == 2 and table.loc[rung, "rung"] == group.rung_name.iloc[0]
    by_seed = mine.pivot(index="seed", columns="rung", values="value")
    paired = (by_seed[1] - by_seed[0]).mean()
    assert paired != 0 and table.loc[1, "delta_vs_prev"] == pytest.approx(paired, rel=1e-6)


@pytest.mark.slow
def test_results_rows_are_the_runs_values_in_mlflow(ladder, api_state):
    frame = grpolab.results(ladder.path, state=api_state)
    client = MlflowClient(tracking_uri(api_state))
    for row in frame[frame.metric == "final:eval/mean_length"].itertuples():
        run = client.get_run(row.run_id)
        assert run.data.tags["grpolab.rung"] == str(row.rung) and run.data.tags["grpolab.seed"] == str(row.seed)
        history = client.get_metric_history(row.run_id, "eval/mean_length")
        last = max(history, key=lambda m: m.step)
        assert (last.step, last.value) == (row.step, pytest.approx(row.value))
    # curves of the study's runs carry the same rung and seed as its results rows
    curves = grpolab.curves(list(frame.run_id.unique()), ["entropy"], state=api_state)
    keyed = frame.drop_duplicates("run_id").set_index("run_id")
    assert (curves.rung == curves.run_id.map(keyed.rung)).all() and (curves.seed == curves.run_id.map(keyed.seed)).all()


@pytest.mark.slow
def test_run_from_a_dict_with_overrides_records_what_was_asked(dict_run, api_state):
    client = MlflowClient(dict_run.tracking_uri)
    run = client.get_run(dict_run.run_id)
    assert dict_run.status == "FINISHED" and dict_run.steps == 2 and dict_run.method == "dapo" and dict_run.seed == 1
    assert run.data.params["method.eps_high"] == "0.3" and run.data.params["train.steps"] == "2"
    assert run.data.tags["grpolab.method_base"] == "dapo" and run.data.tags["grpolab.seed"] == "1"
    assert set(dict_run.metrics) == set(run.data.metrics)   # every final metric, under MLflow's names
    for key, value in run.data.metrics.items():
        assert dict_run.metrics[key] == pytest.approx(value, rel=1e-6), key
    assert dict_run.eval_final["eval/mean_length"] == pytest.approx(run.data.metrics["eval/mean_length"])
    assert dict_run.run_dir == (api_state / "runs" / dict_run.run_id).resolve()
    assert (dict_run.final_model / "config.json").is_file() and (dict_run.run_dir / "config.json").is_file()


@pytest.mark.slow
def test_curves_shape_and_values_equal_mlflow_histories(dict_run, api_state):
    client = MlflowClient(dict_run.tracking_uri)
    frame = dict_run.curves()                                    # every metric the run logged
    assert list(frame.columns) == ["rung", "seed", "step", "metric", "value", "run_id", "timestamp"]
    assert set(frame.metric) == set(client.get_run(dict_run.run_id).data.metrics)
    assert frame.rung.isna().all() and (frame.seed == 1).all()   # a lone run: no rung tag
    for metric in ("entropy", "eval/pass_at_1", "clip/high_fraction"):
        history = sorted((m.step, m.value) for m in client.get_metric_history(dict_run.run_id, metric))
        mine = frame[frame.metric == metric]
        assert list(zip(mine.step, mine.value)) == history and len(history) >= 2
    picked = grpolab.curves(dict_run.run_id, ["entropy"], state=api_state)
    assert set(picked.metric) == {"entropy"} and len(picked) == dict_run.steps


def test_bad_input_raises_before_anything_is_written(tmp_path):
    state = tmp_path / "untouched"
    cases = [({"trian": {"steps": 2}}, "trian: unknown key"), ({"train.stepz": 2}, "train.stepz: unknown key"),
             ({"method": "dapoo"}, "dapoo"), ({"train": {"steps": "x"}}, "train.steps: expected int"),
             ({"method.eps_hi": 0.3}, "method.eps_hi: unknown axis")]
    for overrides, message in cases:
        with pytest.raises(grpolab.ConfigError, match=re.escape(message)):
            grpolab.run(EXPERIMENT, state=state, **overrides)
    with pytest.raises(ValueError, match="expected a YAML path or a dict"):
        grpolab.run(["not", "an", "experiment"], state=state)
    with pytest.raises(grpolab.ConfigError, match="does not exist"):
        grpolab.run(tmp_path / "missing.yaml", state=state)
    with pytest.raises(grpolab.ConfigError, match="workers: must be an integer >= 1"):
        grpolab.study(REPO / "studies" / "dapo_table1.yaml", workers=0, state=state)
    with pytest.raises(grpolab.ConfigError, match="no state folder"):
        grpolab.results(REPO / "studies" / "dapo_table1.yaml", state=state)
    assert not state.exists()   # nothing created: no MLflow database, no run


def test_overrides_merge_into_sections_and_replace_a_named_task():
    cfg = grpolab.load(EXPERIMENT, train={"steps": 7}, method={"eps_high": 0.25}, seed=4)
    assert (cfg.train.steps, cfg.train.group_size, cfg.seed) == (7, 4, 4)   # merged: group_size kept
    assert cfg.method_name == "grpo" and cfg.spec.eps_high == 0.25
    cfg = grpolab.load(EXPERIMENT, task={"name": "countdown"})              # replaced: no stale digits key
    assert cfg.task["name"] == "countdown" and "digits" not in cfg.task
    cfg = grpolab.load(REPO / "experiments" / "smoke.yaml", **{"train.steps": 4, "method.base": "dr_grpo"})
    assert (cfg.name, cfg.train.steps, cfg.method_name) == ("smoke", 4, "dr_grpo")


def test_import_grpolab_stays_cheap_and_lists_its_public_names():
    code = ("import sys, grpolab; heavy = [m for m in ('torch', 'trl', 'mlflow', 'pandas', 'optuna') if m in sys.modules]; "
            "print(heavy, sorted(grpolab.__all__))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("[] ")
    for name in ("run", "load", "study", "results", "curves", "RunOutcome", "StudyOutcome", "ConfigError"):
        assert name in grpolab.__all__ and getattr(grpolab, name).__doc__
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        grpolab.nope  # noqa: B018


def api_page_python_blocks() -> list[str]:
    text = (REPO / "docs" / "api.md").read_text()
    section = text.split("## Use from Python", 1)[1]
    section = re.split(r"\n## ", section, maxsplit=1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


@pytest.mark.slow
def test_api_page_use_from_python_blocks_run(tmp_path, monkeypatch):
    blocks = api_page_python_blocks()
    assert len(blocks) >= 3
    shutil.copytree(REPO / "experiments", tmp_path / "experiments")
    monkeypatch.chdir(tmp_path)                                  # files the examples write land here
    monkeypatch.setenv("GRPOLAB_STATE", str(tmp_path / "state"))  # and the state folder too
    namespace: dict = {"__name__": "__readme__"}
    for block in blocks:                                          # one namespace, like a notebook
        exec(compile(block, "docs/api.md", "exec"), namespace)      # noqa: S102
    assert (tmp_path / "state" / "mlflow.db").is_file()


def test_tidy_frame_of_hand_made_trials_ladder_and_search():
    """study_results on an in-memory Optuna study: latest outcome per row (a completed trial
    wins over a later failed retry), missing rows kept, a pruned search trial at its last step."""
    import optuna
    from optuna.distributions import FloatDistribution
    from optuna.trial import TrialState, create_trial

    from grpolab.studies.definition import Objective, Rung, StudyConfig
    from grpolab.analysis.ablation import search_table
    from grpolab.analysis.tidy import study_results
    objectives = (Objective("final:eval/pass_at_1"), Objective("tail:entropy", "minimize"))
    ladder_cfg = StudyConfig(name="hand", kind="ladder", path="x", base={"train": {"steps": 6}}, seeds=(0, 1),
                             objectives=objectives, rungs=(Rung("a", {}), Rung("b", {"train.steps": 8})))
    study = optuna.create_study(directions=["maximize", "minimize"])
    for row, state, values, run in [("r0-s0", TrialState.COMPLETE, [0.25, 1.5], "ra"),
                                    ("r0-s0", TrialState.FAIL, None, "rb"),
                                    ("r1-s1", TrialState.FAIL, None, "rc")]:
        study.add_trial(create_trial(state=state, values=values, user_attrs={"row": row, "mlflow_run_id": run}))
    frame = study_results(study, ladder_cfg).set_index(["rung", "seed", "metric"])
    assert len(frame) == 2 * 2 * 2
    assert frame.loc[(0, 0, "final:eval/pass_at_1")][["value", "step", "state", "run_id"]].tolist() == [0.25, 6, "COMPLETE", "ra"]
    assert frame.loc[(0, 0, "tail:entropy"), "value"] == 1.5
    assert frame.loc[(1, 1, "tail:entropy"), "state"] == "FAIL" and math.isnan(frame.loc[(1, 1, "tail:entropy"), "value"])
    assert frame.loc[(1, 0, "tail:entropy"), "state"] == "MISSING" and frame.loc[(1, 0, "tail:entropy"), "rung_name"] == "b"

    search_cfg = StudyConfig(name="s", kind="search", path="x", base={"train": {"steps": 6}}, seeds=(0, 1),
                             objectives=objectives[:1], space={"train.learning_rate": {}})
    search = optuna.create_study(direction="maximize")
    lr = {"train.learning_rate": FloatDistribution(1e-4, 1e-2)}
    search.add_trial(create_trial(state=TrialState.COMPLETE, value=0.5, params={"train.learning_rate": 1e-3},
                                  distributions=lr, user_attrs={"outcome": "complete", "mlflow_run_id": "t0"}))
    search.add_trial(create_trial(state=TrialState.PRUNED, value=0.125, params={"train.learning_rate": 2e-3},
                                  distributions=lr, intermediate_values={1: 0.1, 2: 0.125},
                                  user_attrs={"outcome": "pruned", "mlflow_run_id": "t1"}))
    tidy = study_results(search, search_cfg)
    assert tidy[["seed", "step", "value", "state", "train.learning_rate"]].values.tolist() == [
        [0, 6, 0.5, "COMPLETE", 1e-3], [1, 2, 0.125, "PRUNED", 2e-3]]
    table = search_table(search, search_cfg)   # the printed search table is the same frame, one column per objective
    assert table.columns.tolist() == ["trial", "state", "train.learning_rate", "run_id", "final:eval/pass_at_1"]
    assert table["final:eval/pass_at_1"].tolist() == [0.5, 0.125] and table.run_id.tolist() == ["t0", "t1"]


def test_a_run_from_python_keeps_stderr_to_grpolab_and_real_warnings(tmp_path):
    """No per-file progress bars (loading weights, writing shards, artifact transfers) and no
    transformers FutureWarnings about TRL's arguments on the caller's stderr."""
    script = ("import grpolab\n"
              f"grpolab.run({EXPERIMENT!r}, state={str(tmp_path / 'state')!r}, train={{'steps': 2}})\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    noise = [line for line in done.stderr.splitlines()
             if any(s in line for s in ("Loading weights", "Writing model shards", "Downloading artifacts",
                                        "FutureWarning", "it/s]"))]
    assert noise == [], done.stderr[-3000:]
