"""Optuna-driven studies: ladders end to end, exactly-once rows under concurrent workers (journal
file and a real PostgreSQL server on loopback), resume, a pruned search, table statistics."""

import re
import math
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState

from conftest import REPO, run_study_data, share_models
from test_run import interactive_signals
from grpolab.analysis.ablation import ladder_rows, ladder_table, load_results, mean_ci
from grpolab.report.tables import study_table
from grpolab.studies.storage import create_or_load, default_storage
from grpolab.studies.coordinator import run_study
from grpolab.studies.study_run import StudyRun
from grpolab.studies.definition import load_study
from grpolab.tracking.recorder import tracking_uri

BASE = {"method": {"base": "grpo", "kl_coef": 0.0}, "task": {"name": "addition", "digits": 2},
        "model": {"preset": "tiny"}, "train": {"group_size": 8, "prompts_per_rollout": 4, "learning_rate": 0.0005},
        "eval": {"prompts": 8, "k": 2}}


def ladder_file(tmp_path, name, steps=2, seeds=(0, 1), rungs=2):
    data = {"kind": "ladder", "name": name, "base": BASE, "budget": {"train.steps": steps, "eval.every": 0},
            "seeds": list(seeds), "metric": "final:eval/pass_at_1",
            "rungs": [{"name": "base", "published": 30},
                      {"name": "+ clip higher", "changes": {"method.eps_high": 0.28}, "published": 38},
                      {"name": "+ token mean", "changes": {"method.aggregation": "token_mean"}}][:rungs]}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def row_counts(study):
    counts = {}
    for t in study.get_trials(deepcopy=False):
        if "row" in t.user_attrs and t.state == TrialState.COMPLETE:
            counts[t.user_attrs["row"]] = counts.get(t.user_attrs["row"], 0) + 1
    return counts


def test_ladder_runs_end_to_end_and_links_mlflow_both_ways(tmp_path, shared_state):
    path = ladder_file(tmp_path, "ladder_e2e")
    lines = []
    assert run_study(StudyRun.of(str(path), shared_state, workers=1, echo=lines.append)) == 0
    assert "rows 4/4 done, 0 running, 0 failed" in lines[-1]
    cfg, study = load_results(str(path), shared_state, None)
    rows = ladder_rows(study, cfg)
    assert len(rows) == 4 and (rows.state == "COMPLETE").all()
    assert row_counts(study) == {"r0-s0": 1, "r0-s1": 1, "r1-s0": 1, "r1-s1": 1}
    client = MlflowClient(tracking_uri(shared_state))
    parent = study.user_attrs["mlflow_parent_run_id"]
    assert client.get_run(parent).info.status == "FINISHED"
    assert study.metric_names == ["final:eval/pass_at_1"]                         # optuna-dashboard names the objective
    own = client.get_experiment_by_name("ladder_e2e")                       # the study's own MLflow experiment
    assert {r.info.run_id for r in client.search_runs([own.experiment_id])} == {parent, *rows.run_id}
    for _, row in rows.iterrows():
        run = client.get_run(row.run_id)                                   # trial -> run
        assert run.data.tags["mlflow.parentRunId"] == parent
        assert int(run.data.tags["optuna.trial_number"]) == row.trial     # run -> trial
        assert run.data.metrics["eval/pass_at_1"] == pytest.approx(row.value)
        assert run.data.tags["grpolab.rung"] == str(row.rung)
    eps = {r: client.get_run(rows[rows.rung == r].run_id.iloc[0]).data.params["method.eps_high"] for r in (0, 1)}
    assert eps == {0: "0.2", 1: "0.28"}                                     # cumulative change applied
    table = study_table(str(path), shared_state, None, "markdown")
    assert "+ clip higher" in table and re.search(r"\|\s+38(\.0+)?\s+\|", table)
    # on-policy (no rollout reuse) eps_high cannot change anything: the paired delta is exactly 0
    assert re.search(r"\+ clip higher \|\s+2 \|\s+0 \|[^|]+\|[^|]+\|\s+2 \|\s+0(\.0+)? \|", table)   # n, censored, mean, ci95, pairs, delta
    assert "rung,n,censored,mean,ci95" in study_table(str(path), shared_state, None, "csv")
    assert "\\begin{tabular}" in study_table(str(path), shared_state, None, "latex")


