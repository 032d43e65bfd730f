"""A time limit on a call that the call cannot switch off: the limit of a user reward (``timeout_s``).

Detail: docs/runs.md, "grpolab.tasks.deadline".
"""

from __future__ import annotations

import contextlib
import ctypes
import signal
import threading

DEADLINE_SIGNAL = signal.SIGRTMIN + 3 if hasattr(signal, "SIGRTMIN") else signal.SIGVTALRM


class RewardTimeout(Exception):
    """The call ran past its ``timeout_s`` (the message names what ran and the limit)."""


class _Interrupted(BaseException):
    """Raised inside the call when its time is up; BaseException so ``except Exception`` lets it pass."""


def _active_watches() -> list:
    """This thread's armed limits, innermost last (a deadline inside another keeps both)."""
    return _ACTIVE.__dict__.setdefault("watches", [])


def _on_deadline_signal(signum, frame) -> None:
    """The one handler of ``DEADLINE_SIGNAL``, installed once and never taken back: a signal from a
    limit that has ended (a timer that outlived its ``deadline`` because a Ctrl-C handler raised
    while it was being armed or stopped) finds no fired limit still armed and does nothing, where
    the default action of a real-time signal would end the process."""
    if any(watch.fired and not watch.stopped for watch in _active_watches()):
        raise _Interrupted


def _install_handler() -> None:
    if signal.getsignal(DEADLINE_SIGNAL) is not _on_deadline_signal:
        signal.signal(DEADLINE_SIGNAL, _on_deadline_signal)


_ACTIVE = threading.local()


class _Watch:
    """One armed limit: the watchdog fires at most once, and never after ``stop``."""

    def __init__(self, seconds: float):
        self.thread_id = threading.get_ident()
        self.in_main = threading.current_thread() is threading.main_thread()
        self.fired = False
        self.stopped = False
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True

    def _fire(self) -> None:
        with self._lock:
            if self.stopped:
                return
            self.fired = True
            if self.in_main:
                signal.pthread_kill(self.thread_id, DEADLINE_SIGNAL)
            else:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self.thread_id), ctypes.py_object(_Interrupted))

    def stop(self) -> None:
        with self._lock:
            self.stopped = True
        self._timer.cancel()
        if self.fired and not self.in_main:   # an interruption not yet raised is withdrawn
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self.thread_id), None)

    @contextlib.contextmanager
    def armed(self):
        """The limit holds for the body. Everything from starting the timer on sits inside the
        ``try``, and leaving the stack comes before stopping, so a KeyboardInterrupt raised at any
        point of it leaves at worst a timer whose signal finds nothing to interrupt."""
        if self.in_main:
            _install_handler()
        watches = _active_watches()
        watches.append(self)
        try:
            self._timer.start()
            yield
        finally:
            try:
                watches.remove(self)
            finally:
                self.stop()


@contextlib.contextmanager
def deadline(seconds: float, what: str = "the call"):
    """Raise ``RewardTimeout`` naming ``what`` if the body runs longer than ``seconds`` (0: no limit).
    Nested, each limit holds: the interruption is claimed by the limit that fired, and passes
    through the ones that did not."""
    if seconds <= 0:
        yield
        return
    watch = _Watch(seconds)
    try:
        with watch.armed():
            yield
    except _Interrupted:
        if not watch.fired:
            raise
        raise RewardTimeout(f"{what} ran longer than its timeout_s {seconds:g} s") from None
    if watch.fired:
        raise RewardTimeout(f"{what} ran longer than its timeout_s {seconds:g} s (and swallowed the interruption)")


if threading.current_thread() is threading.main_thread():
    _install_handler()
