"""Metric windows of finished runs, read back from MLflow: what claims and ladder verdicts judge.

Windows go through the studies' own objective function (``studies.objectives.objective_value``, which
delegates to ``objectives.objective_value``: the one function behind tables, trial values and
the pruner), on a RunResult rebuilt from the run's MLflow history, so a claim and a table never
disagree on what ``tail:entropy`` means. Only the two within-run windows a claim may add
(``head:``, ``start:``) are computed here.
"""

from __future__ import annotations

import math

from grpolab.errors import ConfigError
from grpolab.studies.objectives import censored_bound, curve_window, objective_value
from grpolab.tracking.held_out import EVAL_KEYS, RunHistory
from grpolab.tracking.naming import clean_metric_name


def train_keys(metrics) -> set[str]:
    """The training curves that the windows ``metrics`` read (tail:/head: keys)."""
    return {m.split(":", 1)[1] for m in metrics if m and m.split(":", 1)[0] in ("tail", "head")}


def run_history(client, run_id: str, keys: set[str]) -> RunHistory:
    evals: dict[int, dict] = {}
    for key in EVAL_KEYS:
        for m in client.get_metric_history(run_id, clean_metric_name(key)):
            evals.setdefault(m.step, {})[key] = m.value
    curves = {}
    for key in set(keys) | {"tokens/cumulative"}:
        curves[key] = sorted((m.step, m.value) for m in client.get_metric_history(run_id, clean_metric_name(key)))
    return RunHistory(evals, curves)


def window_value(metric: str, history: RunHistory) -> float:
    """A metric window of one run: the shared objective function, plus head:/start: windows."""
    agg, _, key = metric.partition(":")
    if agg == "head":   # the mirror of tail:
        head = curve_window(key, history.train_curves, "head")
        return sum(head) / len(head) if head else math.nan
    if agg == "start":
        return history.start_eval[key]
    try:
        return objective_value(metric, history.evals, history.train_curves)
    except ConfigError:   # e.g. no finite point of the curve (nothing clipped): no value for this seed
        return math.nan


def censored_value(metric: str, value: float, history: RunHistory) -> tuple[float, bool]:
    """(value, censored): a threshold never reached is counted at the run's budget, a lower bound
    (``objectives.censored_bound``); the caller states what that can overturn."""
    if metric.split(":", 1)[0] in ("steps_to", "tokens_to") and value == math.inf:
        return censored_bound(metric, history.evals, history.train_curves), True
    return value, False


def mean_window(metric: str, histories: list[RunHistory]) -> float:
    """Mean over runs of a window's finite values (NaN when none): a mechanism's measured value."""
    values = [v for v in (window_value(metric, h) for h in histories) if math.isfinite(v)]
    return sum(values) / len(values) if values else math.nan
