"""The heartbeat thread of a worker holding a trial, and the safe points where its row stops
when the trial was reaped meanwhile (the attributes it writes: ``holders.py``)."""

from __future__ import annotations

import logging
import threading
import time

from optuna.exceptions import UpdateFinishedTrialError

from grpolab.signals import raise_if_signalled
from grpolab.studies.holders import HEARTBEAT_ATTR, PROGRESS_ATTR, WORKER_ATTR, heartbeat_interval, worker_record

log = logging.getLogger(__name__)


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


def abort_if_lost(heartbeat: Heartbeat) -> None:
    """At a safe point of a trial: stop on a termination signal whose raise was swallowed, or
    when the trial was reaped."""
    raise_if_signalled()
    heartbeat.progressed()
    if heartbeat.lost.is_set():
        raise TrialReaped(f"trial {heartbeat.trial.number} was reaped as stale by another process "
                          "while this worker ran it; the row was handed back")