def test_table_statistics_match_hand_computation():
    mean, half = mean_ci([0.2, 0.4, 0.3])
    # mean 0.3, sd 0.1, t(0.975, 2) = 4.302653 -> half-width 4.302653 * 0.1 / sqrt(3)
    assert mean == pytest.approx(0.3) and half == pytest.approx(4.302653 * 0.1 / math.sqrt(3), rel=1e-5)
    import pandas as pd
    from grpolab.studies.definition import Rung, StudyConfig
    from grpolab.studies.definition import Objective
    cfg = StudyConfig(name="x", kind="ladder", path="x", base={}, seeds=(0, 1, 2), objectives=(Objective("final:eval/pass_at_1"),),
                      rungs=(Rung("a", {}, 30.0), Rung("b", {"k": 1}, 36.0)))
    rows = pd.DataFrame([{"rung": r, "seed": s, "state": "COMPLETE", "value": v, "run_id": ""}
                         for r, s, v in [(0, 0, .1), (0, 1, .2), (0, 2, .3), (1, 0, .2), (1, 1, .4), (1, 2, .3)]])
    t = ladder_table(rows, cfg)
    assert t.loc[0, "mean"] == pytest.approx(0.2) and t.loc[1, "mean"] == pytest.approx(0.3)
    # paired deltas (0.1, 0.2, 0.0): mean 0.1, sd 0.1
    assert t.loc[1, "delta_vs_prev"] == pytest.approx(0.1)
    assert t.loc[1, "delta_ci95"] == pytest.approx(4.302653 * 0.1 / math.sqrt(3), rel=1e-5)
    assert t.loc[1, "published"] == 36.0 and t.loc[0, "n"] == 3
    rows.loc[5, "state"] = "FAIL"
    t = ladder_table(rows, cfg)
    assert t.loc[1, "n"] == 2 and "s2:FAIL" in t.loc[1, "missing_or_failed"]


def _workers_exactly_once(tmp_path, state, storage):
    path = ladder_file(tmp_path, f"two_workers_{abs(hash(storage)) % 10000}", steps=1, seeds=(0, 1, 2), rungs=2)
    start = time.time()
    assert run_study(StudyRun.of(str(path), state, storage_url=storage, workers=2, echo=lambda s: None)) == 0
    cfg, study = load_results(str(path), state, storage)
    counts = row_counts(study)
    assert sorted(counts) == sorted(f"r{r}-s{s}" for r, s in cfg.rows())   # no missing row
    assert set(counts.values()) == {1}                                    # no duplicated row
    return time.time() - start


def test_two_workers_exactly_once_on_journal_storage(tmp_path, shared_state):
    _workers_exactly_once(tmp_path, shared_state, default_storage(tmp_path))


def test_two_workers_exactly_once_on_postgresql(tmp_path, shared_state, postgres_url):
    _workers_exactly_once(tmp_path, shared_state, postgres_url)


def test_interrupted_study_resumes_without_redoing_rows(tmp_path, tmp_path_factory):
    # its own state (see test_run.test_signal_ends_killed), with the session's model cache
    shared_state = share_models(tmp_path / "state", tmp_path_factory)
    path = ladder_file(tmp_path, "resume_me", steps=400, seeds=(0,), rungs=2)
    env = {**os.environ, "GRPOLAB_STATE": str(shared_state)}
    proc = subprocess.Popen([sys.executable, "-m", "grpolab.cli", "study", str(path)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=interactive_signals)
    storage = default_storage(shared_state)
    cfg = load_study(path)
    deadline = time.time() + 240
    while time.time() < deadline:  # wait until the first row is training
        time.sleep(2)
        if (shared_state / "optuna.journal").exists():
            study = create_or_load(cfg, storage)
            if any(t.state == TrialState.RUNNING and t.user_attrs.get("mlflow_run_id")
                   for t in study.get_trials(deepcopy=False)):
                time.sleep(3)
                break
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    study = create_or_load(cfg, storage)
    interrupted = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("outcome") == "interrupted"]
    trials = [(t.number, t.state.name, dict(t.user_attrs)) for t in study.get_trials(deepcopy=False)]
    assert len(interrupted) == 1 and not row_counts(study), (proc.returncode, trials, out[-2000:], err[-4000:])
    # resume with a smaller budget file of the same study: the interrupted row is re-queued and done
    data = yaml.safe_load(path.read_text())
    data["budget"]["train.steps"] = 1
    path.write_text(yaml.safe_dump(data))
    from grpolab.errors import ConfigError
    with pytest.raises(ConfigError, match="different definition"):   # a changed study is refused by default
        run_study(StudyRun.of(str(path), shared_state, workers=1, echo=lambda s: None))
    assert run_study(StudyRun.of(str(path), shared_state, workers=1, echo=lambda s: None, accept_changed=True)) == 0
    study = create_or_load(cfg, storage)
    assert row_counts(study) == {"r0-s0": 1, "r1-s0": 1}


