"""Handing rows back: a RUNNING trial whose holder is gone (``holders.holder_gone``) or hung is
failed, its MLflow runs are ended KILLED and the reason is recorded on the study.

Only one reaper wins (the storage refuses a second transition). A reaped trial carries no
``outcome`` attribute, so the next ``grpolab study`` re-queues its row (once: enqueueing happens
under the setup lock). A worker that is alive after all learns at its next heartbeat that its
trial was finished by someone else, aborts its run (KILLED) and never reports a value, so no row
is ever counted twice. A hung holder is stopped: killed (SIGKILL) when it is another process on
this host, interrupted (``RowTimedOut`` raised in its main thread) when it is this very process;
a holder on another host learns it at its next heartbeat and stops at its next step.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from pathlib import Path

from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import TrialState

from grpolab.signals import raise_if_signalled
from grpolab.studies.holders import (SLURM_JOB_KEY, WORKER_ATTR, heartbeat_grace, heartbeat_interval, holder_gone,
                                     host_identity, stalled_reason)
from grpolab.studies.row_interrupts import holder_stopper
from grpolab.studies.run_closing import end_trial_runs

log = logging.getLogger(__name__)
REAPED_PREFIX = "reaped_"         # study user attr reaped_<trial number> -> reason


def reap_stale_trials(study, state: Path, grace: float | None = None,
                      row_timeout: float | None = None) -> dict[int, str]:
    """Fail every RUNNING trial whose holder is gone, or alive but without progress for
    ``row_timeout`` s (that holder is stopped, see holder_stopper); end its MLflow runs KILLED.
    Returns {trial number: reason} for the trials this call reaped."""
    here, now, grace = host_identity(), time.time(), heartbeat_grace() if grace is None else grace
    reaped = {}
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        reason, hung = holder_gone(trial, here, now, grace), False
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
