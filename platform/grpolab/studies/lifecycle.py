"""Lifecycle of a study trial: who holds it, heartbeats, stale-trial reaping, resume hook.

Optuna's own heartbeat exists for database storages only (not the journal file), so grpolab
keeps one equivalent for every storage, in the trial's user attributes:

- ``worker``: the holder (host identity, pid, process start time), written right after the
  worker claims the trial.
- ``heartbeat``: a wall-clock timestamp rewritten every ``GRPOLAB_HEARTBEAT_INTERVAL`` seconds
  (default 10) by a thread of the worker.
- ``progress``: when the row last made progress (run started, a training step ended, an
  evaluation reported), stored by the same thread: a hung row keeps beating but stops progressing.

A RUNNING trial is stale when its holder is provably gone or silent:
- same host (hostname and boot id): the holder's pid no longer exists, is a zombie, or belongs
  to a newer process (start time differs). No clock is involved, so a slow but live worker on
  this host is never reaped, however late its heartbeat.
- another host: no heartbeat for ``GRPOLAB_HEARTBEAT_GRACE`` seconds (default 120; hosts need
  clocks in sync to well within that, e.g. NTP). A trial with no heartbeat yet (killed between
  claiming it and writing its holder) ages from its start time.

A RUNNING trial whose holder is alive but has made no progress for the study's ``row_timeout_s``
(e.g. a reward function that never returns) is reaped too, and its holder is stopped: killed
(SIGKILL) when it is another process on this host, interrupted (``RowTimedOut`` raised in its
main thread) when it is this very process. A holder on another host learns it at its next
heartbeat and stops at its next step; one hung for good there keeps its process (not the row)
until it is stopped on that host.

Reaping fails the trial (only one reaper wins: the storage refuses a second transition), ends
its MLflow runs KILLED with the reason in ``grpolab.error``, and records the reason on the study.
A reaped trial carries no ``outcome`` attribute, so the next ``grpolab study`` re-queues its row
(once: enqueueing happens under the setup lock). A worker that is alive after all learns at its
next heartbeat that its trial was finished by someone else, aborts its run (KILLED) and never
reports a value, so no row is ever counted twice.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import threading
import time
from pathlib import Path

from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import TrialState

from grpolab.signals import (
    note_signal,
    raise_if_signalled,
    signal_exception,
    signals_raise,  # noqa: F401 - re-exported: the coordinator imports it from here
)
from grpolab.studies.rows import PARENT_RUN_ATTR, RUN_ATTR

log = logging.getLogger(__name__)
WORKER_ATTR, HEARTBEAT_ATTR, PROGRESS_ATTR = "worker", "heartbeat", "progress"
RESUMES_ATTR = "resumes_run_id"   # on a re-queued row: the MLflow run of its interrupted trial
SLURM_JOB_KEY = "slurm_job"       # in a trial's worker record: the Slurm job its worker runs in
REAPED_PREFIX = "reaped_"         # study user attr reaped_<trial number> -> reason


def heartbeat_interval() -> float:
    return float(os.environ.get("GRPOLAB_HEARTBEAT_INTERVAL", "10"))


def heartbeat_grace() -> float:
    return float(os.environ.get("GRPOLAB_HEARTBEAT_GRACE", "120"))


def host_identity() -> str:
    """hostname/boot id/pid namespace: a rebooted host is another host (its old pids mean
    nothing), and so is a container with its own pid namespace (its pids are not ours to check)."""
    boot = Path("/proc/sys/kernel/random/boot_id")
    suffix = boot.read_text().strip()[:8] if boot.exists() else "noboot"
    try:
        namespace = os.readlink("/proc/self/ns/pid").split("[")[-1].rstrip("]")
    except OSError:
        namespace = "nons"
    return f"{socket.gethostname()}/{suffix}/{namespace}"


def _proc_stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()   # fields from 'state' on (field 3)


def process_start(pid: int) -> str | None:
    fields = _proc_stat(pid)
    return fields[19] if fields else None           # field 22: start time in clock ticks since boot


def process_alive(pid: int, start: str | None) -> bool:
    if not Path("/proc/self/stat").exists():         # no procfs: signal 0 says whether the pid exists
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    fields = _proc_stat(pid)
    if fields is None or fields[0] in ("Z", "X"):    # gone, or dead but not yet waited for
        return False
    return start is None or fields[19] == start


def worker_record() -> dict:
    """Who holds a trial; a Slurm job's worker also names its job, so that the coordinator hands
    its row back as soon as Slurm ends the job (slurm.py), without waiting for the heartbeat grace."""
    pid = os.getpid()
    job = {SLURM_JOB_KEY: os.environ["SLURM_JOB_ID"]} if os.environ.get("SLURM_JOB_ID") else {}
    return {"host": host_identity(), "pid": pid, "pid_start": process_start(pid), **job}


def stalled_reason(trial, now: float, row_timeout: float | None) -> str | None:
    """Why a RUNNING trial whose holder may be alive is hung: no progress for ``row_timeout`` s
    (progress and start times are wall clock: hosts need clocks in sync, as for the grace)."""
    if not row_timeout:
        return None
    last = trial.user_attrs.get(PROGRESS_ATTR)
    if last is None and trial.datetime_start is not None:
        last = trial.datetime_start.timestamp()
    if last is None or now - last <= row_timeout:
        return None
    return f"no progress for {now - last:.0f} s (row_timeout_s {row_timeout:g})"


def stale_reason(trial, here: str, now: float, grace: float) -> str | None:
    """Why a RUNNING trial's holder is gone, or None while it may still be working."""
    worker = trial.user_attrs.get(WORKER_ATTR)
    if worker and worker.get("host") == here:
        if process_alive(int(worker["pid"]), worker.get("pid_start")):
            return None
        return f"its worker process {worker['pid']} on this host is gone"
    last = trial.user_attrs.get(HEARTBEAT_ATTR)
    if last is None and trial.datetime_start is not None:
        last = trial.datetime_start.timestamp()
    if last is None or now - last <= grace:
        return None
    who = f"worker {worker['pid']} on {worker['host']}" if worker else "a worker that never reported"
    return f"no heartbeat from {who} for {now - last:.0f} s (grace {grace:.0f} s)"


