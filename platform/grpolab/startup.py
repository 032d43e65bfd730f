"""What every entry point (the command line, the Python API) does before its work: process
settings the libraries read when first used, library caches under the state folder, and quiet
libraries. The command line owns its process and sets them for good, before the libraries are
imported, so that no answer waits on an import; the API runs inside the caller's process and
restores the caller's settings afterwards. A process the command line owns also has its cyclic
collector paced while it loads the training stack (own_process, freeze_training_stack).
"""

from __future__ import annotations

import collections
import contextlib
import csv
import gc
import importlib.metadata
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


# Python's cyclic collector in a process the command line owns. At Python's default young-generation
# threshold (700 allocations) importing the training stack (torch, transformers, TRL, MLflow: a heap
# of ~5*10^5 objects) runs 8 full collections, 1.2-1.5 of its ~4.9 CPU-s, and every full collection
# after it (the trainer asks for one in each `train()`) walks that heap again. So the collector runs
# rarely while the process imports (no full collection), the stack is frozen (``gc.freeze``) once it is
# loaded, before a run makes objects of its own, and then Python's thresholds are back. A process that
# never trains (a coordinator of worker processes, `table`, `dashboard`) keeps the import pace: young
# garbage waits for 50,000 allocations, not 700. Measured on `grpolab run experiments/smoke.yaml`
# (2 idle cores, warm start cached, 3 runs each): 7.6 s wall before (median), 5.1 s after.
_PYTHON_THRESHOLDS = gc.get_threshold()
IMPORT_THRESHOLDS = (50_000, 10, 10)
_owned = {"process": False, "frozen": False}


def own_process() -> None:
    """The command line's, when it is the process's entry point (``grpolab ...``; not ``main([...])``
    called by other code, whose process stays as its owner set it): the collector runs at
    IMPORT_THRESHOLDS until the training stack is loaded (freeze_training_stack)."""
    _owned["process"] = True
    gc.set_threshold(*IMPORT_THRESHOLDS)
    importlib.metadata.packages_distributions = _packages_distributions_once


# importlib.metadata.packages_distributions() maps import names to distributions. Importing the stack
# asks for it twice (transformers caches one answer, TRL keeps another as a module constant), and each
# answer scans every installed distribution, parsing the RECORD of each wheel without top_level.txt
# into path objects (numpy, scipy, pandas, plotly: 0.7 CPU-s per scan on the 2-core test machine, 204
# distributions). A process the command line owns computes it once, reading RECORD as text (0.1 s):
# the same mapping (tests/test_startup_packages.py compares it with the standard library's).
_distributions: list = []


def _packages_distributions_once() -> dict[str, list[str]]:
    if not _distributions:
        _distributions.append(scan_packages_distributions())
    return _distributions[0]


def scan_packages_distributions() -> dict[str, list[str]]:
    """{import name: [distribution names]}, as ``importlib.metadata.packages_distributions()``: a
    distribution's top_level.txt names, else the first part of every ``.py`` path its RECORD lists
    (the module name itself for a top-level module file)."""
    found = collections.defaultdict(list)
    for dist in importlib.metadata.distributions():
        names = (dist.read_text("top_level.txt") or "").split()
        record = None if names else dist.read_text("RECORD")
        if not names and record is None:
            names = importlib.metadata._top_level_inferred(dist)   # no RECORD: the library's own walk
        elif not names:
            paths = (row[0] for row in csv.reader(record.splitlines()) if row)
            names = {path.partition("/")[0] if "/" in path else path[:-3] for path in paths if path.endswith(".py")}
        project = _project_name(dist)
        for name in names:
            found[name].append(project)
    return dict(found)


def _project_name(dist) -> str:
    """The metadata's Name header, read without parsing the whole message."""
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or ""
    for line in text.splitlines():
        if not line:
            break
        if line.startswith("Name:"):
            return line[len("Name:"):].strip()
    return dist.metadata["Name"]


def freeze_training_stack() -> None:
    """Called once the training stack is imported, before a run makes objects of its own. In a process
    the command line owns, the first call collects, freezes what is alive (modules and their caches:
    they live to the process's end) and puts Python's thresholds back; every later collection walks
    only the rows' own objects. In any other process (the Python API, a notebook, tests) it does
    nothing."""
    if not _owned["process"] or _owned["frozen"]:
        return
    gc.collect()
    gc.freeze()
    gc.set_threshold(*_PYTHON_THRESHOLDS)
    _owned["frozen"] = True


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
