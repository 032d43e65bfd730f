"""Errors the platform raises on purpose, each with a message a user can act on; and planning
(``planning()``): validating a file for another machine, whose needs are collected, not raised."""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar


class ConfigError(ValueError):
    """Bad user input: names the key, what was wrong, and what is valid. Raised before any
    model is loaded or any MLflow run is created; the CLI maps it to exit code 2."""


def did_you_mean(value, valid) -> str:
    """`` (did you mean 'steps'?)`` for a near miss among ``valid``, else empty."""
    import difflib
    close = difflib.get_close_matches(str(value), [str(v) for v in valid], n=1, cutoff=0.75)
    return f" (did you mean {close[0]!r}?)" if close else ""


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or infinite: the run stops and is recorded FAILED."""


class EmptyUpdatesError(RuntimeError):
    """Several update batches in a row gave the policy no gradient (every row masked out, or every
    advantage 0 with no other loss term): the run stops, FAILED, naming the setting that emptied them
    (``train.max_empty_updates`` / ``GrpoLabTrainer(max_empty_updates=)`` bounds the streak)."""


class EmptyUpdateWarning(UserWarning):
    """The first update batch of a streak that gives the policy no gradient, with its cause."""


class NotImplementedMethodError(ConfigError):
    """A registered method whose axis values are not implemented yet was requested."""


# -- planning: what the machine that runs a file needs, collected instead of raised -----------------
# ``grpolab study FILE --plan`` validates a study for a machine that may not be this one: a GPU,
# vLLM, a hub download not in the local cache are needs of that machine, not mistakes in the
# file. Checks of such needs call ``unmet_here`` (raise, except while planning: recorded) or
# ``plan_note`` (recorded while planning only: e.g. a check skipped because it would load torch).
# The file's own mistakes (unknown keys, wrong types, incoherent settings) raise either way.

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
