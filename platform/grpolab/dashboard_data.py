"""Dashboard data extraction: MLflow and Optuna -> pandas DataFrames. No figures here, no
training: dashboards only read what runs and studies stored."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from mlflow.tracking import MlflowClient

from .tracking import clean_metric_name, tracking_uri

RUN_LABEL_TAGS = ("grpolab.rung_name", "grpolab.method")


def _client(state: Path) -> MlflowClient:
    return MlflowClient(tracking_uri(state))


def study_runs(state: Path, study_name: str) -> pd.DataFrame:
    """Finished child runs of a study: run_id, label (rung name or method), order, seed."""
    client = _client(state)
    runs = client.search_runs(
        [e.experiment_id for e in client.search_experiments()],
        filter_string=f"tags.`grpolab.study` = '{study_name}' and attributes.status = 'FINISHED'",
        max_results=5000)
    rows = [{"run_id": r.info.run_id, "label": _label(r), "order": _order(r),
             "seed": int(r.data.tags.get("grpolab.seed", 0))} for r in runs if "optuna.trial_number" in r.data.tags]
    return pd.DataFrame(rows, columns=["run_id", "label", "order", "seed"])


def chosen_runs(state: Path, run_ids: list[str]) -> pd.DataFrame:
    """A hand-picked set of runs (any experiment), labelled by method."""
    client = _client(state)
    rows = []
    for i, run_id in enumerate(run_ids):
        r = client.get_run(run_id)
        rows.append({"run_id": run_id, "label": _label(r), "order": i, "seed": int(r.data.tags.get("grpolab.seed", 0))})
    return pd.DataFrame(rows, columns=["run_id", "label", "order", "seed"])


def _label(run) -> str:
    tags = run.data.tags
    if "grpolab.rung_name" in tags:
        return tags["grpolab.rung_name"]
    if "optuna.trial_number" in tags and "grpolab.rung" not in tags:
        return f"trial {tags['optuna.trial_number']}"
    return tags.get("grpolab.method", run.info.run_name)


def _order(run) -> int:
    tags = run.data.tags
    return int(tags.get("grpolab.rung", tags.get("optuna.trial_number", 0)))


def metric_curves(state: Path, runs: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
    """Long table: run_id, label, order, seed, metric, step, value."""
    client = _client(state)
    rows = []
    for run in runs.itertuples():
        for metric in metrics:
            for m in client.get_metric_history(run.run_id, clean_metric_name(metric)):
                rows.append((run.run_id, run.label, run.order, run.seed, metric, m.step, m.value))
    return pd.DataFrame(rows, columns=["run_id", "label", "order", "seed", "metric", "step", "value"])


def band_summary(curves: pd.DataFrame) -> pd.DataFrame:
    """Per (label, metric, step): mean over seeds and the min-max band."""
    if curves.empty:
        return pd.DataFrame(columns=["label", "order", "metric", "step", "mean", "low", "high", "n"])
    g = curves.groupby(["label", "order", "metric", "step"])["value"]
    out = g.agg(mean="mean", low="min", high="max", n="count").reset_index()
    return out.sort_values(["order", "metric", "step"])


def ablation_frame(state: Path, study_path: str, storage_url: str | None) -> pd.DataFrame | None:
    """The ladder's results table (mean, CI, paired delta, published), or None for a search."""
    from .results import ladder_rows, ladder_table, load_results
    cfg, study = load_results(study_path, state, storage_url)
    if cfg.kind != "ladder":
        return None
    return ladder_table(ladder_rows(study, cfg), cfg)
