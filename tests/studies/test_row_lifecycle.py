"""Row lifecycle under faults, beyond tests/studies/test_faults.py: a hung (alive, silent) row is handed
back by its row timeout; an interrupted --retry-failed retry is re-queued; the PostgreSQL
advisory lock excludes coordinators whatever their MLflow stores; the state folder's
artifact-root mark is never half-read. Real journal files, a real MLflow SQLite store, a real
PostgreSQL on loopback and real processes."""

import os
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState

from grpolab.studies.resume import RESUMES_ATTR
from grpolab.tracking.stores import setup_lock
from grpolab.studies.storage import create_or_load, default_storage
from grpolab.studies.coordinator import enqueue_missing_rows, run_study
from grpolab.studies.study_run import StudyRun
from grpolab.studies.definition import load_study
from grpolab.studies.rows import row_states
from grpolab.tracking.recorder import LOCATION_MARK, artifact_root, client_for, tracking_uri
from fault_helpers import held_study
from test_faults import grpolab, study_file, trials_of


def _finish(study, row: str, outcome: str) -> None:
    trial = study.ask()
    assert trial.user_attrs["row"] == row
    trial.set_user_attr("outcome", outcome)
    study.tell(trial, state=TrialState.FAIL)


def test_an_interrupted_retry_of_a_failed_row_is_requeued_without_retry_failed(tmp_path):
    """A row is decided by its latest trial: error -> left failed; --retry-failed retry
    interrupted -> re-queued by a plain rerun (it used to stay 'interrupted' forever);
    interrupted then error -> left failed again."""
    cfg = load_study(study_file(tmp_path, "retry_rows", steps=1, seeds=(0,)))
    study = create_or_load(cfg, default_storage(tmp_path / "state"))
    assert enqueue_missing_rows(study, cfg, retry_failed=False) == []
    _finish(study, "r0-s0", "error")
    assert enqueue_missing_rows(study, cfg, retry_failed=False) == ["r0-s0"]
    assert row_states(study, cfg) == {"r0-s0": "FAIL"}
    assert enqueue_missing_rows(study, cfg, retry_failed=True) == []        # the user retries it ...
    _finish(study, "r0-s0", "interrupted")                                  # ... and the retry is interrupted
    assert row_states(study, cfg) == {"r0-s0": "INTERRUPTED"}
    assert enqueue_missing_rows(study, cfg, retry_failed=False) == []       # a plain rerun resumes it
    waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    assert [t.user_attrs["row"] for t in waiting] == ["r0-s0"]
    assert enqueue_missing_rows(study, cfg, retry_failed=False) == []       # queued once, not twice
    assert len(study.get_trials(deepcopy=False, states=(TrialState.WAITING,))) == 1
    _finish(study, "r0-s0", "error")                                        # the resumed row fails with an error
    assert enqueue_missing_rows(study, cfg, retry_failed=False) == ["r0-s0"]
    assert row_states(study, cfg) == {"r0-s0": "FAIL"}
    assert [t.state for t in study.get_trials(deepcopy=False)] == [TrialState.FAIL] * 3   # one trial per queueing


def _hold(state: Path, tracking: str, storage: str, held: threading.Event, events: list, seconds: float):
    with setup_lock(state, tracking, storage):
        events.append(("a in", time.monotonic()))
        held.set()
        time.sleep(seconds)
        events.append(("a out", time.monotonic()))


def test_advisory_lock_excludes_coordinators_with_different_tracking_stores(tmp_path, postgres_server):
    """Two coordinators on separate state folders (separate machines), with different MLflow
    stores but one PostgreSQL study storage, never hold the setup lock together; one database in
    both roles does not wait on itself."""
    storage = postgres_server.database("lock_study")
    other_tracking = postgres_server.database("lock_mlflow")
    events, held = [], threading.Event()
    first = threading.Thread(target=_hold, args=(tmp_path / "a", f"sqlite:///{tmp_path}/a.db", storage, held, events, 1.5))
    first.start()
    assert held.wait(60)
    with setup_lock(tmp_path / "b", other_tracking, storage):
        events.append(("b in", time.monotonic()))
    first.join()
    assert [name for name, _ in events] == ["a in", "a out", "b in"], events

    done = threading.Event()

    def same_database_twice():
        with setup_lock(tmp_path / "c", storage, storage):
            done.set()
    threading.Thread(target=same_database_twice, daemon=True).start()
    assert done.wait(30), "a database in both roles waited on itself"