def test_search_with_median_pruning_on_a_real_objective(tmp_path, shared_state):
    data = {"kind": "search", "name": "search_prune", "base": {**BASE, "method": {"base": "grpo", "kl_coef": 0.0}},
            "budget": {"train.steps": 4, "eval.every": 1}, "seeds": [0],
            "objectives": [{"metric": "final:eval/pass_at_1", "direction": "maximize"}],
            "space": {"train.learning_rate": {"type": "float", "low": 1e-4, "high": 3e-3, "log": True},
                      "method.surrogate": {"type": "categorical", "choices": ["clip", "dual_clip"]},
                      "method.dual_clip_c": {"type": "float", "low": 2.0, "high": 5.0,
                                             "when": {"method.surrogate": "dual_clip"}}},
            "n_trials": 6, "sampler": {"name": "tpe", "seed": 0},
            "pruner": {"name": "median", "n_startup_trials": 1, "n_warmup_steps": 0}}
    cfg, study = run_study_data(tmp_path, data, shared_state, "search.yaml")
    trials = study.get_trials(deepcopy=False)
    states = [t.state for t in trials]
    assert len(trials) == 6 and TrialState.COMPLETE in states
    for t in trials:   # the conditional parameter exists exactly when its parent says so
        assert ("method.dual_clip_c" in t.params) == (t.params["method.surrogate"] == "dual_clip")
        if t.state == TrialState.COMPLETE:
            assert sorted(t.intermediate_values) == [1, 2, 3, 4]
    pruned = [t for t in trials if t.state == TrialState.PRUNED]
    client = MlflowClient(tracking_uri(shared_state))
    for t in pruned:
        assert client.get_run(t.user_attrs["mlflow_run_id"]).info.status == "KILLED"
    table = study_table(cfg.path, shared_state, None, "markdown")
    assert "final:eval/pass_at_1" in table and "train.learning_rate" in table
    assert pruned, "median pruning never pruned a trial in 6"


def test_threshold_metrics_steps_and_tokens_to_reach():
    from grpolab.errors import ConfigError
    from grpolab.experiment.runner import RunResult
    from grpolab.studies.trials import metric_value
    from grpolab.studies.objectives import check_metric
    evals = {0: {"eval/pass_at_1": 0.2}, 10: {"eval/pass_at_1": 0.28}, 20: {"eval/pass_at_1": 0.31}, 30: {"eval/pass_at_1": 0.29}}
    curves = {"tokens/cumulative": [(s, 100.0 * s) for s in range(1, 31)], "entropy": [(s, float(s)) for s in range(1, 9)]}
    r = RunResult("x", "FINISHED", evals, curves, 30, 1.0, {})
    assert metric_value("steps_to:eval/pass_at_1>=0.3", r) == 20.0
    assert metric_value("tokens_to:eval/pass_at_1>=0.3", r) == 2000.0
    assert metric_value("steps_to:eval/pass_at_1>=0.5", r) == math.inf
    assert metric_value("final:eval/pass_at_1", r) == 0.29
    assert metric_value("auc:eval/pass_at_1", r) == pytest.approx((0.24 + 0.295 + 0.30) * 10 / 30)
    assert metric_value("tail:entropy", r) == pytest.approx(7.5)   # last quarter of 8 points
    for bad in ("steps_to:eval/pass_at_1", "steps_to:entropy>=1", "best:eval/pass_at_1", "final:entropy"):
        with pytest.raises(ConfigError):
            check_metric(bad)


