"""Signals that end a running row in a worker's main thread: its own row reaped as hung
(SIGUSR1 -> ``RowTimedOut``), a Slurm job's end warning (SIGUSR2 -> the row handed back), and how
the reaper stops the live holder of a hung row."""

from __future__ import annotations

import contextlib
import os
import signal
import threading

from grpolab.signals import note_signal, signal_exception
from grpolab.studies.holders import WORKER_ATTR, host_identity, process_alive


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
