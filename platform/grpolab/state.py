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
