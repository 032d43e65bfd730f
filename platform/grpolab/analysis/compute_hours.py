"""Measured compute of a study's runs, read from their MLflow records (never re-run).

A run's accelerator-hours = processes x wall seconds of training / 3600: the tag
``grpolab.accelerator_hours`` a finished run carries, else the last ``time/accelerator_hours``
point of a run that stopped early (failed, killed, still running), else not measured (a run
from before the measurement, a row that never started). The tag ``grpolab.accelerator`` says
what the processes ran on: GPU, or CPU on a machine without one, and the column is named after it
(``GPU-hours``, ``CPU-hours``; ``GPU+CPU-hours`` when a study's runs mix both).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import NamedTuple

import pandas as pd

from grpolab.analysis.ablation import load_results

HOURS_NOTE = ("GPU-hours (CPU-hours where the runs trained on CPUs, GPU+CPU-hours where both): processes x wall "
              "seconds of training / 3600, summed over a row's runs from their MLflow records: time held, not the "
              "operating system's CPU time")

HOURS_TAG, KIND_TAG, HOURS_CURVE = "grpolab.accelerator_hours", "grpolab.accelerator", "time/accelerator_hours"
DEFAULT_JOURNAL = "optuna.journal"   # studies.storage.default_storage's file, named here without importing optuna


class RunHours(NamedTuple):
    hours: float   # NaN: not measured
    kind: str      # "GPU", "CPU", or "" when not measured


def run_hours(client, run_id: str) -> RunHours:
    """One run's measured accelerator-hours (module docstring)."""
    if not isinstance(run_id, str) or not run_id:   # a row that never started a run
        return RunHours(math.nan, "")
    data = client.get_run(run_id).data
    kind = data.tags.get(KIND_TAG, "")
    if HOURS_TAG in data.tags:
        return RunHours(float(data.tags[HOURS_TAG]), kind)
    if HOURS_CURVE in data.metrics:   # the latest point: the run stopped before its end tags
        return RunHours(float(data.metrics[HOURS_CURVE]), kind)
    return RunHours(math.nan, "")


def hours_label(kinds) -> str:
    """The column's name for the kinds of device the measured runs used."""
    kinds = sorted({k for k in kinds if k}, reverse=True)
    return f"{'+'.join(kinds) or 'GPU'}-hours"


def rows_hours(rows: pd.DataFrame, state) -> pd.DataFrame:
    """``rows`` (a ``run_id`` column) with ``hours`` and ``kind`` added, one MLflow read per run."""
    from grpolab.tracking.recorder import client_for
    client = client_for(state)
    measured = {run_id: run_hours(client, run_id) for run_id in rows.run_id.unique()}
    return rows.assign(hours=[measured[r].hours for r in rows.run_id], kind=[measured[r].kind for r in rows.run_id])


def add_hours_column(frame: pd.DataFrame, rows: pd.DataFrame, state, key: str = "rung") -> pd.DataFrame:
    """``frame`` (one row per rung, rungs in order) with the sum of its runs' measured hours as a
    column named by ``hours_label``; NaN for a rung none of whose runs was measured."""
    timed = rows_hours(rows, state)
    per_rung = timed.groupby(key).hours.sum(min_count=1)
    column = hours_label(timed.kind)
    return frame.assign(**{column: [per_rung.get(i, math.nan) for i in range(len(frame))]})


def add_run_hours(frame: pd.DataFrame, state) -> pd.DataFrame:
    """``frame`` (a ``run_id`` column: a search's trials) with each run's measured hours as a
    column named by ``hours_label``."""
    if frame.empty:
        return frame
    timed = rows_hours(frame, state)
    return frame.assign(**{hours_label(timed.kind): timed.hours})


class StudyHours(NamedTuple):
    hours: float      # the sum over the measured runs
    measured: int     # runs with a measurement
    runs: int         # runs the study has started
    label: str        # GPU-hours, CPU-hours, ...

    def text(self) -> str:
        return (f"measured so far: {self.hours:,.4g} {self.label} over {self.measured} of the {self.runs} runs "
                f"started (their MLflow records)")


def study_hours(path: str, state, storage_url: str | None) -> StudyHours | None:
    """The measured total of a study's runs so far; None when its storage holds no run yet
    (nothing is created or written)."""
    if storage_url is None and not (Path(state) / DEFAULT_JOURNAL).exists():
        return None   # no study has run in this state folder: opening the journal would create it
    from grpolab.analysis.tidy import study_results   # optuna: only once a study has run (--plan stays light)
    cfg, study = load_results(path, state, storage_url, create=False)
    if study is None:
        return None
    rows = study_results(study, cfg)
    rows = rows[rows.run_id != ""].drop_duplicates("run_id")
    if rows.empty:
        return None
    timed = rows_hours(rows, state)
    measured = timed.hours.notna()
    return StudyHours(float(timed.hours[measured].sum()), int(measured.sum()), len(timed),
                      hours_label(timed.kind))
