"""Resuming a re-queued row: whether its interrupted run may be continued (the runner picks its
newest complete checkpoint)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from grpolab.experiment.checkpoint_files import CONFIG, config_change, find_resumable, run_dir
from grpolab.studies.holders import WORKER_ATTR, heartbeat_grace, holder_gone, host_identity
from grpolab.studies.rows import RUN_ATTR

RESUMES_ATTR = "resumes_run_id"   # on a re-queued row: the MLflow run of its interrupted trial


def previous_holder_gone(study, run_id: str) -> bool:
    """Whether every earlier holder of ``run_id`` is gone (``holders.holder_gone``), this process
    excepted. A run whose old holder may still write to it (e.g. a hung worker on another host) is
    never continued by a second one."""
    here, now, grace = host_identity(), time.time(), heartbeat_grace()
    for trial in study.get_trials(deepcopy=False):
        worker = trial.user_attrs.get(WORKER_ATTR)
        if trial.user_attrs.get(RUN_ATTR) != run_id or worker is None:
            continue
        if worker.get("host") == here and int(worker["pid"]) == os.getpid():
            continue
        if holder_gone(trial, here, now, grace) is None:
            return False
    return True


def checkpoint_to_resume(previous_run_id: str | None, state: Path, resolved: dict | None = None):
    """The interrupted row's run to continue, ``previous_run_id``, when it has a complete checkpoint
    and the row's definition is unchanged; else None. None restarts the row in a fresh MLflow run
    (the old run is already KILLED and tagged ``grpolab.restarted_as``); a run id makes the worker
    continue it (same run id, contiguous steps). Either way only the new trial can report the row's
    value."""
    if not previous_run_id:   # a first try: nothing to resume
        return None
    if find_resumable(state, previous_run_id) is None:
        return None
    stored = run_dir(state, previous_run_id) / CONFIG
    if resolved is not None and (not stored.exists() or
                                 config_change(json.loads(stored.read_text()), resolved) is not None):
        return None   # the row's definition changed (--accept-changed): restart it, never resume across it
    return previous_run_id
