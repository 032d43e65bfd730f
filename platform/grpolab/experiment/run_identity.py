"""Which MLflow run records a training run: a new one placed under a parent, or one resumed.
Kept apart from runner.py so that a study can name a row's run without loading the training stack."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RunIdentity:
    """The MLflow run a training run records into. All None: a new top-level run named
    ``<experiment name>-s<seed>``."""
    parent_run_id: str | None = None   # a study's parent run: the new run is its child
    extra_tags: dict | None = None     # tags beside the run's own (a study row's labels)
    run_name: str | None = None        # None: ``<experiment name>-s<seed>``
    resume_run_id: str | None = None   # continue this run from its newest complete checkpoint
