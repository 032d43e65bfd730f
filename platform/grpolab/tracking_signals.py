"""Signals that end a run: kept apart from tracking so the CLI can import it without MLflow."""


class RunKilled(BaseException):
    """Raised from the SIGTERM handler so the run ends KILLED, not FAILED or RUNNING."""


_received: list[int] = []


def note_signal(signum: int) -> None:
    """Remember a termination signal. A handler's raise can land inside a garbage-collection or
    weakref callback, where Python ignores it (and would print a traceback) and carries on: the
    signal would be lost. Safe points (a training step, an evaluation, between trials) call
    raise_if_signalled; the ignored raise is kept quiet."""
    import sys
    _received.append(signum)
    if sys.unraisablehook is not _quiet_unraisable:
        sys.unraisablehook = _quiet_unraisable


def _quiet_unraisable(unraisable) -> None:
    import sys
    if not isinstance(unraisable.exc_value, RunKilled):   # RunKilled is re-raised at the next safe point
        sys.__unraisablehook__(unraisable)


def raise_if_signalled() -> None:
    if _received:
        raise RunKilled(f"received signal {_received.pop()}")
