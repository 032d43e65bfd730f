"""Planning (``planning()``): validating a file for a machine that may not be this one.

``grpolab study FILE --plan`` validates a study for a machine that may not be this one: a GPU,
vLLM, a hub download not in the local cache are needs of that machine, not mistakes in the
file. Checks of such needs call ``unmet_here`` (raise, except while planning: recorded) or
``plan_note`` (recorded while planning only: e.g. a check skipped because it would load torch).
The file's own mistakes (unknown keys, wrong types, incoherent settings) raise either way."""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar

from grpolab.errors import ConfigError

_PLANNING: ContextVar[list[str] | None] = ContextVar("grpolab_planning", default=None)


@contextmanager
def planning():
    """Validate for a plan: yields the list that collects what the running machine needs."""
    notes: list[str] = []
    token = _PLANNING.set(notes)
    try:
        yield notes
    finally:
        _PLANNING.reset(token)


def is_planning() -> bool:
    return _PLANNING.get() is not None


def unmet_here(message: str) -> None:
    """A need of the machine that runs the file is not met here: ConfigError(message), or, while
    planning, the message is recorded (the caller then skips what depends on the missing thing)."""
    notes = _PLANNING.get()
    if notes is None:
        raise ConfigError(message)
    if message not in notes:
        notes.append(message)


def plan_note(message: str) -> None:
    """Recorded while planning (a check not made, a download still to come); nothing otherwise."""
    notes = _PLANNING.get()
    if notes is not None and message not in notes:
        notes.append(message)
