"""Results tables from Optuna storage (never by re-running anything).

Ladder: per rung the mean over seeds with a 95 % t-interval, the paired delta against the
previous rung (mean of per-seed differences, t-interval over the seeds both rungs completed),
and the published value beside it. Missing or failed rows are shown, never dropped. ``finite``
counts seeds with a finite value: a threshold metric that was never reached is inf, and then
the mean is inf and no interval or delta is claimed.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
from scipy import stats

from .errors import ConfigError
from .study_config import StudyConfig, load_study


def mean_ci(values: list[float], level: float = 0.95) -> tuple[float, float]:
    """(mean, half-width of the two-sided t-interval); half-width NaN with fewer than 2 values."""
    n = len(values)
    if n == 0:
        return math.nan, math.nan
    if not all(math.isfinite(v) for v in values):   # e.g. a threshold never reached (censored)
        return (math.inf if any(v == math.inf for v in values) else math.nan), math.nan
    mean = sum(values) / n
    if n < 2:
        return mean, math.nan
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, stats.t.ppf(0.5 + level / 2, n - 1) * sd / math.sqrt(n)


def ladder_rows(study, cfg: StudyConfig, objective: int = 0) -> pd.DataFrame:
    """One row per (rung, seed) with its latest outcome: value, state and MLflow run id; the
    tidy frame (tidy.study_results) of one objective."""
    from .tidy import study_results
    tidy = study_results(study, cfg)
    rows = tidy[tidy.metric == cfg.objectives[objective].metric]
    return rows[["rung", "seed", "state", "value", "run_id", "trial"]].reset_index(drop=True)


def ladder_table(rows: pd.DataFrame, cfg: StudyConfig) -> pd.DataFrame:
    out = []
    for i, rung in enumerate(cfg.rungs):
        mine = rows[(rows.rung == i) & (rows.state == "COMPLETE")].set_index("seed")["value"]
        mean, half = mean_ci(list(mine))
        entry = {"rung": rung.name, "n": len(mine), "finite": int(sum(math.isfinite(v) for v in mine)),
                 "mean": mean, "ci95": half,
                 "delta_vs_prev": math.nan, "delta_ci95": math.nan, "published": rung.published,
                 "missing_or_failed": ", ".join(f"s{s}:{st}" for s, st in
                                                rows[(rows.rung == i) & (rows.state != "COMPLETE")][["seed", "state"]].values)}
        if i > 0:
            prev = rows[(rows.rung == i - 1) & (rows.state == "COMPLETE")].set_index("seed")["value"]
            common = sorted(set(mine.index) & set(prev.index))
            deltas = [mine[s] - prev[s] for s in common]
            entry["delta_vs_prev"], entry["delta_ci95"] = mean_ci(deltas) if all(map(math.isfinite, deltas)) else (math.nan, math.nan)
            from .verdicts import ladder_step   # "this rung improves on the previous one", paired seeds, BCa
            verdict, direction = ladder_step(rows, cfg, i)
            entry["delta_bca95"] = f"[{verdict.low:.3g}, {verdict.high:.3g}]" if verdict.n > 1 else "--"
            entry["verdict_vs_prev"] = verdict.verdict + ("" if direction == "increase" else " (tested: drop)")
            entry["seeds_for_power"] = verdict.seeds_needed
        out.append(entry)
    return pd.DataFrame(out)


def search_table(study, cfg: StudyConfig) -> pd.DataFrame:
    """One row per trial (the tidy frame, one column per objective), best first. A pruned
    trial's value is its last intermediate report (Optuna's convention)."""
    from .tidy import STUDY_COLUMNS, study_results
    tidy = study_results(study, cfg)
    if tidy.empty:
        return pd.DataFrame()
    params = [c for c in tidy.columns if c not in STUDY_COLUMNS]
    wide = tidy.pivot(index="trial", columns="metric", values="value")
    first = tidy.drop_duplicates("trial").set_index("trial")
    frame = first[["state", *params, "run_id"]].join(wide[[o.metric for o in cfg.objectives]]).reset_index()
    return frame.sort_values(cfg.objectives[0].metric, ascending=cfg.objectives[0].direction == "minimize")


def load_results(path: str, state: Path, storage_url: str | None):
    from .studies import create_or_load, default_storage
    cfg = load_study(path)
    study = create_or_load(cfg, storage_url or default_storage(state))
    return cfg, study


def render(frame: pd.DataFrame, fmt: str, caption: str = "") -> str:
    if fmt == "csv":
        return frame.to_csv(index=False)
    if fmt == "latex":
        from .tables import latex_table
        return latex_table(frame, caption)
    return frame.to_markdown(index=False, floatfmt=".4g")


def study_table(path: str, state: Path, storage_url: str | None, fmt: str = "markdown", metric: str | None = None) -> str:
    cfg, study = load_results(path, state, storage_url)
    names = [o.metric for o in cfg.objectives]
    if metric is not None and metric not in names:
        raise ConfigError(f"--metric: {metric!r} is not an objective of {cfg.name}; valid: {', '.join(names)}")
    index = names.index(metric) if metric else 0
    metric = names[index]
    if cfg.kind == "ladder":
        frame = ladder_table(ladder_rows(study, cfg, index), cfg)
        caption = (f"{cfg.name}: {metric}, mean over seeds {list(cfg.seeds)} with 95% t-interval; verdict_vs_prev: "
                   f"does this rung improve on the previous one (paired seeds, 95% BCa bootstrap of the paired "
                   f"difference, smallest effect {cfg.smallest_effect:g}, < 5 seeds = underpowered)")
        if cfg.published_source:
            caption += f"; published: {cfg.published_source}"
    else:
        frame = search_table(study, cfg)
        caption = f"{cfg.name}: {len(frame)} trials, objectives {[o.metric for o in cfg.objectives]}"
    body = render(frame, fmt, caption)
    if fmt == "markdown" and cfg.kind == "ladder":
        from .scaling import scaling_section   # asymptote A and efficiency C_mid beside the table
        body += scaling_section(state, path, storage_url)
    return body if fmt != "markdown" else f"{caption}\n\n{body}"
