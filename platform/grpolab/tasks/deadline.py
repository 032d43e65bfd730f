"""A time limit on a call that the call cannot switch off: the limit of a user reward (``timeout_s``).

The process alarm (``signal.alarm``/``SIGALRM``) cannot carry it: a reward commonly calls
math-verify, whose own timeout installs its SIGALRM handler and cancels the alarm when it returns,
so a limit kept in the alarm would silently vanish. The limit is kept instead by a watchdog thread
(``threading.Timer``) that, when time is up:

- in the main thread, sends the main thread a signal of its own (``signal.pthread_kill``; a
  real-time signal, ``SIGRTMIN + 3`` on Linux, ``SIGVTALRM`` elsewhere). Its handler raises, and a
  blocking system call (``time.sleep``, a socket read, a lock wait) returns at once to let it;
- in any other thread (where Python runs no signal handler), raises in that thread
  asynchronously (``PyThreadState_SetAsyncExc``): Python code stops at its next instruction, but a
  blocking call is left to finish first.

What it cannot do: stop a call that runs in C without returning to the interpreter (a long
regular-expression match, a native extension's loop). That call is stopped when it returns; only
a separate process could be killed sooner. The interruption is a BaseException inside the call,
so a reward's ``except Exception`` cannot swallow it; a reward that swallows even that still ends
in ``RewardTimeout`` once it returns.
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

    def on_signal(self, signum, frame) -> None:
        if self.fired and not self.stopped:
            raise _Interrupted

    def stop(self) -> None:
        with self._lock:
            self.stopped = True
        self._timer.cancel()
        if self.fired and not self.in_main:   # an interruption not yet raised is withdrawn
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self.thread_id), None)

    @contextlib.contextmanager
    def armed(self):
        if not self.in_main:
            self._timer.start()
            try:
                yield
            finally:
                self.stop()
            return
        previous = signal.signal(DEADLINE_SIGNAL, self.on_signal)
        try:
            self._timer.start()
            try:
                yield
            finally:
                self.stop()
        finally:
            _restore_handler(previous)


def _restore_handler(previous) -> None:
    """Put the previous handler back with no signal of ours left pending: one delivered after the
    restore would reach the default action, which for a real-time signal ends the process."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {DEADLINE_SIGNAL})
    try:
        while signal.sigtimedwait({DEADLINE_SIGNAL}, 0) is not None:
            pass
        signal.signal(DEADLINE_SIGNAL, previous if previous is not None else signal.SIG_DFL)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {DEADLINE_SIGNAL})


@contextlib.contextmanager
def deadline(seconds: float, what: str = "the call"):
    """Raise ``RewardTimeout`` naming ``what`` if the body runs longer than ``seconds`` (0: no limit)."""
    if seconds <= 0:
        yield
        return
    watch = _Watch(seconds)
    try:
        with watch.armed():
            yield
    except _Interrupted:
        raise RewardTimeout(f"{what} ran longer than its timeout_s {seconds:g} s") from None
    if watch.fired:
        raise RewardTimeout(f"{what} ran longer than its timeout_s {seconds:g} s (and swallowed the interruption)")
