"""The one state folder: MLflow database and artifacts, Optuna storage, model cache, run outputs.

Default ``./grpolab-state``; ``$GRPOLAB_STATE`` or the CLI's ``--state`` override it.
``$MLFLOW_TRACKING_URI`` overrides the embedded MLflow store.
"""

from __future__ import annotations

import os
from pathlib import Path

from grpolab.errors import ConfigError


def state_path(override: str | os.PathLike | None = None) -> Path:
    """Where the state folder is, without creating it (checks that must write nothing)."""
    return Path(override or os.environ.get("GRPOLAB_STATE") or "grpolab-state")


def state_dir(override: str | os.PathLike | None = None) -> Path:
    path = state_path(override)
    path.mkdir(parents=True, exist_ok=True)
    return path


# Libraries that cache compiled kernels or fonts under $HOME or $TMPDIR unless told otherwise:
# torch's inductor (a folder in $TMPDIR even for eager CPU runs), triton and CUDA's JIT (GPU),
# matplotlib's font cache (MLflow figures). A user's own setting of these variables wins.
CACHE_VARIABLES = {"TORCHINDUCTOR_CACHE_DIR": "torchinductor", "TRITON_CACHE_DIR": "triton",
                   "CUDA_CACHE_PATH": "cuda", "MPLCONFIGDIR": "matplotlib"}


def confine_caches(state: str | os.PathLike) -> None:
    """Point the libraries' caches into ``<state>/cache`` (created when a library writes), so
    that a command writes nothing outside the state folder. Call before torch is imported."""
    root = Path(state).resolve() / "cache"
    for variable, folder in CACHE_VARIABLES.items():
        os.environ.setdefault(variable, str(root / folder))


def check_state_folder(override: str | os.PathLike | None = None) -> Path:
    """The state folder as a command that writes there needs it: a folder (or a path where one can
    be created) this process can write into. Checked before anything is read or written, so that a
    regular file or a read-only folder is answered in one line, not by a traceback mid-run."""
    path = state_path(override)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"--state: {str(path)!r} is a file, not a folder; give a folder (created if missing), "
                          "or set $GRPOLAB_STATE")
    existing = path.absolute()
    while not existing.exists() and existing != existing.parent:   # where the folder would be created
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"--state: {str(path)!r} cannot be created: {str(existing)!r} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"--state: {str(existing)!r} is not writable by this user; give a folder you can write to")
    return path
