"""Where a run lives in MLflow: its ids, the UI addresses of its experiment's runs and of the run,
and the `mlflow ui` command that serves a local store. Torch-free, so a command that only reports
a location (a study's coordinator, its last line) does not import the training stack."""

from __future__ import annotations

from pathlib import Path

MLFLOW_UI_PORT = 5000   # `mlflow ui` / `mlflow server` default


def where(run_id: str, state: Path) -> dict:
    """MLflow coordinates of a run: id, experiment, tracking URI and the UI addresses (the
    experiment's runs page: MLflow 3's UI otherwise opens on its GenAI overview)."""
    from grpolab.tracking.recorder import client_for, is_server_uri
    client = client_for(state)
    run = client.get_run(run_id)
    uri = client.tracking_uri
    eid = run.info.experiment_id
    base = uri.rstrip("/") if is_server_uri(uri) else f"http://127.0.0.1:{MLFLOW_UI_PORT}"
    out = {"run_id": run_id, "experiment_id": eid, "tracking_uri": uri,
           "experiment_runs_url": f"{base}/#/experiments/{eid}/runs",
           "run_url": f"{base}/#/experiments/{eid}/runs/{run_id}"}
    if not is_server_uri(uri):
        out["ui_command"] = f"mlflow ui --backend-store-uri {uri} --port {MLFLOW_UI_PORT}"
    return out
