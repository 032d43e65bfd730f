"""What every entry point (the command line, the Python API) does before its work: process
settings the libraries read when first used, library caches under the state folder, and quiet
libraries. The command line owns its process and sets them for good, before the libraries are
imported, so that no answer waits on an import; the API runs inside the caller's process and
restores the caller's settings afterwards.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import warnings
from pathlib import Path

from grpolab.state import confine_caches, state_path

# Progress bars and store-migration chatter drown grpolab's own progress; set through the
# variables the libraries read when imported.
QUIET_ENVIRONMENT = {"MLFLOW_LOGGING_LEVEL": "WARNING", "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
                     "TRANSFORMERS_VERBOSITY": "error",
                     "HF_HUB_DISABLE_PROGRESS_BARS": "1"}   # transformers' and the hub's bars


def start_up(state: str | os.PathLike | None) -> Path:
    """The one start-up of an entry point; the state folder's path (not created)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")   # offline clusters: no phoning home
    folder = state_path(state)
    confine_caches(folder)   # kernel and font caches under the state folder, not $HOME / $TMPDIR
    return folder


# The command line's collector thresholds. Python's default young-generation threshold (700 allocations)
# makes importing the training stack (torch, transformers, TRL, MLflow: a heap growing to ~5*10^5 objects)
# run 8 full collections, 1.1 of its 4.7 CPU-s, and each later full collection walks that whole heap again.
# At 10,000 none runs during the import; cycles made while training are still found, by fewer young
# collections. Measured on `grpolab run experiments/smoke.yaml` (2 cores): 7.4 CPU-s in the process at
# the default, 5.4 with these thresholds and the stack frozen (freeze_long_lived_objects).
COLLECTOR_THRESHOLDS = (10_000, 10, 10)


def pace_collector() -> None:
    """The command line's: the process's cyclic collector runs at COLLECTOR_THRESHOLDS."""
    gc.set_threshold(*COLLECTOR_THRESHOLDS)


def freeze_long_lived_objects() -> None:
    """In a process grpolab owns, once the training stack is loaded (or after a worker's first row):
    what is alive now (torch, transformers, TRL, MLflow and their caches, ~10^6 objects) lives to the
    process's end, so it is moved out of the collector's reach (``gc.freeze``). The full collection
    the trainer runs at the start and end of every ``train()`` (accelerate's ``free_memory``) then
    walks only a row's own objects: 0.36 s of a ~6 s toy row before, ~0 after (2 cores)."""
    gc.collect()
    gc.freeze()


def quiet_process() -> None:
    """The command line's: quiet libraries for the rest of the process (a user's own setting wins)."""
    for name, value in QUIET_ENVIRONMENT.items():
        os.environ.setdefault(name, value)
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)


@contextlib.contextmanager
def quiet_run():
    """The API's, for the duration of a run: no per-file progress bars from transformers (loading
    weights, writing shards) or MLflow (artifact transfers), and no transformers FutureWarnings
    about TRL's own arguments; the caller's settings are restored afterwards."""
    import transformers
    bars = transformers.utils.logging.is_progress_bar_enabled()
    previous = os.environ.get("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR")
    os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = "false"
    transformers.utils.logging.disable_progress_bar()
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=FutureWarning, module="transformers")
            yield
    finally:
        if bars:
            transformers.utils.logging.enable_progress_bar()
        if previous is None:
            os.environ.pop("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", None)
        else:
            os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = previous
