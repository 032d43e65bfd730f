"""Faults, with real processes and real stores: workers killed with SIGKILL or SIGTERM mid-row
(journal file and PostgreSQL), three coordinators starting together on fresh stores (SQLite
MLflow + journal, PostgreSQL for both), unreachable stores, bad input, and writes outside
the state folder. Rows are tiny (random-init tiny model, a few steps): the lifecycle is what
is under test, not learning."""

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import optuna
import pytest
import yaml
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState

from conftest import REPO
from fault_helpers import BASE, held_study
from grpolab.studies.hand_back import reap_stale_trials
from grpolab.studies.heartbeat import Heartbeat, TrialReaped, abort_if_lost
from grpolab.studies.holders import HEARTBEAT_ATTR, WORKER_ATTR, host_identity, worker_record
from grpolab.tracking.stores import setup_lock
from grpolab.studies.storage import default_storage, open_storage
from grpolab.studies.coordinator import run_study
from grpolab.studies.study_run import StudyRun
from grpolab.studies.trials import ClaimedTrial, _report
from grpolab.studies.definition import load_study
from grpolab.tracking.recorder import tracking_uri


def study_file(folder: Path, name: str, steps: int, seeds=(0, 1), rungs=1) -> Path:
    data = {"kind": "ladder", "name": name, "base": BASE, "budget": {"train.steps": steps}, "seeds": list(seeds),
            "rungs": [{"name": "base"}, {"name": "+ clip higher", "changes": {"method.eps_high": 0.28}}][:rungs]}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def grpolab(*args, env=None, cwd=None, **kw):
    return subprocess.Popen([sys.executable, "-m", "grpolab.cli", *map(str, args)], env={**os.environ, **(env or {})},
                            cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def trials_of(cfg, storage: str) -> list:
    """The study's trials, read without creating anything; the storage's engine is released."""
    opened = open_storage(storage)
    try:
        return optuna.load_study(study_name=cfg.name, storage=opened).get_trials(deepcopy=False)
    finally:
        if hasattr(opened, "engine"):
            opened.engine.dispose()


def wait_for_running_row(cfg, storage: str, state: Path, timeout=300):
    """The first trial that a worker holds and has started its MLflow run for. The storage is
    opened once, under the setup lock (a fresh database gets its tables there, as a coordinator
    would do it, never beside one), and the study is only loaded, never created."""
    deadline, opened = time.time() + timeout, None
    try:
        while time.time() < deadline:
            if opened is None:
                with setup_lock(state, None, storage):
                    opened = open_storage(storage)
            try:
                study = optuna.load_study(study_name=cfg.name, storage=opened)
            except KeyError:
                study = None   # the coordinator has not created it yet
            for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)) if study else []:
                if WORKER_ATTR in t.user_attrs and "mlflow_run_id" in t.user_attrs:
                    return t
            time.sleep(0.5)
    finally:
        if hasattr(opened, "engine"):
            opened.engine.dispose()
    raise AssertionError("no row started within the timeout")


@pytest.fixture(params=["journal", "postgresql"])
def study_storage(request, tmp_path):
    if request.param == "journal":
        return default_storage(tmp_path / "state")
    return request.getfixturevalue("postgres_server").database(f"kill_{uuid.uuid4().hex[:8]}")


