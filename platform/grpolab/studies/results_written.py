"""Whether a study's end results (the tables and dashboard its front door puts on the parent run)
are written: the parent run's ``grpolab.results`` tag is ``pending`` from before the write until it
has succeeded, so a write that failed (or a coordinator killed during it) is written again by the
next run of the same command, with no row run again."""

from __future__ import annotations

import logging
from pathlib import Path

from grpolab.tracking.recorder import client_for

log = logging.getLogger(__name__)
RESULTS_TAG = "grpolab.results"   # "pending" until the end results are written, then "written"


def results_pending(state: Path, parent_run_id: str) -> bool:
    """Whether the parent run's end results were started and never finished."""
    return client_for(state).get_run(parent_run_id).data.tags.get(RESULTS_TAG) == "pending"


def write_results(publish, state: Path, parent_run_id: str, study_path: str, storage_url, echo) -> bool:
    """Call ``publish``; False (and an ``error:`` line saying how to write them again) when it fails.
    The recorded rows are never touched by a failed write."""
    client = client_for(state)
    client.set_tag(parent_run_id, RESULTS_TAG, "pending")
    try:
        publish(state, parent_run_id, study_path, storage_url)
    except Exception as exc:  # noqa: BLE001 - every row is recorded; only the tables and page are missing
        log.debug("writing the study's end results failed", exc_info=True)
        echo(f"error: the study's end results (tables, dashboard) were not written to its MLflow parent run "
             f"{parent_run_id} ({type(exc).__name__}: {exc}); every row is recorded: run the same command again "
             "to write them (no row runs again)")
        return False
    client.set_tag(parent_run_id, RESULTS_TAG, "written")
    return True
