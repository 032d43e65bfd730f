"""Closing the MLflow runs of a row that was handed back, and linking an interrupted run to the
run that restarted its row."""

from __future__ import annotations

import logging
from pathlib import Path

from grpolab.signals import raise_if_signalled
from grpolab.studies.rows import PARENT_RUN_ATTR

log = logging.getLogger(__name__)


def end_trial_runs(study, state: Path, trial, reason: str, status: str = "KILLED",
                   from_statuses: tuple = ("RUNNING", "FINISHED", "SCHEDULED")) -> None:
    """End every MLflow run of a trial that never reported: RUNNING ones, and a FINISHED one
    whose worker died before telling (its value was never counted, and must not be shown)."""
    from mlflow.tracking import MlflowClient

    from grpolab.tracking.recorder import tracking_uri
    parent = study.user_attrs.get(PARENT_RUN_ATTR)
    client = MlflowClient(tracking_uri(state))
    runs = []
    if parent:
        experiment = client.get_run(parent).info.experiment_id
        runs = client.search_runs([experiment], filter_string=(
            f"tags.`mlflow.parentRunId` = '{parent}' and tags.`optuna.trial_number` = '{trial.number}'"))
    for run in runs:
        if run.info.status in from_statuses:
            client.set_tag(run.info.run_id, "grpolab.error", reason)
            client.set_terminated(run.info.run_id, status=status)


def link_restart(state: Path, previous_run_id: str, new_run_id: str) -> None:
    """Tag the interrupted run with the run that restarted its row (the new run carries
    ``grpolab.restart_of``): the history of a row reads both ways."""
    from grpolab.tracking.recorder import client_for
    try:
        client_for(state).set_tag(previous_run_id, "grpolab.restarted_as", new_run_id)
    except Exception as exc:  # noqa: BLE001 - the old run may live in a store no longer reachable
        raise_if_signalled(exc)   # a SIGTERM the store's code turned into an error is still the signal
        log.warning("could not tag run %s as restarted: %s", previous_run_id, exc)