class Heartbeat:
    """Claims a trial for this process and keeps its heartbeat fresh from a thread.

    ``lost`` is set when the storage refuses a heartbeat because the trial is already finished:
    someone reaped it, so this worker must abort and not report."""

    def __init__(self, trial, interval: float | None = None):
        self.trial, self.interval = trial, interval or heartbeat_interval()
        self.lost = threading.Event()
        self._stop = threading.Event()
        self.progressed_at, self._stored_progress = time.time(), None
        trial.set_user_attr(WORKER_ATTR, worker_record())
        trial.set_user_attr(HEARTBEAT_ATTR, time.time())
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat-{trial.number}", daemon=True)
        self._thread.start()

    def progressed(self) -> None:
        """The row made progress (cheap: stored by the heartbeat thread at its next beat)."""
        self.progressed_at = time.time()

    def _beat(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.trial.set_user_attr(HEARTBEAT_ATTR, time.time())
                progressed_at = self.progressed_at
                if progressed_at != self._stored_progress:
                    self.trial.set_user_attr(PROGRESS_ATTR, progressed_at)
                    self._stored_progress = progressed_at
            except UpdateFinishedTrialError:
                if not self._stop.is_set():
                    self.lost.set()
                return
            except Exception as exc:  # noqa: BLE001 - a storage hiccup: try again next beat
                log.warning("heartbeat of trial %d not stored: %s", self.trial.number, exc)

    def stop(self) -> None:
        """Stop beating (before the worker finishes the trial itself). A beat stuck in a storage
        call is not waited for past a bound: the thread is a daemon, and its late write is
        refused or harmless once the trial is finished."""
        self._stop.set()
        self._thread.join(timeout=max(5.0, 2 * self.interval))
        if self._thread.is_alive():
            log.warning("heartbeat of trial %d did not stop within %.0f s; going on without it",
                        self.trial.number, max(5.0, 2 * self.interval))


class TrialReaped(Exception):
    """This worker's trial was finished by a reaper: the run ends KILLED and nothing is reported."""
    grpolab_status = "KILLED"


class RowTimedOut(BaseException):
    """Raised in this process's main thread when its own row was reaped for making no progress:
    a BaseException, so a reward wrapper's ``except Exception`` cannot swallow it."""
    grpolab_status = "KILLED"


_timed_out: dict[int, str] = {}     # trial number -> reason, for the interrupt handler
_current_trial: list[int] = []      # the trial this process's main thread runs now


@contextlib.contextmanager
def running_trial(number: int):
    """Mark the trial this process's main thread runs (only it may be interrupted by a timeout)."""
    _current_trial.append(number)
    try:
        yield
    finally:
        _current_trial.remove(number)
        _timed_out.pop(number, None)


@contextlib.contextmanager
def timeouts_interrupt():
    """In the main thread: SIGUSR1 raises RowTimedOut when the row it runs was reaped as hung."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        number = next((n for n in _current_trial if n in _timed_out), None)
        if number is not None:
            raise RowTimedOut(_timed_out.pop(number))
    previous = signal.signal(signal.SIGUSR1, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGUSR1, previous)


@contextlib.contextmanager
def job_end_raises():
    """In the main thread of a worker in a Slurm job: SIGUSR2, the warning submitit asks Slurm to
    send before a job is preempted or reaches its time limit (``--signal=USR2@90``), ends the row
    like SIGTERM (RunKilled: the row is handed back). Its default action would end the process
    outright, leaving the row RUNNING until it is reaped."""
    if not os.environ.get("SLURM_JOB_ID") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        note_signal(signum)
        raise signal_exception(signum)
    previous = signal.signal(signal.SIGUSR2, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGUSR2, previous)


def holder_stopper(trial):
    """(what will be done, a function doing it) to stop the live holder of a trial reaped as hung.
    The caller ends the trial's runs with the reason first, then stops the holder."""
    worker = trial.user_attrs.get(WORKER_ATTR) or {}
    pid = int(worker.get("pid", -1))
    if worker.get("host") != host_identity():
        return "its worker on another host stops at its next heartbeat", lambda reason: None
    if pid == os.getpid():
        def interrupt(reason: str) -> None:
            if trial.number in _current_trial:
                _timed_out[trial.number] = reason
                signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR1)
        return f"its row is interrupted in this process ({pid})", interrupt

    def kill(reason: str) -> None:
        if process_alive(pid, worker.get("pid_start")):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    return f"its worker process {pid} is killed", kill