def test_a_partial_or_empty_artifact_root_mark_never_rewrites_paths(tmp_path):
    """The mark is complete only with its final newline: an empty or half-written mark (a reader
    racing its writer) is treated as absent, so stored artifact paths are untouched; a moved
    folder re-points paths under the old root and the root itself, not a sibling with the root
    as a string prefix."""
    state = tmp_path / "state"
    client = client_for(state)
    experiment = client.create_experiment("mark", artifact_location=artifact_root(state))
    run = client.create_run(experiment).info.run_id
    mark, uri = state / LOCATION_MARK, tracking_uri(state)
    assert mark.read_text() == artifact_root(state) + "\n"

    def stored():
        with sqlite3.connect(uri[len("sqlite:///"):]) as db:
            return (db.execute("SELECT artifact_location FROM experiments WHERE experiment_id = ?", (experiment,)).fetchone()[0],
                    db.execute("SELECT artifact_uri FROM runs WHERE run_uuid = ?", (run,)).fetchone()[0])
    before = stored()
    for partial in ("", artifact_root(state)[:12], "file:///elsewhere/mlartifacts"):   # no final newline
        mark.write_text(partial)
        client_for(state)
        assert stored() == before, partial
        assert mark.read_text() == artifact_root(state) + "\n"                    # rewritten whole

    old = (tmp_path / "old").resolve().as_uri() + "/mlartifacts"     # where the folder was before a move
    sibling, sibling_run = old + "-other/1/x/artifacts", client.create_run(experiment).info.run_id
    with sqlite3.connect(uri[len("sqlite:///"):]) as db:
        db.execute("UPDATE experiments SET artifact_location = ? WHERE experiment_id = ?", (old, experiment))
        db.execute("UPDATE runs SET artifact_uri = ? WHERE run_uuid = ?", (f"{old}/{experiment}/{run}/artifacts", run))
        db.execute("UPDATE runs SET artifact_uri = ? WHERE run_uuid = ?", (sibling, sibling_run))
    mark.write_text(old + "\n")
    client_for(state)
    assert stored() == (artifact_root(state), f"{artifact_root(state)}/{experiment}/{run}/artifacts")
    with sqlite3.connect(uri[len("sqlite:///"):]) as db:
        assert db.execute("SELECT artifact_uri FROM runs WHERE run_uuid = ?", (sibling_run,)).fetchone()[0] == sibling
    assert not list(state.glob(f"{LOCATION_MARK}.*.tmp"))


@pytest.mark.slow
def test_a_hung_row_is_handed_back_after_its_row_timeout(tmp_path, tiny_model_dir, monkeypatch):
    """A reward that never returns: the row makes no progress, so after row_timeout_s it is handed
    back (run KILLED with the reason) and its worker stopped: interrupted when the coordinator runs
    the row itself (--workers 1), killed (SIGKILL) when a worker process runs it (--workers 2).
    Once the reward answers again, a rerun completes the row exactly once."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("GRPOLAB_HEARTBEAT_INTERVAL", "0.5")
    state = tmp_path / "state"
    path = held_study(tmp_path, tiny_model_dir, tmp_path / "hang", name="hang", seeds=(0,), row_timeout_s=20)
    storage, cfg = default_storage(state), load_study(path)
    (tmp_path / "hang").touch()
    lines = []
    started = time.perf_counter()
    assert run_study(StudyRun.of(str(path), state,
                                 storage_url=storage, workers=1, echo=lines.append)) == 1          # in this process
    in_process_s = time.perf_counter() - started
    assert any("did not complete" in line for line in lines), lines
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
           "GRPOLAB_HEARTBEAT_INTERVAL": "0.5"}
    started = time.perf_counter()
    proc = grpolab("--state", state, "study", path, "--workers", 2, env=env)
    out, _ = proc.communicate(timeout=600)
    subprocess_s = time.perf_counter() - started
    assert proc.returncode == 1 and "did not complete" in out and "Traceback" not in out, out
    assert "was killed by signal 9" in out, out

    first, second = [t for t in trials_of(cfg, storage) if "row" in t.user_attrs]
    assert "mlflow_run_id" in first.user_attrs and "mlflow_run_id" in second.user_attrs, (first, second, lines, out)
    client = MlflowClient(tracking_uri(state))
    runs = [client.get_run(t.user_attrs["mlflow_run_id"]) for t in (first, second)]
    assert [t.state for t in (first, second)] == [TrialState.FAIL, TrialState.FAIL]
    assert all("outcome" not in t.user_attrs or t.user_attrs["outcome"] != "error" for t in (first, second))
    assert [r.info.status for r in runs] == ["KILLED", "KILLED"]
    errors = [r.data.tags["grpolab.error"] for r in runs]
    assert all("no progress for" in e and "row_timeout_s 20" in e for e in errors), errors
    assert "interrupted in this process" in errors[0] and "is killed" in errors[1], errors
    assert second.user_attrs[RESUMES_ATTR] == first.user_attrs["mlflow_run_id"]            # re-queued once

    (tmp_path / "hang").unlink()                                                            # the reward answers again
    path.write_text(path.read_text().replace("row_timeout_s: 20", "row_timeout_s: 600"))
    assert run_study(StudyRun.of(str(path), state, storage_url=storage, workers=1, echo=lambda s: None)) == 0
    trials = [t for t in trials_of(cfg, storage) if "row" in t.user_attrs]
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.FAIL, TrialState.COMPLETE]
    runs = client.search_runs([runs[0].info.experiment_id])
    assert [r.info.run_id for r in runs if r.info.status == "RUNNING"] == []
    assert sum(r.info.status == "FINISHED" and "mlflow.parentRunId" in r.data.tags for r in runs) == 1
    print(f"\nHUNG_ROW in_process_s={in_process_s:.1f} subprocess_s={subprocess_s:.1f} (row_timeout_s=20)")
