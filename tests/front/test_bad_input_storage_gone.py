"""Bad-input corpus, stores: a ``--storage`` URL whose server goes away between rows and stays away.

A 2-row study (tiny model, 1 step a row) on a PostgreSQL server of the test's own: the server is
stopped once the first row is COMPLETE and the coordinator is claiming the second, and is not
started again while the command runs. The command must end as the corpus expects of a store it
cannot use (exit 75, one ``error:`` line naming the URL, that it is unreachable and what to do, no
traceback) once one wait of the storage's reconnect patience ran out (set short here through
GRPOLAB_STORAGE_PATIENCE), not one wait per process, and lose nothing: once the server
is back the first row is COMPLETE with its MLflow run FINISHED, the second row still waits, and
the same command run again finishes the study without training the first row again.

Between rows is made exact, not raced: the first row is held by its reward (fault_helpers.held_study)
until the test holds a row lock on the second row's trial, so the coordinator's claim of it
(Optuna's ``SELECT ... FOR UPDATE``) waits; the server is stopped while it waits.
"""

import os
import re
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import optuna
import psycopg2
from optuna.trial import TrialState

from fault_helpers import held_study
from grpolab.studies.rows import ROW_ATTR, RUN_ATTR, SPURIOUS_ATTR
from grpolab.studies.storage_loss import PATIENCE_ENV

PATIENCE = 10   # seconds the storage may stay away (GRPOLAB_STORAGE_PATIENCE), 60 by default