def test_every_shipped_study_validates():
    names = set()
    from grpolab.planning import planning
    for path in sorted((REPO / "studies").glob("*.yaml")):
        with planning():            # a GPU-only need (bf16, vLLM, a download) is recorded, not refused, on CPU
            cfg = load_study(path)  # every rung of a ladder is built and validated here
        names.add(cfg.name)
    assert {"dapo_table1_columns", "dr_grpo_length_v2", "clip_higher_entropy_v2", "search_clip_lr",
            "dynamic_sampling_efficiency_v2", "gspo_clipping_v2", "zero_variance_v2"} <= names
    dapo = load_study(REPO / "studies/dapo_table1.yaml")
    assert [r.published for r in dapo.rungs] == [30, 36, 38, 41, 42, 50]
    last = dapo.rung_experiment(5, 0)["method"]     # cumulative: the last rung holds every change
    assert last["overlong_filter"] and last["eps_high"] == 0.28 and last["soft_overlong"]
    assert last["aggregation"] == "token_mean" and last["sampling"] == "dynamic"


def test_ctrl_c_that_a_library_turns_into_another_error_still_interrupts_the_row(tmp_path, tmp_path_factory,
                                                                                monkeypatch):
    """Optuna's journal lock, interrupted while it waits, re-raises a KeyboardInterrupt as
    RuntimeError("did not possess lock"): the row must be recorded interrupted (and re-queued),
    not failed with an error while the study goes on (the CI flake of the Ctrl-C test)."""
    import grpolab.experiment.runner
    state = share_models(tmp_path / "state", tmp_path_factory)
    path = ladder_file(tmp_path, "converted_signal", steps=1, seeds=(0,), rungs=2)
    signal.signal(signal.SIGINT, signal.default_int_handler)   # whatever this process was started with
    real_run = grpolab.experiment.runner.run_experiment

    def library_that_converts_the_signal(*args, **kwargs):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        except BaseException:
            raise RuntimeError("Error: did not possess lock")
        raise AssertionError("SIGINT was not delivered")
    monkeypatch.setattr(grpolab.experiment.runner, "run_experiment", library_that_converts_the_signal)
    with pytest.raises(KeyboardInterrupt) as raised:
        run_study(StudyRun.of(str(path), state, workers=1, echo=lambda s: None))
    assert isinstance(raised.value.__cause__, RuntimeError)
    cfg, study = load_results(str(path), state, None)
    outcomes = [t.user_attrs.get("outcome") for t in study.get_trials(deepcopy=False) if t.state != TrialState.WAITING]
    assert outcomes == ["interrupted"] and not row_counts(study)
    monkeypatch.setattr(grpolab.experiment.runner, "run_experiment", real_run)
    assert run_study(StudyRun.of(str(path), state, workers=1, echo=lambda s: None)) == 0   # the row is re-queued
    assert row_counts(create_or_load(cfg, default_storage(state))) == {"r0-s0": 1, "r1-s0": 1}


def test_a_ctrl_c_swallowed_in_a_finaliser_is_raised_at_the_next_safe_point():
    """A signal handler's raise inside __del__ (or a GC/weakref callback) is ignored by Python;
    the signal is noted, so the next safe point (a training step's end, between rows) raises it."""
    from grpolab.signals import signals_raise
    from grpolab.signals import raise_if_signalled
    signal.signal(signal.SIGINT, signal.default_int_handler)   # whatever this process was started with
    reached = []

    class Finalised:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGINT)
            sum(range(100_000))   # the handler runs here, inside __del__: its KeyboardInterrupt is ignored

    with pytest.raises(KeyboardInterrupt):
        with signals_raise():
            Finalised()
            time.sleep(0.1)
            reached.append("after the swallowed raise")
            raise_if_signalled()
    assert reached == ["after the swallowed raise"]


def test_a_handled_ctrl_c_is_not_raised_again_by_the_next_run():
    """A caller that catches the KeyboardInterrupt (a notebook: Ctrl-C a run, start another) must
    not have it raised again at the next run's first safe point."""
    from grpolab.signals import signals_raise
    from grpolab.signals import raise_if_signalled, signal_pending
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with pytest.raises(KeyboardInterrupt):
        with signals_raise():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
    assert not signal_pending()
    with signals_raise():
        raise_if_signalled()   # the next run's safe point: nothing pending