def abort_if_lost(heartbeat: Heartbeat) -> None:
    """At a safe point of a trial: stop on a termination signal whose raise was swallowed, or
    when the trial was reaped."""
    raise_if_signalled()
    heartbeat.progressed()
    if heartbeat.lost.is_set():
        raise TrialReaped(f"trial {heartbeat.trial.number} was reaped as stale by another process "
                          "while this worker ran it; the row was handed back")


def reap_stale_trials(study, state: Path, grace: float | None = None,
                      row_timeout: float | None = None) -> dict[int, str]:
    """Fail every RUNNING trial whose holder is gone, or alive but without progress for
    ``row_timeout`` s (that holder is stopped, see holder_stopper); end its MLflow runs KILLED.
    Returns {trial number: reason} for the trials this call reaped."""
    here, now, grace = host_identity(), time.time(), heartbeat_grace() if grace is None else grace
    reaped = {}
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        reason, hung = stale_reason(trial, here, now, grace), False
        if reason is None:
            reason = stalled_reason(trial, now, row_timeout)
            hung = reason is not None
        if reason is None:
            continue
        action, stop = holder_stopper(trial) if hung else ("", None)
        reason = f"row handed back: {reason}" + (f"; {action}" if hung else "")
        if hand_back(study, state, trial, reason, stop):
            reaped[trial.number] = reason
    return reaped


def hand_back(study, state: Path, trial, reason: str, stop=None) -> bool:
    """Fail a RUNNING trial as interrupted (no ``outcome``: the next enqueue re-queues its row),
    record ``reason`` on the study and on its MLflow runs (ended KILLED), then call ``stop(reason)``
    if given. False when the trial was finished meanwhile (by its worker, or another reaper won)."""
    try:
        study.tell(trial.number, state=TrialState.FAIL)
    except (ValueError, UpdateFinishedTrialError):
        return False
    try:
        study.set_user_attr(f"{REAPED_PREFIX}{trial.number}", reason)
        end_trial_runs(study, state, trial, reason)
    except Exception as exc:  # noqa: BLE001 - the row is handed back already; its run's status is best effort
        log.warning("trial %d: its runs could not be ended KILLED: %s", trial.number, exc)
    finally:
        if stop is not None:   # after its runs are ended: a hung holder has written nothing since
            stop(reason)
    log.warning("trial %d: %s", trial.number, reason)
    return True


def reap_job_trials(study, state: Path, job_id: str, job_state: str) -> dict[int, str]:
    """Hand back the rows still RUNNING in a Slurm job that has left the RUNNING state (cancelled,
    preempted, out of time, failed): its worker cannot report them any more."""
    reaped = {}
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if (trial.user_attrs.get(WORKER_ATTR) or {}).get(SLURM_JOB_KEY) != str(job_id):
            continue
        reason = f"row handed back: its Slurm job {job_id} is {job_state}"
        if hand_back(study, state, trial, reason):
            reaped[trial.number] = reason
    return reaped