def wait_gone(pid: int, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    raise AssertionError(f"process {pid} still alive {timeout} s after its signal")


@pytest.mark.slow
def test_killed_workers_leave_every_row_complete_exactly_once(tmp_path, study_storage, tiny_model_dir, monkeypatch):
    """SIGKILL one of 2 workers mid-row, then SIGTERM one of 2 workers mid-row on the re-run,
    then re-run to the end: every row COMPLETE once, no run left RUNNING, killed runs KILLED."""
    # Rows are held by a reward until the signalled worker is gone, then released so the other
    # worker's row completes; a killed row restarts in a fresh run (no checkpoint at 2 steps;
    # resuming from a checkpoint is tested in test_checkpoints and test_multiprocess_resume).
    monkeypatch.syspath_prepend(str(tmp_path))
    flag = tmp_path / "hold"
    state, path = tmp_path / "state", held_study(tmp_path, tiny_model_dir, flag)
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    cfg = load_study(path)
    killed = []
    for sig in (signal.SIGKILL, signal.SIGTERM):
        flag.touch()
        proc = grpolab("--state", state, "study", path, "--workers", 2, "--storage", study_storage, env=env)
        trial = wait_for_running_row(cfg, study_storage, state)
        pid = trial.user_attrs[WORKER_ATTR]["pid"]
        os.kill(pid, sig)
        wait_gone(pid)
        flag.unlink()                                          # the other worker's row may finish now
        out, _ = proc.communicate(timeout=600)
        assert proc.returncode == 1, out                       # the coordinator says rows did not complete
        assert "did not complete" in out and "Traceback" not in out, out
        after = trials_of(cfg, study_storage)[trial.number]
        assert after.state == TrialState.FAIL and after.user_attrs.get("outcome") != "error"
        killed.append((trial, out))
    client = MlflowClient(tracking_uri(state))
    (kill9, out9), (term, _) = killed
    assert f"was killed by signal {int(signal.SIGKILL)}" in out9
    run9, run15 = client.get_run(kill9.user_attrs["mlflow_run_id"]), client.get_run(term.user_attrs["mlflow_run_id"])
    assert run9.info.status == "KILLED" and "is gone" in run9.data.tags["grpolab.error"]   # reaped by the coordinator
    # the SIGTERMed worker ends its run KILLED itself ("signal 15"), unless the coordinator, seeing the
    # trial already handed back, ends it first: either way KILLED with the reason
    assert run15.info.status == "KILLED"
    assert any(r in run15.data.tags["grpolab.error"] for r in ("signal 15", "ended interrupted")), run15.data.tags
    if kill9.user_attrs["row"] == term.user_attrs["row"]:     # the re-queued row restarted in a fresh, linked run
        assert run15.data.tags["grpolab.restart_of"] == run9.info.run_id
        assert client.get_run(run9.info.run_id).data.tags["grpolab.restarted_as"] == run15.info.run_id

    assert run_study(StudyRun.of(str(path), state, storage_url=study_storage, workers=1, echo=lambda s: None)) == 0
    trials = trials_of(cfg, study_storage)
    rows = {f"r0-s{s}" for s in cfg.seeds}
    complete = sorted(t.user_attrs["row"] for t in trials if t.state == TrialState.COMPLETE)
    assert complete == sorted(rows)                                          # every row once: none lost, none twice
    others = [t for t in trials if t.state != TrialState.COMPLETE and "row" in t.user_attrs]
    assert len(others) == 2 and all(t.state == TrialState.FAIL for t in others)   # the two killed rows, re-queued once each
    runs = client.search_runs([run9.info.experiment_id])
    assert [r.info.run_id for r in runs if r.info.status == "RUNNING"] == []
    finished_children = [r for r in runs if r.info.status == "FINISHED" and "mlflow.parentRunId" in r.data.tags]
    assert len(finished_children) == len(rows)                              # a dashboard sees each row once
    print(f"\nFAULTS kills_survived=2 rows_lost=0 duplicates=0 storage={study_storage.split(':')[0]}")


def _round_stores(tmp_path: Path, postgres_server, rounds: int) -> list[tuple[str, str]]:
    stores = [(f"sqlite:///{tmp_path}/mlflow-{i}.db", f"journal:{tmp_path}/optuna-{i}.journal") for i in range(rounds)]
    for i in range(rounds):
        tag = uuid.uuid4().hex[:6]
        stores.append((postgres_server.database(f"mlflow_{tag}"), postgres_server.database(f"optuna_{tag}")))
    return stores


@pytest.mark.slow
def test_three_coordinators_on_fresh_stores_run_each_row_once(tmp_path, postgres_server):
    """Three coordinators start at the same moment on fresh stores, 5 times on SQLite MLflow +
    journal and 5 times on PostgreSQL for both: one parent run, one trial per row, intact stores."""
    path = study_file(tmp_path, "three_coordinators", steps=1, seeds=(0,), rungs=2)
    rounds = _round_stores(tmp_path, postgres_server, 5)
    (tmp_path / "barrier").mkdir()
    spec = {"state": str(tmp_path / "state"), "study": str(path), "barrier": str(tmp_path / "barrier"),
            "parties": 3, "rounds": rounds}
    script = REPO / "tests" / "scripts" / "coordinator_rounds.py"
    procs = [subprocess.Popen([sys.executable, str(script), json.dumps(spec)], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for _ in range(3)]
    outputs = _outputs_or_fail_fast(procs, timeout=900)
    for out in outputs:
        assert out.strip().splitlines()[-1] == "CODES " + json.dumps([0] * len(rounds)), out[-3000:]
        assert "Traceback" not in out, out[-3000:]
    for tracking, storage in rounds:
        study = optuna.load_study(study_name="three_coordinators", storage=open_storage(storage))
        rows = [t for t in study.get_trials(deepcopy=False) if "row" in t.user_attrs]
        assert sorted((t.user_attrs["row"], t.state) for t in rows) == [("r0-s0", TrialState.COMPLETE),
                                                                         ("r1-s0", TrialState.COMPLETE)], storage
        client = MlflowClient(tracking)
        runs = client.search_runs([client.get_experiment_by_name("faults").experiment_id])
        parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
        assert len(parents) == 1 and parents[0].info.run_id == study.user_attrs["mlflow_parent_run_id"], tracking
        assert parents[0].info.status == "FINISHED"
        children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
        assert sorted(r.info.status for r in children) == ["FINISHED", "FINISHED"] and len(runs) == 3, tracking
        if tracking.startswith("sqlite:"):
            with sqlite3.connect(tracking[len("sqlite:///"):]) as db:
                assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
                assert db.execute("SELECT count(*) FROM alembic_version").fetchone()[0] == 1


def _outputs_or_fail_fast(procs, timeout: float) -> list[str]:
    """Outputs of processes that meet at barriers: when one ends without finishing every round the
    others would wait at the next barrier forever, so stop them and show the one that ended."""
    deadline, outputs = time.time() + timeout, {}
    while len(outputs) < len(procs) and time.time() < deadline:
        for i, p in enumerate(procs):
            if i not in outputs and p.poll() is not None:
                outputs[i] = p.communicate()[0]
                lines = outputs[i].strip().splitlines()
                if not lines or not lines[-1].startswith("CODES "):
                    for q in procs:
                        q.kill()
                    raise AssertionError("a coordinator ended before its last round:\n" + outputs[i][-4000:])
        time.sleep(0.5)
    for p in procs:
        p.kill()
    assert len(outputs) == len(procs), "coordinators still running at the timeout"
    return [outputs[i] for i in range(len(procs))]


def _one_line_exit_2(proc, timeout=120, code=2) -> str:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == code, (proc.returncode, out)
    # a warning about the file itself (e.g. a setting inert in this run) may come first: the error is one line
    lines = [line for line in out.strip().splitlines() if line.strip() and not line.startswith("warning: ")]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in out, out
    return lines[0]


def test_unreachable_stores_exit_75_fast_and_bad_store_urls_exit_2(tmp_path):
    """An unreachable MLflow server or study storage: exit 75 (EX_TEMPFAIL: start it, run the same
    command again) in seconds, one line naming the URI, and the state folder is not even created.
    A storage URL that no restart makes usable (unknown kind, unparsable port) is bad input: exit 2."""
    exp = tmp_path / "exp.yaml"
    exp.write_text(yaml.safe_dump({**BASE, "train": {**BASE["train"], "steps": 1}}))
    study = study_file(tmp_path, "unreachable", steps=1)
    state = tmp_path / "state"
    started = time.perf_counter()
    run = grpolab("--state", state, "run", exp, env={"MLFLOW_TRACKING_URI": "http://127.0.0.1:9"})
    line = _one_line_exit_2(run, code=75)
    seconds = time.perf_counter() - started
    assert "http://127.0.0.1:9" in line and "unreachable" in line
    assert seconds < 15, f"took {seconds:.1f} s to fail"
    print(f"\nFAULTS fail_fast_seconds={seconds:.2f} (grpolab run, MLFLOW_TRACKING_URI=http://127.0.0.1:9)")
    down = "postgresql+psycopg2://u:secret@127.0.0.1:9/x"
    for argv in (["--state", state, "study", study], ["--state", tmp_path / "read", "table", study]):
        line = _one_line_exit_2(grpolab(*argv, "--storage", down), code=75)   # table opens the storage itself
        assert "postgresql+psycopg2://u:***@127.0.0.1:9/x" in line and "secret" not in line
        assert "run the same command again" in line, line
    for bad, says in (("redis://127.0.0.1/0", "unknown kind"),
                      ("postgresql+psycopg2://u:secret@127.0.0.1:port/x", "not a usable database URL")):
        line = _one_line_exit_2(grpolab("--state", state, "study", study, "--storage", bad))
        assert says in line and "secret" not in line, line
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not a database\n" * 100)
    for bad, says in (("mysql://u@127.0.0.1/db", "driver is not installed"),   # table and the like check --storage too
                      (f"sqlite:///{garbage}", "not a usable SQLite database (file is not a database)")):
        line = _one_line_exit_2(grpolab("--state", state, "table", study, "--storage", bad))
        assert says in line, line
    assert not state.exists()                                           # nothing half-written


def test_bad_input_exits_2_with_one_line_and_writes_nothing(tmp_path):
    state = tmp_path / "state"
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing here yet\n")
    duplicate = study_file(tmp_path, "dup", steps=1, rungs=2)
    data = yaml.safe_load(duplicate.read_text())
    data["rungs"][1]["name"] = "base"
    duplicate.write_text(yaml.safe_dump(data))
    no_seeds = study_file(tmp_path, "no_seeds", steps=1)
    no_seeds.write_text(no_seeds.read_text().replace("seeds:\n- 0\n- 1\n", "seeds: []\n"))
    assert "seeds: []" in no_seeds.read_text()
    procs = {"empty": grpolab("--state", state, "run", empty),
             "dup": grpolab("--state", state, "study", duplicate),
             "seeds": grpolab("--state", state, "study", no_seeds)}
    lines = {name: _one_line_exit_2(proc) for name, proc in procs.items()}
    assert "is empty" in lines["empty"] and str(empty) in lines["empty"]
    assert "rungs[1].name" in lines["dup"] and "unique" in lines["dup"]
    assert lines["seeds"].startswith("error: seeds:") and "non-empty" in lines["seeds"]
    assert not state.exists()
    MlflowClient(tracking_uri(state)).search_experiments()   # a store with no such run (created here, as by any run)
    line = _one_line_exit_2(grpolab("--state", state, "dashboard", "--runs", "0123456789abcdef0123456789abcdef"))
    assert "--runs" in line and "0123456789abcdef0123456789abcdef" in line
    assert not (state / "dashboards").exists()


def test_user_sqlite_uri_writes_nothing_outside_the_state_folder(tmp_path):
    """A run with a user ``sqlite:`` tracking URI, started from an empty folder with an empty
    home: the only file outside the state folder is the user's database."""
    cwd, home, user = tmp_path / "cwd", tmp_path / "home", tmp_path / "user"
    for folder in (cwd, home, user):
        folder.mkdir()
    exp = tmp_path / "exp.yaml"
    exp.write_text(yaml.safe_dump({**BASE, "train": {**BASE["train"], "steps": 1}}))
    uri = f"sqlite:///{user}/mlflow.db"
    proc = grpolab("--state", tmp_path / "state", "run", exp, cwd=cwd, env={"MLFLOW_TRACKING_URI": uri, "HOME": str(home)})
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out
    assert sorted(p.name for p in cwd.rglob("*")) == []                     # no ./mlruns, no ./mlflow.db
    assert sorted(str(p.relative_to(home)) for p in home.rglob("*")) == []
    assert sorted(p.name for p in user.iterdir()) == ["mlflow.db"]
    assert "EmptyUpdateWarning" not in out   # grpolab's warnings print as one "warning: ..." line, no source line
    run_id = json.loads(out[re.search(r"^\{$", out, re.M).start():])["run_id"]   # the summary after any stderr line
    artifacts = MlflowClient(uri).get_run(run_id).info.artifact_uri
    assert artifacts.startswith((tmp_path / "state").resolve().as_uri()), artifacts


def _study_with_parent_run(tmp_path, name: str):
    """(state, study, MLflow client, experiment id, parent run id): a study on a real journal
    storage whose parent run exists in a real MLflow store, as a coordinator leaves them."""
    state = tmp_path / "state"
    study = optuna.create_study(study_name=name, storage=open_storage(default_storage(state)))
    client = MlflowClient(tracking_uri(state))
    experiment = client.create_experiment(name)
    parent = client.create_run(experiment).info.run_id
    study.set_user_attr("mlflow_parent_run_id", parent)
    return state, study, client, experiment, parent


def _claim(study, attrs: dict):
    trial = study.ask()
    for key, value in attrs.items():
        trial.set_user_attr(key, value)
    return trial


def test_reaper_hands_back_dead_or_silent_holders_never_live_slow_ones(tmp_path):
    """Stale-trial rules, on a real journal storage and MLflow store: a dead pid on this host and
    a silent holder on another host are reaped once, with their runs ended KILLED; a live
    process with an old heartbeat (slow, not dead) and a fresh holder elsewhere are not."""
    state, study, client, experiment, parent = _study_with_parent_run(tmp_path, "reap")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    hour_ago, here = time.time() - 3600, host_identity()
    holders = [{WORKER_ATTR: {"host": here, "pid": dead.pid, "pid_start": None}, HEARTBEAT_ATTR: time.time()},
               {WORKER_ATTR: worker_record(), HEARTBEAT_ATTR: hour_ago},
               {WORKER_ATTR: {"host": "elsewhere/0", "pid": 1, "pid_start": "1"}, HEARTBEAT_ATTR: hour_ago},
               {WORKER_ATTR: {"host": "elsewhere/0", "pid": 1, "pid_start": "1"}, HEARTBEAT_ATTR: time.time()}]
    trials = [_claim(study, attrs) for attrs in holders]
    runs = [client.create_run(experiment, tags={"mlflow.parentRunId": parent, "optuna.trial_number": str(t.number)})
            for t in trials]
    reaped = reap_stale_trials(study, state, grace=60)
    assert sorted(reaped) == [0, 2]
    assert reap_stale_trials(study, state, grace=60) == {}                 # handed back once
    states = [t.state for t in study.get_trials(deepcopy=False)]
    assert states == [TrialState.FAIL, TrialState.RUNNING, TrialState.FAIL, TrialState.RUNNING]
    status = [client.get_run(r.info.run_id).info.status for r in runs]
    assert status == ["KILLED", "RUNNING", "KILLED", "RUNNING"]
    assert "no heartbeat from worker 1 on elsewhere/0" in client.get_run(runs[2].info.run_id).data.tags["grpolab.error"]


def test_a_live_worker_whose_trial_was_reaped_reports_nothing(tmp_path):
    """Heartbeat refused (trial finished by a reaper) -> the worker aborts and its late result is
    discarded: the trial stays FAIL and its run ends KILLED, so the row is never counted twice."""
    state, study, client, experiment, parent = _study_with_parent_run(tmp_path, "late")
    trial = study.ask()
    heartbeat = Heartbeat(trial, interval=0.05)
    run = client.create_run(experiment, tags={"mlflow.parentRunId": parent, "optuna.trial_number": str(trial.number)})
    client.set_terminated(run.info.run_id, "FINISHED")          # the worker finished training ...
    study.tell(trial.number, state=TrialState.FAIL)              # ... but a reaper had handed the row back
    assert heartbeat.lost.wait(timeout=10)
    with pytest.raises(TrialReaped):
        abort_if_lost(heartbeat)
    _report(ClaimedTrial(study, trial, heartbeat, state), "complete", TrialState.COMPLETE, values=[0.5])
    assert study.get_trials(deepcopy=False)[0].state == TrialState.FAIL
    assert "outcome" not in study.get_trials(deepcopy=False)[0].user_attrs
    assert client.get_run(run.info.run_id).info.status == "KILLED"
