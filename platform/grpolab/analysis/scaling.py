"""Compute-scaling fits (as in the ScaleRL work): a saturating curve per method,
R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B), fitted per seed, its parameters' intervals over seeds.

Detail: docs/studies.md, "grpolab.analysis.scaling".
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
from scipy import stats
from scipy.optimize import curve_fit

from grpolab.analysis.claim_runs import run_history
from grpolab.errors import ConfigError

PARAMS = ("R0", "A", "C_mid", "B")
# the compute axis a fit can use -> the curve that measures it (cumulative, at each optimizer step)
COMPUTE_AXES = {"tokens": "tokens/cumulative", "accelerator_hours": "time/accelerator_hours"}


def saturating(compute, r0, asymptote, c_mid, steepness):
    """R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B)."""
    compute = np.asarray(compute, dtype=float)
    return r0 + (asymptote - r0) / (1.0 + (c_mid / compute) ** steepness)


def fit_curve(compute, values, r0: float | None = None) -> dict | None:
    """Least-squares fit of one curve; ``r0`` pins R0 (e.g. the measured step-0 value).
    Returns {R0, A, C_mid, B} or None when the fit does not converge or has too few points."""
    c, r = np.asarray(compute, float), np.asarray(values, float)
    keep = (c > 0) & np.isfinite(r)
    c, r = c[keep], r[keep]
    free = 3 if r0 is not None else 4
    if len(c) < free + 1:
        return None
    span_r = max(float(np.ptp(r)), 1e-3)
    a0, mid0 = float(r.max()), float(np.median(c))
    lower = [-np.inf, -np.inf, float(c.min()) / 100, 0.1]
    upper = [np.inf, np.inf, float(c.max()) * 100, 10.0]
    guess = [float(r.min()) - 0.1 * span_r, a0, mid0, 1.5]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if r0 is None:
                p, _ = curve_fit(saturating, c, r, p0=guess, bounds=(lower, upper), maxfev=20000)
                return dict(zip(PARAMS, map(float, p)))
            p, _ = curve_fit(lambda x, a, m, b: saturating(x, r0, a, m, b), c, r, p0=guess[1:],
                             bounds=(lower[1:], upper[1:]), maxfev=20000)
            return dict(zip(PARAMS, [float(r0), *map(float, p)]))
    except (RuntimeError, ValueError):
        return None


@dataclass(frozen=True)
class SeedFit:
    params: dict          # name -> (mean over seeds, 95 % t half-width; NaN with < 2 fits)
    fitted: int           # seeds whose fit converged
    seeds: int
    extrapolation_error: float = math.nan   # mean |R(C) - R| past the prefix (NaN: fitted on every point)


def check_window(skip_below: float, fit_upto: float) -> None:
    if not (isinstance(skip_below, (int, float)) and skip_below >= 0):
        raise ConfigError(f"skip_below: the compute below which points are left out, >= 0; got {skip_below!r}")
    if not (isinstance(fit_upto, (int, float)) and 0 < fit_upto <= 1):
        raise ConfigError(f"fit_upto: the fraction of each run's compute the fit uses, in (0, 1]; got {fit_upto!r}")


def fit_seeds(curves: dict, pin_r0: bool = True, level: float = 0.95, skip_below: float = 0.0,
              fit_upto: float = 1.0) -> SeedFit:
    """curves: seed -> (compute array, value array), compute 0 holding R0. One fit per seed on its
    points with C >= ``skip_below`` and C <= ``fit_upto`` x max C (docs/studies.md, "grpolab.analysis.scaling"); each
    parameter's mean and t-interval over the seeds that converged."""
    check_window(skip_below, fit_upto)
    fits, errors = [], []
    for compute, values in curves.values():
        c, r = np.asarray(compute, float), np.asarray(values, float)
        r0 = float(r[c == 0][0]) if pin_r0 and (c == 0).any() else None
        late = c >= skip_below
        prefix = late & (c <= fit_upto * c.max())
        fit = fit_curve(c[prefix], r[prefix], r0)
        if fit is not None:
            fits.append(fit)
            rest = late & ~prefix & np.isfinite(r)
            if rest.any():
                errors.append(float(np.abs(saturating(c[rest], *fit.values()) - r[rest]).mean()))
    params = {}
    for name in PARAMS:
        xs = np.array([f[name] for f in fits])
        if len(xs) == 0:
            params[name] = (math.nan, math.nan)
        elif len(xs) == 1:
            params[name] = (float(xs[0]), math.nan)
        else:
            half = stats.t.ppf(0.5 + level / 2, len(xs) - 1) * xs.std(ddof=1) / math.sqrt(len(xs))
            params[name] = (float(xs.mean()), float(half))
    return SeedFit(params, len(fits), len(curves), float(np.mean(errors)) if errors else math.nan)


def scaling_frame(state, study_path: str, storage_url: str | None, metric: str = "eval/pass_at_1",
                  compute: str = "tokens", skip_below: float = 0.0, fit_upto: float = 1.0):
    """Per rung of a ladder: the saturating fit of ``metric`` against ``compute`` (a key of
    ``COMPUTE_AXES``: its cumulative curve at each eval step; the step-0 eval is R0), one fit per
    seed, with ``fit_seeds``' window. None when the runs have too few eval points for a fit (fewer
    than 4 after step 0, or runs that did not measure the axis)."""
    import pandas as pd
    from mlflow.tracking import MlflowClient

    from grpolab.analysis.ablation import ladder_rows, load_results
    from grpolab.tracking.recorder import tracking_uri
    if compute not in COMPUTE_AXES:
        raise ConfigError(f"compute axis {compute!r}: valid are {', '.join(COMPUTE_AXES)}")
    check_window(skip_below, fit_upto)
    cfg, study = load_results(study_path, state, storage_url)
    if not cfg.study_kind.paired_rungs:
        return None
    rows = ladder_rows(study, cfg)
    client, out = MlflowClient(tracking_uri(state)), []
    for i, rung in enumerate(cfg.rungs):
        curves = {}
        for row in rows[(rows.rung == i) & (rows.state == "COMPLETE")].itertuples():
            curve = _compute_curve(client, row.run_id, metric, COMPUTE_AXES[compute])
            if curve is None:
                return None
            curves[row.seed] = curve
        fit = fit_seeds(curves, skip_below=skip_below, fit_upto=fit_upto)
        entry = {"rung": rung.name, "fitted/seeds": f"{fit.fitted}/{fit.seeds}"}
        for name in ("A", "C_mid", "B"):
            mean, half = fit.params[name]
            entry[name], entry[f"{name} ci95"] = mean, half
        if fit_upto < 1:
            entry["extrapolation |error|"] = fit.extrapolation_error
        out.append(entry)
    return pd.DataFrame(out)


def _compute_curve(client, run_id: str, metric: str, axis: str) -> tuple[list, list] | None:
    """(compute, metric) at a run's eval steps, compute 0 at step 0; None with fewer than 5 points."""
    h = run_history(client, run_id, {axis})
    points = h.train_curves.get(axis, [])

    def compute_at(step: int) -> float:   # spent up to and including this optimizer step
        seen = [v for s, v in points if s <= step]
        return seen[-1] if seen else math.nan
    steps = sorted(s for s in h.evals if s == 0 or math.isfinite(compute_at(s)))
    if len(steps) < 5:
        return None
    return [0.0 if s == 0 else compute_at(s) for s in steps], [h.evals[s][metric] for s in steps]
