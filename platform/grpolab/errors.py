"""Errors the platform raises on purpose, each with a message a user can act on."""

from __future__ import annotations



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
