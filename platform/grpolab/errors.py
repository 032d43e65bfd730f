"""Errors the platform raises on purpose, each with a message a user can act on."""

from __future__ import annotations

import os
import sys
import warnings


class ConfigError(ValueError):
    """Bad user input: names the key, what was wrong, and what is valid. Raised before any
    model is loaded or any MLflow run is created; the CLI maps it to exit code 2."""


def did_you_mean(value, valid) -> str:
    """`` (did you mean 'steps'?)`` for a near miss among ``valid``, else empty."""
    import difflib
    close = difflib.get_close_matches(str(value), [str(v) for v in valid], n=1, cutoff=0.75)
    return f" (did you mean {close[0]!r}?)" if close else ""


# Packages whose frames lie between a user's line and a warning grpolab raises: grpolab itself, and the
# libraries a drop-in run goes through (``trainer.train()`` -> transformers -> TRL -> grpolab).
_PASS_THROUGH = ("grpolab", "trl", "transformers", "accelerate", "torch")


def _pass_through_dirs() -> tuple[str, ...]:
    dirs = [os.path.dirname(__file__) + os.sep]
    for name in _PASS_THROUGH[1:]:
        module = sys.modules.get(name)   # only those already imported can be on the stack
        if module is not None and getattr(module, "__file__", None):
            dirs.append(os.path.dirname(module.__file__) + os.sep)
    return tuple(dirs)


class GrpoLabWarning(UserWarning):
    """A warning grpolab raises on purpose (a setting that cannot act, a cap reached): the command
    line prints it as one ``warning: ...`` line; Python code can filter the whole family by it."""


def warn_at_caller(message: str, category: type[Warning] = GrpoLabWarning) -> None:
    """``warnings.warn`` attributed to the first frame outside grpolab and the libraries it runs
    under (TRL, transformers, accelerate, torch): the user's line that built the ``GrpoLabTrainer``
    or called ``train()``, so Python prints that file and line (not ``sys:1`` or grpolab's own code),
    and ``-W``/``filterwarnings`` by module match the user's. Python 3.12's ``skip_file_prefixes``
    does this; 3.11 needs the count."""
    skip = _pass_through_dirs()
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(skip):
        frame, level = frame.f_back, level + 1
    # level counts from the caller of this function; warn's stacklevel counts this frame as 1
    warnings.warn(message, category, stacklevel=level + 1 if frame is not None else 2)


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or infinite: the run stops and is recorded FAILED."""


class EmptyUpdatesError(RuntimeError):
    """Several update batches in a row gave the policy no gradient (every row masked out, or every
    advantage 0 with no other loss term): the run stops, FAILED, naming the setting that emptied them
    (``train.max_empty_updates`` / ``GrpoLabTrainer(max_empty_updates=)`` bounds the streak)."""


class EmptyUpdateWarning(GrpoLabWarning):
    """The first update batch of a streak that gives the policy no gradient, with its cause."""


class NotImplementedMethodError(ConfigError):
    """A registered method whose axis values are not implemented yet was requested."""
