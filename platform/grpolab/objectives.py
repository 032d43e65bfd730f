"""The one objective function: a study metric of one run's history, so the results table, the
trial value Optuna stores and the pruner's intermediate reports can never disagree.

A history is the held-out evals so far ``{step: {eval key: value}}`` and the training curves so
far ``{key: [(step, value), ...]}``. With the whole run it gives the trial value (what tables
show); with the history up to an eval step it gives the intermediate value the pruner compares
across trials at that step:

    final:<eval key>            value at the latest eval step
    auc:<eval key>              trapezoid area under the eval curve / its step span
                                (the step-weighted mean; one eval point: that value)
    tail:<train key>            mean of the curve's finite points in the last quarter of the
                                steps seen, i.e. at steps > 3/4 of the latest step (at least the
                                latest point)
    steps_to:<eval key>>=<x>    first eval step whose value is >= x; inf if none yet (censored)
    tokens_to:<eval key>>=<x>   tokens/cumulative at that step (the last point logged at or
                                before it; 0 if reached at step 0, an error if no point);
                                inf if not reached
"""

from __future__ import annotations

import math

from .errors import ConfigError
from .study_config import parse_threshold


def objective_value(metric: str, evals: dict[int, dict], curves: dict[str, list]) -> float:
    agg, _, key = metric.partition(":")
    if agg in ("final", "auc", "steps_to", "tokens_to") and not evals:
        raise ConfigError(f"metric {metric!r}: the run has no held-out evaluation yet")
    steps = sorted(evals)
    if agg in ("final", "auc"):
        series = _eval_series(metric, key, evals, steps)
    if agg == "final":
        return series[-1]
    if agg == "auc":
        if len(steps) < 2:
            return series[0]
        area = sum((b - a) * (va + vb) / 2 for a, b, va, vb in zip(steps, steps[1:], series, series[1:]))
        return area / (steps[-1] - steps[0])
    if agg in ("steps_to", "tokens_to"):
        name, threshold = parse_threshold(key)
        values = _eval_series(metric, name, evals, steps)
        reached = next((s for s, v in zip(steps, values) if v >= threshold), None)
        if reached is None:
            return math.inf
        if agg == "steps_to":
            return float(reached)
        if reached == 0:
            return 0.0   # reached before any training: no token generated for it
        tokens = [v for s, v in sorted(curves.get("tokens/cumulative", [])) if s <= reached]
        if not tokens:   # never 0 by default: 0 would be the best value a minimised objective can take
            raise ConfigError(f"metric {metric!r}: the run logged no tokens/cumulative point up to step {reached}")
        return float(tokens[-1])
    if agg == "tail":
        return tail_mean(metric, key, curves)
    raise ConfigError(f"metric {metric!r}: unknown aggregation {agg!r}; valid: final, auc, tail, steps_to, tokens_to")


def _eval_series(metric: str, key: str, evals: dict[int, dict], steps: list[int]) -> list[float]:
    """The held-out values of ``key`` at ``steps``; a key some eval lacks is a config error naming it."""
    for step in steps:
        if key not in evals[step]:
            raise ConfigError(f"metric {metric!r}: the held-out eval at step {step} has no key {key!r}; "
                              f"available: {', '.join(sorted(evals[step])) or 'none'}")
    return [float(evals[s][key]) for s in steps]


def tail_mean(metric: str, key: str, curves: dict[str, list]) -> float:
    points = sorted((s, v) for s, v in curves.get(key, []) if v is not None and math.isfinite(v))
    if not points:
        raise ConfigError(f"metric {metric!r}: the run logged no finite {key!r} point")
    last = points[-1][0]
    window = [v for s, v in points if s > 0.75 * last] or [points[-1][1]]
    return sum(window) / len(window)