def reap_logged(study, state: Path, row_timeout: float | None, echo) -> None:
    """reap_stale_trials, each reason echoed. A storage or MLflow hiccup is logged, never fatal:
    a coordinator must outlive a failed pass, and the next pass tries again."""
    try:
        for reason in reap_stale_trials(study, state, row_timeout=row_timeout).values():
            echo(reason)
    except Exception as exc:  # noqa: BLE001 - see above
        if threading.current_thread() is threading.main_thread():   # the watchdog thread leaves it to the main one
            raise_if_signalled(exc)   # the store's code turned a Ctrl-C/SIGTERM into this error: not a hiccup
        log.warning("could not check for stale rows (trying again): %s", exc)


@contextlib.contextmanager
def watchdog(study, state: Path, row_timeout: float | None, echo):
    """While this process runs rows itself (--workers 1), a thread reaps stale and hung rows, its
    own included (its own hung row is interrupted: holder_stopper)."""
    stop = threading.Event()
    every = min(heartbeat_interval(), row_timeout / 2) if row_timeout else heartbeat_interval()

    def watch():
        while not stop.wait(every):
            reap_logged(study, state, row_timeout, echo)
    thread = threading.Thread(target=watch, name="row-watchdog", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=max(5.0, 2 * every))


def end_trial_runs(study, state: Path, trial, reason: str, status: str = "KILLED",
                   from_statuses: tuple = ("RUNNING", "FINISHED", "SCHEDULED")) -> None:
    """End every MLflow run of a trial that never reported: RUNNING ones, and a FINISHED one
    whose worker died before telling (its value was never counted, and must not be shown)."""
    from mlflow.tracking import MlflowClient

    from grpolab.tracking.recorder import tracking_uri
    parent = study.user_attrs.get(PARENT_RUN_ATTR)
    client = MlflowClient(tracking_uri(state))
    runs = []
    if parent:
        experiment = client.get_run(parent).info.experiment_id
        runs = client.search_runs([experiment], filter_string=(
            f"tags.`mlflow.parentRunId` = '{parent}' and tags.`optuna.trial_number` = '{trial.number}'"))
    for run in runs:
        if run.info.status in from_statuses:
            client.set_tag(run.info.run_id, "grpolab.error", reason)
            client.set_terminated(run.info.run_id, status=status)


def link_restart(state: Path, previous_run_id: str, new_run_id: str) -> None:
    """Tag the interrupted run with the run that restarted its row (the new run carries
    ``grpolab.restart_of``): the history of a row reads both ways."""
    from grpolab.tracking.recorder import client_for
    try:
        client_for(state).set_tag(previous_run_id, "grpolab.restarted_as", new_run_id)
    except Exception as exc:  # noqa: BLE001 - the old run may live in a store no longer reachable
        raise_if_signalled(exc)   # a SIGTERM the store's code turned into an error is still the signal
        log.warning("could not tag run %s as restarted: %s", previous_run_id, exc)


def previous_holder_gone(study, run_id: str) -> bool:
    """Whether every trial that ran ``run_id`` has a holder that is gone: on this host its process
    no longer exists; elsewhere it has been silent for the grace. A run whose old holder may
    still write to it (e.g. a hung worker on another host) is never continued by a second one."""
    here, now = host_identity(), time.time()
    for trial in study.get_trials(deepcopy=False):
        if trial.user_attrs.get(RUN_ATTR) != run_id:
            continue
        worker = trial.user_attrs.get(WORKER_ATTR)
        if worker is None:
            continue
        if worker.get("host") == here:
            if int(worker["pid"]) != os.getpid() and process_alive(int(worker["pid"]), worker.get("pid_start")):
                return False
        elif now - float(trial.user_attrs.get(HEARTBEAT_ATTR, 0.0)) <= heartbeat_grace():
            return False
    return True


def checkpoint_to_resume(previous_run_id: str | None, state: Path, resolved: dict | None = None):
    """Resume hook (the checkpoints work wires this): the checkpoint of an interrupted row's run,
    or None. None restarts the row in a fresh MLflow run (the old run is already KILLED and
    tagged ``grpolab.restarted_as``); a checkpoint makes the worker continue ``previous_run_id``
    (same run id, contiguous steps). Either way only the new trial can report the row's value."""
    if not previous_run_id:   # a first try: nothing to resume (and torch need not be imported)
        return None
    from grpolab.experiment.checkpoints import CONFIG, config_change, find_resumable, run_dir
    if find_resumable(state, previous_run_id) is None:
        return None
    stored = run_dir(state, previous_run_id) / CONFIG
    if resolved is not None and (not stored.exists() or
                                 config_change(json.loads(stored.read_text()), resolved) is not None):
        return None   # the row's definition changed (--accept-changed): restart it, never resume across it
    return previous_run_id
