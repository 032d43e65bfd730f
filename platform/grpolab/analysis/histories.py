"""Histories of finished runs read back from MLflow: what claims and ladder verdicts judge.

Every metric value is computed by ``studies.objectives`` (the one module behind tables, trial
values, the pruner and claims) on a RunHistory rebuilt from the run's MLflow history, so a claim
and a table never disagree on what ``tail:entropy`` means.
"""

from __future__ import annotations

import math

from grpolab.studies.objectives import window_value
from grpolab.tracking.held_out import CURVE_SET_KEY, EVAL_KEYS, RunHistory
from grpolab.tracking.naming import clean_metric_name


def train_keys(metrics) -> set[str]:
    """The training curves that the windows ``metrics`` read (tail:/head:/run: keys)."""
    return {m.split(":", 1)[1] for m in metrics if m and m.split(":", 1)[0] in ("tail", "head", "run")}


def run_history(client, run_id: str, keys: set[str], evals: bool = True) -> RunHistory:
    """The run's held-out evaluations (with the final one's value on the curve's prompts) and ``keys``'
    curves (with tokens/cumulative); ``evals=False``: the curves only (adding curves to a history
    already read)."""
    read: dict[int, dict] = {}
    for key in (*EVAL_KEYS, CURVE_SET_KEY) if evals else ():
        for m in client.get_metric_history(run_id, clean_metric_name(key)):
            read.setdefault(m.step, {})[key] = m.value
    curves = {}
    for key in set(keys) | ({"tokens/cumulative"} if evals else set()):
        curves[key] = sorted((m.step, m.value) for m in client.get_metric_history(run_id, clean_metric_name(key)))
    return RunHistory(read, curves)


def mean_window(metric: str, histories: list[RunHistory]) -> float:
    """Mean over runs of a window's finite values (NaN when none): a mechanism's measured value."""
    values = [v for v in (window_value(metric, h) for h in histories) if math.isfinite(v)]
    return sum(values) / len(values) if values else math.nan
