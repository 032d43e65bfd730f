"""The one state folder: MLflow database and artifacts, Optuna storage, model cache, run outputs.

Default ``./grpolab-state``; ``$GRPOLAB_STATE`` or the CLI's ``--state`` override it.
``$MLFLOW_TRACKING_URI`` overrides the embedded MLflow store.
"""

from __future__ import annotations

import os
from pathlib import Path


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