def _until(what: str, check, timeout: float = 300, proc=None):
    """Poll ``check()`` until it returns a true value; fail naming ``what`` (and the command's
    output, when it ended first)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = check()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the study ended before {what}: {proc.communicate()[1][-3000:]}")
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout} s: {what}")


def _query(conn, sql: str):
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            return cur.fetchall()
    except psycopg2.errors.UndefinedTable:   # the coordinator has not created Optuna's tables yet
        return []


def _runs(state: Path) -> dict:
    with sqlite3.connect(f"file:{state / 'mlflow.db'}?mode=ro", uri=True) as db:
        return {run: (status, end) for run, status, end in db.execute("select run_uuid, status, end_time from runs")}


def _stopped_for_good(proc, pg_ctl) -> tuple[str, float]:
    """Stop the server (not started again while the command runs) and wait for the command:
    (its stderr, seconds from the stop to its end). The clock starts before ``pg_ctl stop``: the
    server drops its connections before pg_ctl returns, so the command's patience starts inside that call.
    Stopped immediately, not fast: the tests hold a row lock so that no claim can be granted before the
    stop, and a fast stop ends the lock's session in an orderly way, releasing it, so a claim waiting on
    it could be granted and commit before its own session ends (seen once in 20-odd runs: the row
    RUNNING); an immediate stop releases nothing, and committed rows survive its recovery."""
    stopped = time.monotonic()
    pg_ctl("stop", "-m", "immediate")
    out, err = proc.communicate(timeout=300)
    assert "Traceback" not in out + err, err[-3000:]
    return err, time.monotonic() - stopped


def _the_one_error(proc, err: str, url: str) -> str:
    """The command ended with EX_TEMPFAIL (75: rerun once the store is back) and one last line,
    ``error:``, that names the storage and says to rerun; returns that line."""
    assert proc.returncode == 75, (proc.returncode, err[-3000:])
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and err.strip().splitlines()[-1] == errors[0], err[-3000:]
    assert re.match(rf"error: study storage {re.escape(url)}: unreachable \(.+\); .*once it is back \(restart it\), "
                    r"run the same command again to resume$", errors[0]), errors[0]
    return errors[0]


def test_a_study_storage_gone_for_good_between_rows_ends_in_one_line_and_keeps_the_first_row(
        tmp_path, tiny_model_dir, own_postgres):
    url, pg_ctl, port, sock = own_postgres
    flag, state = tmp_path / "hold", tmp_path / "state"
    flag.touch()
    study_path = held_study(tmp_path, tiny_model_dir, flag, name="storage_gone", budget={"train.steps": 1})
    cmd = [sys.executable, "-m", "grpolab.cli", "--state", str(state), "study", str(study_path), "--storage", url]
    env = {**os.environ, "OMP_NUM_THREADS": "1", PATIENCE_ENV: str(PATIENCE),
           "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        watch = psycopg2.connect(host="127.0.0.1", port=port, user="grpolab", dbname="postgres")
        watch.autocommit = True
        _until("both rows are queued", lambda: len(_query(watch, "select number from trials")) == 2, proc=proc)
        lock = psycopg2.connect(host="127.0.0.1", port=port, user="grpolab", dbname="postgres")
        with lock.cursor() as cur:   # held until the server stops: the second row cannot be claimed before
            cur.execute("select trial_id from trials where number = 1 and state = 'WAITING' for update")
            assert cur.rowcount == 1
        flag.unlink()
        _until("the first row is COMPLETE", lambda: _query(
            watch, "select 1 from trials where number = 0 and state = 'COMPLETE'"), proc=proc)
        _until("the coordinator claims the second row", lambda: _query(
            watch, "select 1 from pg_stat_activity where wait_event_type = 'Lock'"), proc=proc)
        err, seconds = _stopped_for_good(proc, pg_ctl)
    finally:
        if proc.poll() is None:
            proc.kill()
    print(f"\nSTORAGE_GONE {_the_one_error(proc, err, url)}")
    # its patience waited out once (the cut claim, then the coordinator's close), not again at each store call
    assert PATIENCE <= seconds < 2 * PATIENCE + 10, f"ended {seconds:.1f} s after the server stopped"
    print(f"STORAGE_GONE ended_s={seconds:.1f} after the stop")

    pg_ctl("start", "-o", f"-p {port} -k {sock} -c listen_addresses=127.0.0.1")
    first, second = optuna.load_study(study_name="storage_gone", storage=url).get_trials(deepcopy=False)
    assert (first.state, first.user_attrs[ROW_ATTR], second.state) == (TrialState.COMPLETE, "r0-s0", TrialState.WAITING)
    runs = _runs(state)
    row_run = first.user_attrs[RUN_ATTR]
    assert runs[row_run][0] == "FINISHED"
    assert sorted(status for status, _ in runs.values()) == ["FINISHED", "KILLED"]   # the row's run, the parent's

    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "Traceback" not in again.stderr, again.stderr[-3000:]
    trials = optuna.load_study(study_name="storage_gone", storage=url).get_trials(deepcopy=False)
    assert [(t.number, t.state, t.user_attrs[ROW_ATTR]) for t in trials] == [
        (0, TrialState.COMPLETE, "r0-s0"), (1, TrialState.COMPLETE, "r0-s1")]   # no row trained twice
    after = _runs(state)
    assert after[row_run] == runs[row_run]                    # the first row's run untouched
    assert len(after) == 3 and all(status == "FINISHED" for status, _ in after.values())


def _two_workers(tmp_path, tiny_model_dir, flag, state, url: str, name: str, patience: float):
    """(command, env, process) of ``study --workers 2`` over 3 one-step rows that wait for ``flag`` to
    go before they train, on the storage ``url`` with the given storage patience."""
    study_path = held_study(tmp_path, tiny_model_dir, flag, name=name, seeds=(0, 1, 2), budget={"train.steps": 1})
    cmd = [sys.executable, "-m", "grpolab.cli", "--state", str(state), "study", str(study_path), "--storage", url,
           "--workers", "2"]
    env = {**os.environ, PATIENCE_ENV: str(patience),
           "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    return cmd, env, subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _third_row_locked_then_rows_released(port: int, proc, flag):
    """Once each worker holds a row: lock the third (waiting) row, so that neither worker can claim it
    before the server stops, then let the two held rows train. (watch connection, lock connection):
    the caller keeps the second open, since closing it would release the lock."""
    watch = psycopg2.connect(host="127.0.0.1", port=port, user="grpolab", dbname="postgres")
    watch.autocommit = True
    _until("each worker holds a row", lambda: len(_query(watch, "select 1 from trials where state = 'RUNNING'")) == 2,
           proc=proc)
    lock = psycopg2.connect(host="127.0.0.1", port=port, user="grpolab", dbname="postgres")
    with lock.cursor() as cur:
        cur.execute("select trial_id from trials where state = 'WAITING' for update")
        assert cur.rowcount == 1
    flag.unlink()
    return watch, lock


def test_a_study_storage_gone_for_good_ends_two_workers_and_their_coordinator_together(
        tmp_path, tiny_model_dir, own_postgres):
    """``--workers 2``: both workers meet the lost server between rows (each waits on the row lock
    of the third row's claim); the first to give it up tells the others through the state folder
    (storage.share_storage_loss), so the command ends within seconds, in the coordinator's one
    line, without a worker's traceback or error line, and exits 75; the two complete rows stay
    complete and the rerun trains the third row alone. The storage is given up only once a process
    waited its patience out (a restart shorter than that is ridden out: the next test); then the
    others stop at once, so the command ends about one patience after the stop, not one per process."""
    url, pg_ctl, port, sock = own_postgres
    flag, state = tmp_path / "hold", tmp_path / "state"
    flag.touch()
    cmd, env, proc = _two_workers(tmp_path, tiny_model_dir, flag, state, url, "storage_gone_2", PATIENCE)
    try:
        watch, _lock = _third_row_locked_then_rows_released(port, proc, flag)
        _until("both held rows are COMPLETE", lambda: len(_query(
            watch, "select 1 from trials where state = 'COMPLETE'")) == 2, proc=proc)
        _until("both workers claim the third row", lambda: len(_query(
            watch, "select 1 from pg_stat_activity where wait_event_type = 'Lock'")) == 2, proc=proc)
        err, seconds = _stopped_for_good(proc, pg_ctl)
    finally:
        if proc.poll() is None:
            proc.kill()
    _the_one_error(proc, err, url)
    assert PATIENCE <= seconds < 2 * PATIENCE + 2, f"ended {seconds:.1f} s after the server stopped"   # not one per process
    print(f"\nSTORAGE_GONE_2_WORKERS ended_s={seconds:.1f} after the stop; its stderr:\n{err.strip()}")

    pg_ctl("start", "-o", f"-p {port} -k {sock} -c listen_addresses=127.0.0.1")
    trials = optuna.load_study(study_name="storage_gone_2", storage=url).get_trials(deepcopy=False)
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.COMPLETE, TrialState.WAITING]
    runs = _runs(state)
    row_runs = {t.user_attrs[RUN_ATTR] for t in trials[:2]}
    assert all(runs[run][0] == "FINISHED" for run in row_runs)
    assert sorted(status for status, _ in runs.values()) == ["FINISHED", "FINISHED", "KILLED"]   # rows, parent

    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "Traceback" not in again.stderr, again.stderr[-3000:]
    study = optuna.load_study(study_name="storage_gone_2", storage=url)
    trials = study.get_trials(deepcopy=False)
    assert [(t.state, t.user_attrs[ROW_ATTR]) for t in trials if ROW_ATTR in t.user_attrs] == [
        (TrialState.COMPLETE, f"r0-s{seed}") for seed in range(3)]   # no row trained twice
    # the two workers start together and both look for the one waiting row: the one whose ask()
    # came second may get a new, row-less trial, which it marks, fails and trains nothing in
    for t in trials:
        if ROW_ATTR not in t.user_attrs:
            assert t.state == TrialState.FAIL and t.user_attrs.get(SPURIOUS_ATTR) is True, t
    after = _runs(state)
    assert {run: after[run] for run in row_runs} == {run: runs[run] for run in row_runs}   # untouched
    assert len(after) == 4 and all(status == "FINISHED" for status, _ in after.values())


def test_a_study_storage_restarted_within_its_patience_lets_two_workers_finish_the_study(
        tmp_path, tiny_model_dir, own_postgres):
    """``--workers 2``, the same moment as above (both workers wait to claim the third row), but
    the server is started again 3 s after the stop: the claims the stop cut are ridden out, not
    given up (the storage is given up only after a whole patience), so the study finishes with
    exit 0 and every row COMPLETE once."""
    url, pg_ctl, port, sock = own_postgres
    flag, state = tmp_path / "hold", tmp_path / "state"
    flag.touch()
    _, _, proc = _two_workers(tmp_path, tiny_model_dir, flag, state, url, "storage_back_2", 30)
    restart = threading.Timer(3.0, pg_ctl, ("start", "-o", f"-p {port} -k {sock} -c listen_addresses=127.0.0.1"))
    try:
        watch, _lock = _third_row_locked_then_rows_released(port, proc, flag)
        _until("both workers claim the third row", lambda: len(_query(
            watch, "select 1 from pg_stat_activity where wait_event_type = 'Lock'")) == 2, proc=proc)
        pg_ctl("stop", "-m", "fast")
        restart.start()
        out, err = proc.communicate(timeout=300)
    finally:
        if restart.ident is not None:
            restart.join()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, (proc.returncode, err[-3000:])
    assert "Traceback" not in out + err and "error:" not in err, err[-3000:]
    trials = optuna.load_study(study_name="storage_back_2", storage=url).get_trials(deepcopy=False)
    assert sorted(t.user_attrs[ROW_ATTR] for t in trials if t.state == TrialState.COMPLETE) == [
        f"r0-s{seed}" for seed in range(3)], [(t.state, t.user_attrs.get(ROW_ATTR)) for t in trials]
    assert not list(state.glob(".study-storage-gone-*"))
    print(f"\nSTORAGE_BACK_2_WORKERS its stderr:\n{err.strip()[-2000:]}")
