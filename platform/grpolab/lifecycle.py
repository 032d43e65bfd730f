"""Lifecycle of a study trial: who holds it, heartbeats, stale-trial reaping, resume hook.

Optuna's own heartbeat exists for database storages only (not the journal file), so grpolab
keeps one equivalent for every storage, in the trial's user attributes:

- ``worker``: the holder (host identity, pid, process start time), written right after the
  worker claims the trial.
- ``heartbeat``: a wall-clock timestamp rewritten every ``GRPOLAB_HEARTBEAT_INTERVAL`` seconds
  (default 10) by a thread of the worker.

A RUNNING trial is stale when its holder is provably gone or silent:
- same host (hostname and boot id): the holder's pid no longer exists, is a zombie, or belongs
  to a newer process (start time differs). No clock is involved, so a slow but live worker on
  this host is never reaped, however late its heartbeat.
- another host: no heartbeat for ``GRPOLAB_HEARTBEAT_GRACE`` seconds (default 120; hosts need
  clocks in sync to well within that, e.g. NTP). A trial with no heartbeat yet (killed between
  claiming it and writing its holder) ages from its start time.

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

log = logging.getLogger(__name__)
WORKER_ATTR, HEARTBEAT_ATTR = "worker", "heartbeat"
RESUMES_ATTR = "resumes_run_id"   # on a re-queued row: the MLflow run of its interrupted trial
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
    pid = os.getpid()
    return {"host": host_identity(), "pid": pid, "pid_start": process_start(pid)}


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
        trial.set_user_attr(WORKER_ATTR, worker_record())
        trial.set_user_attr(HEARTBEAT_ATTR, time.time())
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat-{trial.number}", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.trial.set_user_attr(HEARTBEAT_ATTR, time.time())
            except UpdateFinishedTrialError:
                if not self._stop.is_set():
                    self.lost.set()
                return
            except Exception as exc:  # noqa: BLE001 - a storage hiccup: try again next beat
                log.warning("heartbeat of trial %d not stored: %s", self.trial.number, exc)

    def stop(self) -> None:
        """Stop beating (before the worker finishes the trial itself)."""
        self._stop.set()
        self._thread.join()


class TrialReaped(Exception):
    """This worker's trial was finished by a reaper: the run ends KILLED and nothing is reported."""
    grpolab_status = "KILLED"


def abort_if_lost(heartbeat: Heartbeat) -> None:
    """At a safe point of a trial: stop on a termination signal whose raise was swallowed, or
    when the trial was reaped."""
    from .tracking_signals import raise_if_signalled
    raise_if_signalled()
    if heartbeat.lost.is_set():
        raise TrialReaped(f"trial {heartbeat.trial.number} was reaped as stale by another process "
                          "while this worker ran it; the row was handed back")


def reap_stale_trials(study, state: Path, grace: float | None = None) -> dict[int, str]:
    """Fail every RUNNING trial whose holder is gone; end its MLflow runs KILLED.
    Returns {trial number: reason} for the trials this call reaped."""
    here, now, grace = host_identity(), time.time(), heartbeat_grace() if grace is None else grace
    reaped = {}
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        reason = stale_reason(trial, here, now, grace)
        if reason is None:
            continue
        try:
            study.tell(trial.number, state=TrialState.FAIL)
        except (ValueError, UpdateFinishedTrialError):
            continue   # finished meanwhile: by its own worker, or another reaper won
        reason = f"row handed back: {reason}"
        study.set_user_attr(f"{REAPED_PREFIX}{trial.number}", reason)
        end_trial_runs(study, state, trial, reason)
        reaped[trial.number] = reason
        log.warning("trial %d: %s", trial.number, reason)
    return reaped


def end_trial_runs(study, state: Path, trial, reason: str, status: str = "KILLED",
                   from_statuses: tuple = ("RUNNING", "FINISHED", "SCHEDULED")) -> None:
    """End every MLflow run of a trial that never reported: RUNNING ones, and a FINISHED one
    whose worker died before telling (its value was never counted, and must not be shown)."""
    from mlflow.tracking import MlflowClient

    from .tracking import tracking_uri
    parent = study.user_attrs.get("mlflow_parent_run_id")
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
    from .tracking import client_for
    try:
        client_for(state).set_tag(previous_run_id, "grpolab.restarted_as", new_run_id)
    except Exception as exc:  # noqa: BLE001 - the old run may live in a store no longer reachable
        log.warning("could not tag run %s as restarted: %s", previous_run_id, exc)


@contextlib.contextmanager
def sigterm_raises():
    """SIGTERM raises RunKilled in the main thread, so a worker or coordinator unwinds: its run
    ends KILLED and its trial is handed back, instead of dying with both left RUNNING."""
    from .tracking_signals import RunKilled, note_signal

    def handler(signum, frame):
        note_signal(signum)   # a raise swallowed in a GC callback is re-raised at the next safe point
        raise RunKilled(f"received signal {signum}")
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def checkpoint_to_resume(previous_run_id: str | None, state: Path, resolved: dict | None = None):
    """Resume hook (the checkpoints work wires this): the checkpoint of an interrupted row's run,
    or None. None restarts the row in a fresh MLflow run (the old run is already KILLED and
    tagged ``grpolab.restarted_as``); a checkpoint makes the worker continue ``previous_run_id``
    (same run id, contiguous steps). Either way only the new trial can report the row's value."""
    from .checkpoints import CONFIG, config_change, find_resumable, run_dir
    if not previous_run_id or find_resumable(state, previous_run_id) is None:
        return None
    stored = run_dir(state, previous_run_id) / CONFIG
    if resolved is not None and (not stored.exists() or
                                 config_change(json.loads(stored.read_text()), resolved) is not None):
        return None   # the row's definition changed (--accept-changed): restart it, never resume across it
    return previous_run_id
