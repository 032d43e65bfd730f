"""The one tidy shape of results: one row per (rung, seed, step, metric) with its value and the
MLflow run it came from. Tables, dashboards and the Python API (``grpolab.results``,
``grpolab.curves``) are all built from these two frames, so they can never disagree.

study_results: a study's rows from Optuna storage only. One row per (row or trial, objective):
    ``value`` is the study metric (``objectives.objective_value`` of the whole run, the value
    Optuna stores), ``step`` the optimizer step it summarises up to (the row's ``train.steps``;
    a pruned search trial: its last reported step). Rows that did not complete are kept, with
    ``value`` NaN and their ``state`` (MISSING, FAIL, RUNNING, ...).
run_curves: runs' metric histories from MLflow, one row per logged point.
"""

from __future__ import annotations

import math

import pandas as pd
from optuna.trial import TrialState

from grpolab.errors import ConfigError
from grpolab.experiment.config import TrainCfg
from grpolab.experiment.overrides import apply_overrides, as_overrides
from grpolab.studies.rows import OUTCOME_ATTR, RUN_ATTR, deciding_trial, row_key, row_trials
from grpolab.tracking.naming import clean_metric_name

TIDY_COLUMNS = ["rung", "seed", "step", "metric", "value", "run_id"]
STUDY_COLUMNS = [*TIDY_COLUMNS, "rung_name", "state", "trial"]
CURVE_COLUMNS = [*TIDY_COLUMNS, "timestamp"]


def study_results(study, cfg) -> pd.DataFrame:
    """The tidy frame of a ladder (every rung x seed, latest outcome) or a search (every trial
    that reported an outcome or still runs; its sampled parameters as extra columns)."""
    rows = _ladder_records(study, cfg) if cfg.study_kind.paired_rungs else _search_records(study, cfg)
    frame = pd.DataFrame(rows)
    if frame.empty:
        return pd.DataFrame(columns=STUDY_COLUMNS)
    extra = [c for c in frame.columns if c not in STUDY_COLUMNS]   # search parameters
    return frame[STUDY_COLUMNS + extra]


def _planned_steps(experiment: dict) -> int:
    return int((experiment.get("train") or {}).get("steps", TrainCfg.steps))


def _objective_records(cfg, trial, base: dict, steps: int | None) -> list[dict]:
    """One record per objective of one trial (or of a row without a trial)."""
    done = trial is not None and trial.state in (TrialState.COMPLETE, TrialState.PRUNED) and trial.values
    if trial is not None and trial.state == TrialState.PRUNED and trial.intermediate_values:
        steps = max(trial.intermediate_values)   # Optuna's value of a pruned trial: its last report
    state = trial.state.name if trial is not None else "MISSING"
    run_id = trial.user_attrs.get(RUN_ATTR, "") if trial is not None else ""
    number = trial.number if trial is not None else None
    return [{**base, "step": steps if done else math.nan, "metric": o.metric,
             "value": float(trial.values[i]) if done else math.nan, "run_id": run_id, "state": state,
             "trial": number} for i, o in enumerate(cfg.objectives)]


def _ladder_records(study, cfg) -> list[dict]:
    by_row = row_trials(study)
    records = []
    for rung, seed in cfg.rows():
        trial = deciding_trial(by_row.get(row_key(rung, seed), []))
        steps = _planned_steps(cfg.rung_experiment(rung, seed))
        base = {"rung": rung, "seed": seed, "rung_name": cfg.rungs[rung].name}
        records += _objective_records(cfg, trial, base, steps)
    return records


def _search_records(study, cfg) -> list[dict]:
    records = []
    for t in study.get_trials(deepcopy=False):
        if t.user_attrs.get(OUTCOME_ATTR) is None and t.state != TrialState.RUNNING:
            continue
        steps = _planned_steps(apply_overrides(cfg.base, as_overrides(t.params)))
        # the seed a search trial trains with: its number cycles through the study's seeds (studies/trials.py)
        base = {"rung": None, "seed": cfg.seeds[t.number % len(cfg.seeds)], "rung_name": None, **t.params}
        records += _objective_records(cfg, t, base, steps)
    return records


def run_curves(client, run_ids: list[str], metrics: list[str] | None = None) -> pd.DataFrame:
    """Every logged point of ``metrics`` (default: every metric each run logged) for each run:
    rung and seed from the run's ``grpolab.rung`` / ``grpolab.seed`` tags (NaN when it has none),
    the metric under the name asked for, its MLflow ``timestamp`` (ms). Unknown run ids raise."""
    from mlflow.exceptions import MlflowException

    frames = []
    for run_id in run_ids:
        try:
            run = client.get_run(run_id)
        except MlflowException:
            raise ConfigError(f"run id: no MLflow run {run_id!r} in {client.tracking_uri}") from None
        tags = run.data.tags
        wanted = sorted(run.data.metrics) if metrics is None else list(metrics)
        points = [(name, m.step, m.value, m.timestamp) for name in wanted for m in
                  sorted(client.get_metric_history(run_id, clean_metric_name(name)), key=lambda m: (m.step, m.timestamp))]
        part = pd.DataFrame(points, columns=["metric", "step", "value", "timestamp"])
        frames.append(part.assign(run_id=run_id, rung=_int_tag(tags, "grpolab.rung"),
                                  seed=_int_tag(tags, "grpolab.seed")))
    frames = [f for f in frames if not f.empty]
    if not frames:
        return pd.DataFrame(columns=CURVE_COLUMNS)
    return pd.concat(frames, ignore_index=True)[CURVE_COLUMNS]   # runs and metrics in the order asked


def _int_tag(tags: dict, key: str) -> float:
    return int(tags[key]) if key in tags else math.nan
