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
import sys
import warnings
from pathlib import Path, PurePosixPath

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
_owned = {"process": False, "frozen": False, "modules_at_freeze": 0}


def own_process() -> None:
    """The command line's, when it is the process's entry point (``grpolab ...``; not ``main([...])``
    called by other code, whose process stays as its owner set it): the collector runs at
    IMPORT_THRESHOLDS until the training stack is loaded (freeze_training_stack), and the installed
    distributions are scanned once (packages_distributions_once)."""
    _owned["process"] = True
    gc.set_threshold(*IMPORT_THRESHOLDS)
    importlib.metadata.packages_distributions = packages_distributions_once


# importlib.metadata.packages_distributions() maps import names to distributions. Importing the stack
# asks for it twice (transformers caches one answer, TRL keeps another as a module constant), and each
# answer scans every installed distribution, turning every RECORD line of each wheel without
# top_level.txt into a path object (numpy, scipy, pandas, plotly: 0.7 CPU-s per scan on the 2-core test
# machine, 204 distributions). A process the command line owns scans once; on Python 3.11 it also reads
# RECORD as text and makes path objects only of its .py lines (0.1 s), by 3.11's rule (3.12 changed it:
# there the library's own scan runs, once). tests/ground/test_startup_packages.py compares both with the library.
_scanned: list = []


def packages_distributions_once() -> dict[str, list[str]]:
    """The first scan's mapping, in fresh lists for every caller (as the library gives)."""
    if not _scanned:
        _scanned.append(scan_packages_distributions() if sys.version_info[:2] == (3, 11)
                        else _LIBRARY_PACKAGES_DISTRIBUTIONS())
    return {name: list(projects) for name, projects in _scanned[0].items()}


_LIBRARY_PACKAGES_DISTRIBUTIONS = importlib.metadata.packages_distributions


def scan_packages_distributions(dists=None) -> dict[str, list[str]]:
    """{import name: [distribution names]} by Python 3.11's rule: a distribution's top_level.txt
    names, else for each ``.py`` file its RECORD lists, the path's first part (the module name itself
    for a file at the top), else (no RECORD) the library's own walk of the egg-info file lists.
    ``dists``: these distributions instead of the installed ones."""
    found = collections.defaultdict(list)
    for dist in importlib.metadata.distributions() if dists is None else dists:
        names = (dist.read_text("top_level.txt") or "").split()
        record = None if names else dist.read_text("RECORD")
        if not names and not record:
            names = importlib.metadata._top_level_inferred(dist)
        elif not names:
            files = (PurePosixPath(row[0]) for row in csv.reader(record.splitlines()) if row and row[0].endswith(".py"))
            names = {f.parts[0] if len(f.parts) > 1 else f.with_suffix("").name for f in files if f.suffix == ".py"}
        project = _project_name(dist)
        for name in names:
            found[name].append(project)
    return dict(found)


def _project_name(dist) -> str:
    """The metadata's Name header as the email parser reads it (leading blanks dropped), found
    without parsing the whole message; anything unusual (no Name line before the body, an empty or
    folded value) is left to the parser."""
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or ""
    for line in text.splitlines():
        if not line:
            break
        if line.startswith("Name:"):
            value = line[len("Name:"):].lstrip(" \t")
            if value:
                return value
            break
    return dist.metadata["Name"]


def freeze_training_stack() -> None:
    """Called once the training stack is imported, before a run makes objects of its own. In a process
    the command line owns, the first call collects, freezes what is alive (modules and their caches:
    they live to the process's end) and puts Python's thresholds back; every later collection walks
    only the rows' own objects. In any other process (the Python API, a notebook, tests) it does
    nothing: a test process freezes on its own (tests/conftest.py)."""
    if not _owned["process"] or _owned["frozen"]:
        return
    freeze_what_lives()
    gc.set_threshold(*_PYTHON_THRESHOLDS)
    _owned["frozen"] = True


def freeze_what_lives() -> None:
    """Collect, then move every object still alive out of the cyclic collector's reach (``gc.freeze``):
    no garbage is frozen, and what survives is module state that lives to the process's end."""
    gc.collect()
    gc.freeze()
    _owned["modules_at_freeze"] = len(sys.modules)


def imported_since_freeze() -> int:
    """Modules imported since ``freeze_what_lives`` last ran (all of them if it never ran)."""
    return len(sys.modules) - _owned["modules_at_freeze"]


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
