"""Signals that end a run: kept apart from tracking so the CLI can import it without MLflow."""
import signal


class RunKilled(BaseException):
    """Raised from the SIGTERM handler so the run ends KILLED, not FAILED or RUNNING."""


_received: list[int] = []


def signal_exception(signum: int) -> BaseException:
    """Ctrl-C (SIGINT) is a KeyboardInterrupt, as everywhere in Python; SIGTERM is RunKilled."""
    if signum == signal.SIGINT:
        return KeyboardInterrupt()
    return RunKilled(f"received signal {signum}")


def note_signal(signum: int) -> None:
    """Remember a termination signal. A handler's raise can be lost: inside a garbage-collection or
    weakref callback Python ignores it (and would print a traceback) and carries on, and a library
    may turn it into another error (Optuna's journal lock, interrupted while waiting, re-raises
    as RuntimeError "did not possess lock"). Safe points (a training step, an evaluation, between
    trials) call raise_if_signalled, and a trial that fails while a signal is pending is reported
    interrupted; the ignored raise is kept quiet."""
    import sys
    _received.append(signum)
    if sys.unraisablehook is not _quiet_unraisable:
        sys.unraisablehook = _quiet_unraisable


def _quiet_unraisable(unraisable) -> None:
    import sys
    if not isinstance(unraisable.exc_value, (RunKilled, KeyboardInterrupt)):   # re-raised at the next safe point
        sys.__unraisablehook__(unraisable)


def signal_pending() -> bool:
    return bool(_received)


def forget_signals() -> None:
    """The signal's exception is being handled: a later safe point must not raise it again."""
    _received.clear()


def raise_if_signalled(cause: BaseException | None = None) -> None:
    """Raise the pending signal's exception (from ``cause``, the error a library made of it)."""
    if _received:
        signum = _received[-1]
        _received.clear()
        raise signal_exception(signum) from cause
