"""Ablation tables as data, from Optuna storage (never by re-running anything).

Ladder: per rung the mean over seeds with a 95 % t-interval, the paired delta against the
previous rung with its verdict (``ladder_verdicts``), and the published value beside it. Missing
or failed rows are shown, never dropped. A threshold metric that was never reached counts at the
run's budget, a lower bound (``censored`` counts them), as in claims."""

from __future__ import annotations

import math
from pathlib import Path
from typing import NamedTuple

import pandas as pd

from grpolab.studies.definition import StudyConfig, load_study


def mean_ci(values: list[float], level: float = 0.95) -> tuple[float, float]:
    """(mean, half-width of the two-sided t-interval); half-width NaN with fewer than 2 values."""
    n = len(values)
    if n == 0:
        return math.nan, math.nan
    if not all(math.isfinite(v) for v in values):   # e.g. a threshold never reached (censored)
        return (math.inf if any(v == math.inf for v in values) else math.nan), math.nan
    from grpolab.analysis.inference import t_interval
    mean, low, high, _ = t_interval(values, level)   # zero spread (up to rounding): NaN, as in verdicts
    return mean, (high - low) / 2


def ladder_rows(study, cfg: StudyConfig, objective: int = 0) -> pd.DataFrame:
    """One row per (rung, seed) with its latest outcome: value, state and MLflow run id; the
    tidy frame (tidy.study_results) of one objective."""
    from grpolab.analysis.tidy import study_results
    tidy = study_results(study, cfg)
    rows = tidy[tidy.metric == cfg.objectives[objective].metric]
    return rows[["rung", "seed", "state", "value", "run_id", "trial"]].reset_index(drop=True)


class SequentialLooks(NamedTuple):
    """How a ladder's verdicts were planned (``studies.verdict_plan``, ``studies.plan_looks``): each
    look's level, the number of planned looks, and their seed counts (() without a sequential plan)."""
    level: float = 0.95
    looks: int = 1
    plan: tuple[int, ...] = ()


def ladder_table(rows: pd.DataFrame, cfg: StudyConfig, objective: int = 0, state: Path | None = None,
                 sequential: SequentialLooks = SequentialLooks(), draws: dict | None = None) -> pd.DataFrame:
    """Per rung: mean over seeds with its t-interval (censored values at their budget, counted),
    the paired delta against the previous rung with the verdict's interval, label, reason, Holm
    p-value, familywise label, precondition check and regime gates (``ladder_verdicts``: the same numbers the
    dashboard shows); a fragile label is marked (``strength``).
    ``sequential.plan``: a sequential plan's looks; the delta then uses the paired seeds its verdict judged
    (n and mean count every complete row). ``draws``: a re-scored metric's evaluation draws per rung.
    An ``equal_tokens`` column (the secondary line at equal generated tokens) only where a rung has one."""
    from grpolab.analysis.equal_tokens import equal_tokens_text
    from grpolab.analysis.ladder_verdicts import rung_verdicts
    from grpolab.analysis.strength import shown_label
    from grpolab.analysis.verdicts import family_text, holm_text
    level = sequential.level
    rows, verdicts = rung_verdicts(rows, cfg, objective, state, sequential, draws)
    out = []
    for i, rung in enumerate(cfg.rungs):
        done = rows[(rows.rung == i) & (rows.state == "COMPLETE")]
        mean, half = mean_ci(list(done.value))
        entry = {"rung": rung.name, "n": len(done), "censored": int(done.censored.sum()), "mean": mean, "ci95": half,
                 "pairs": math.nan, "delta_vs_prev": math.nan, "delta_ci95": math.nan, "published": rung.published, "verdict_vs_prev": "",
                 "why": "", "tests": "", "familywise": "", "label": "", "family_label": "", "fragile": False,
                 "family_fragile": False, "precondition": "",
                 "regime": "",
                 "missing_or_failed": ", ".join(f"s{s}:{st}" for s, st in
                                                rows[(rows.rung == i) & (rows.state != "COMPLETE")][["seed", "state"]].values)}
        if i > 0:
            rv = verdicts[i - 1]
            prev = rows[(rows.rung == i - 1) & (rows.state == "COMPLETE")].set_index("seed").value
            mine = done.set_index("seed").value
            deltas = [mine[s] - prev[s] for s in rv.seeds]
            entry["delta_vs_prev"], entry["delta_ci95"] = mean_ci(deltas, level)   # = the verdict's t-interval
            entry["pairs"] = len(deltas)   # below n where seeds on demand stopped adding this rung's pairs
            if rv.verdict is None:
                entry["verdict_vs_prev"] = f"not judged: no smallest_effect for {cfg.objectives[objective].metric}"
            else:
                v = rv.verdict
                entry["verdict_vs_prev"] = shown_label(v) + ("" if rv.direction == "increase" else " (tested: drop)")
                entry["why"] = "; ".join([v.reason, *v.diagnostics])
                entry["tests"] = holm_text(v)
                entry["familywise"] = family_text(v)
                entry["label"], entry["family_label"] = v.verdict, v.family_label   # as judged, unmarked
                entry["fragile"], entry["family_fragile"] = bool(v.fragile), bool(v.family_fragile)
            mech = rung.mechanism
            entry["precondition"] = ("none named" if mech is None else f"{mech.metric} = {rv.mechanism_value:.3g} "
                                     f"(floor {mech.at_least:g}, {mech.rows} rung's rows)")
            entry["regime"] = "none declared" if rv.regime is None else f"{rv.regime.status}: {rv.regime.text()}"
            entry["equal_tokens"] = equal_tokens_text(rv.equal_tokens, rv.direction)
        out.append(entry)
    frame = pd.DataFrame(out)
    # a ladder none of whose rungs generated more tokens than its control keeps its columns as they were
    column = frame.get("equal_tokens", pd.Series(dtype=str)).fillna("")
    return frame.assign(equal_tokens=column) if column.any() else frame.drop(columns="equal_tokens", errors="ignore")


def search_table(study, cfg: StudyConfig) -> pd.DataFrame:
    """One row per trial (the tidy frame, one column per objective), best first. A pruned
    trial's value is its last intermediate report (Optuna's convention)."""
    from grpolab.analysis.tidy import STUDY_COLUMNS, study_results
    tidy = study_results(study, cfg)
    if tidy.empty:
        return pd.DataFrame()
    params = [c for c in tidy.columns if c not in STUDY_COLUMNS]
    wide = tidy.pivot(index="trial", columns="metric", values="value")
    first = tidy.drop_duplicates("trial").set_index("trial")
    frame = first[["state", *params, "run_id"]].join(wide[[o.metric for o in cfg.objectives]]).reset_index()
    return frame.sort_values(cfg.objectives[0].metric, ascending=cfg.objectives[0].direction == "minimize")


def load_results(path: str, state: Path, storage_url: str | None, create: bool = True):
    """(study config with any seeds added on demand, Optuna study); with ``create=False`` a study
    its storage does not hold yet is (config, None) and nothing is written."""
    from grpolab.studies.storage import create_or_load, default_storage, load_existing, with_added_seeds
    cfg = load_study(path)
    storage = storage_url or default_storage(state)
    study = create_or_load(cfg, storage) if create else load_existing(cfg, storage)
    return (cfg, None) if study is None else (with_added_seeds(cfg, study), study)
