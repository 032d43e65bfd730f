"""Dashboard data extraction: MLflow and Optuna -> pandas DataFrames. No figures here, no
training: dashboards only read what runs and studies stored."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from mlflow.tracking import MlflowClient

from grpolab.studies.definition import load_study
from grpolab.errors import ConfigError
from grpolab.tracking.naming import TOKENS_METRIC, X_AXES
from grpolab.tracking.recorder import client_for, tracking_uri


def _client(state: Path) -> MlflowClient:
    """A reader's client: a state folder without an MLflow store is an error, and reading never
    creates one (nor the folder, nor its artifact-location mark)."""
    uri = tracking_uri(state)
    if uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///"):]).exists():
        raise ConfigError(f"--state: no MLflow store in {Path(state).resolve()} (no mlflow.db): nothing to show; "
                          "point --state (or $GRPOLAB_STATE) at the folder your runs were recorded in")
    return client_for(state)


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
    """A hand-picked set of runs (any experiment), one line each, labelled ``run name · id prefix``
    (two runs of one method and seed stay two lines); the method is in the ``method`` column."""
    from mlflow.exceptions import MlflowException
    client = _client(state)
    rows = []
    for i, run_id in enumerate(run_ids):
        try:
            r = client.get_run(run_id)
        except MlflowException:
            raise ConfigError(f"--runs: no MLflow run {run_id!r} in {client.tracking_uri}") from None
        rows.append({"run_id": run_id, "label": f"{r.info.run_name} · {run_id[:8]}", "order": i,
                     "seed": int(r.data.tags.get("grpolab.seed", 0)), "method": r.data.tags.get("grpolab.method", "")})
    return pd.DataFrame(rows, columns=["run_id", "label", "order", "seed", "method"])


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


def metric_curves(state: Path, runs: pd.DataFrame, metrics: list[str], x: str = "steps") -> pd.DataFrame:
    """Long table: run_id, label, order, seed, metric, step, value, x.

    ``x`` is the step, the run's cumulative completion tokens at that step (``tokens/cumulative``
    at the last rollout at or before the step; 0 before the first), its accelerator-hours
    (``time/accelerator_hours``, the same way), or the seconds between the
    point's MLflow timestamp and the run's first point among these metrics (the held-out
    evaluation at step 0, after the warm start: model preparation is not counted)."""
    if x not in X_AXES:
        raise ConfigError(f"dashboard x: unknown axis {x!r}; valid: {', '.join(X_AXES)}")
    from grpolab.analysis.tidy import run_curves
    client = _client(state)
    columns = ["run_id", "label", "order", "seed", "metric", "step", "value", "x"]
    tidy = run_curves(client, list(runs.run_id), metrics)   # the same frame grpolab.curves returns
    if tidy.empty:
        return pd.DataFrame(columns=columns)
    labelled = tidy.drop(columns=["seed", "rung"]).merge(runs[["run_id", "label", "order", "seed"]], on="run_id")
    frames = [_with_x(client, run_id, part, x) for run_id, part in labelled.groupby("run_id", sort=False)]
    return pd.concat(frames, ignore_index=True)[columns]


def _with_x(client, run_id: str, part: pd.DataFrame, x: str) -> pd.DataFrame:
    if part.empty or x == "steps":
        return part.assign(x=part.step.astype(float))
    if x == "seconds":
        return part.assign(x=(part.timestamp - part.timestamp.min()) / 1000.0)
    curve = {"tokens": TOKENS_METRIC, "accelerator_hours": "time/accelerator_hours"}[x]   # cumulative, per step
    tokens = pd.DataFrame([(m.step, m.value) for m in client.get_metric_history(run_id, curve)],
                          columns=["step", "x"]).sort_values("step")
    if tokens.empty:
        raise ConfigError(f"dashboard x: {x} needs the {curve!r} curve, which run {run_id} did not log")
    merged = pd.merge_asof(part.sort_values("step"), tokens, on="step", direction="backward")
    return merged.assign(x=merged.x.fillna(0.0))


def band_summary(curves: pd.DataFrame) -> pd.DataFrame:
    """Per (label, metric, step): mean over seeds, the min-max band, and the mean x (steps,
    tokens or seconds) over the seeds at that step."""
    if curves.empty:
        return pd.DataFrame(columns=["label", "order", "metric", "step", "mean", "low", "high", "n", "x"])
    if "x" not in curves:
        curves = curves.assign(x=curves.step.astype(float))
    g = curves.groupby(["label", "order", "metric", "step"])
    out = g.agg(mean=("value", "mean"), low=("value", "min"), high=("value", "max"), n=("value", "count"),
                x=("x", "mean")).reset_index()
    return out.sort_values(["order", "metric", "step"])


def ablation_frame(state: Path, study_path: str, storage_url: str | None) -> pd.DataFrame | None:
    """The ladder's results table (mean, CI, paired delta, published), or None for a search;
    ``attrs["level"]`` is the verdicts' level, the level of its ``delta_ci95`` t-interval, and
    ``attrs["caption"]`` the caption the printed table carries (``tables.ladder_view``)."""
    from grpolab.report.tables import ladder_view
    if not load_study(study_path).study_kind.paired_rungs:
        return None
    table, caption, level = ladder_view(study_path, state, storage_url)
    table.attrs["level"], table.attrs["caption"] = level, caption
    return table
