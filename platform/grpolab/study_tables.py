"""Results tables from Optuna storage (never by re-running anything).

Ladder: per rung the mean over seeds with a 95 % t-interval, the paired delta against the
previous rung with its verdict (``ladder_verdicts``), and the published value beside it. Missing
or failed rows are shown, never dropped. A threshold metric that was never reached counts at the
run's budget, a lower bound (``censored`` counts them), as in claims.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from .errors import ConfigError
from .study_config import StudyConfig, load_study


def mean_ci(values: list[float], level: float = 0.95) -> tuple[float, float]:
    """(mean, half-width of the two-sided t-interval); half-width NaN with fewer than 2 values."""
    n = len(values)
    if n == 0:
        return math.nan, math.nan
    if not all(math.isfinite(v) for v in values):   # e.g. a threshold never reached (censored)
        return (math.inf if any(v == math.inf for v in values) else math.nan), math.nan
    from .inference import t_interval
    mean, low, high, _ = t_interval(values, level)   # zero spread (up to rounding): NaN, as in verdicts
    return mean, (high - low) / 2


def ladder_rows(study, cfg: StudyConfig, objective: int = 0) -> pd.DataFrame:
    """One row per (rung, seed) with its latest outcome: value, state and MLflow run id; the
    tidy frame (tidy.study_results) of one objective."""
    from .tidy import study_results
    tidy = study_results(study, cfg)
    rows = tidy[tidy.metric == cfg.objectives[objective].metric]
    return rows[["rung", "seed", "state", "value", "run_id", "trial"]].reset_index(drop=True)


def ladder_table(rows: pd.DataFrame, cfg: StudyConfig, objective: int = 0, state: Path | None = None,
                 level: float = 0.95, looks: int = 1) -> pd.DataFrame:
    """Per rung: mean over seeds with its t-interval (censored values at their budget, counted),
    the paired delta against the previous rung with the verdict's interval, label, reason, Holm
    p-value, familywise label and mechanism check (``ladder_verdicts``: the same numbers the dashboard shows)."""
    from .ladder_verdicts import rung_verdicts
    from .verdicts import family_text, holm_text
    rows, verdicts = rung_verdicts(rows, cfg, objective, state, level, looks)
    out = []
    for i, rung in enumerate(cfg.rungs):
        done = rows[(rows.rung == i) & (rows.state == "COMPLETE")]
        mean, half = mean_ci(list(done.value))
        entry = {"rung": rung.name, "n": len(done), "censored": int(done.censored.sum()), "mean": mean, "ci95": half,
                 "delta_vs_prev": math.nan, "delta_ci95": math.nan, "published": rung.published, "verdict_vs_prev": "",
                 "why": "", "tests": "", "familywise": "", "mechanism": "",
                 "missing_or_failed": ", ".join(f"s{s}:{st}" for s, st in
                                                rows[(rows.rung == i) & (rows.state != "COMPLETE")][["seed", "state"]].values)}
        if i > 0:
            rv = verdicts[i - 1]
            prev = rows[(rows.rung == i - 1) & (rows.state == "COMPLETE")].set_index("seed").value
            mine = done.set_index("seed").value
            deltas = [mine[s] - prev[s] for s in sorted(set(mine.index) & set(prev.index))]
            entry["delta_vs_prev"], entry["delta_ci95"] = mean_ci(deltas, level)   # = the verdict's t-interval
            if rv.verdict is None:
                entry["verdict_vs_prev"] = f"not judged: no smallest_effect for {cfg.objectives[objective].metric}"
            else:
                v = rv.verdict
                entry["verdict_vs_prev"] = v.verdict + ("" if rv.direction == "increase" else " (tested: drop)")
                entry["why"] = "; ".join([v.reason, *v.diagnostics])
                entry["tests"] = holm_text(v)
                entry["familywise"] = family_text(v)
            mech = rung.mechanism
            entry["mechanism"] = ("none named" if mech is None else
                                  f"{mech.metric} = {rv.mechanism_value:.3g} (floor {mech.at_least:g}, {mech.rows} rung's rows)")
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


def ladder_caption(cfg: StudyConfig, objective: int, state: Path | None, level: float = 0.95, study=None) -> str:
    """What the ladder table states: its metric, intervals, family, censoring, deviations and
    pre-registration status (every output of a ladder's verdicts carries it)."""
    from .preregistration import ladder_fields, ladder_key, status
    obj = cfg.objectives[objective]
    delta = f"{obj.smallest_effect:g}" if obj.smallest_effect is not None else "not set (no verdicts)"
    caption = (f"{cfg.name}: {obj.metric} ({obj.direction}), mean over seeds {list(cfg.seeds)} with 95% t-interval; "
               f"verdict_vs_prev: each rung against the previous one on paired seeds, {100 * level:.4g}% paired "
               f"t-interval of the difference (delta_ci95 its half-width"
               + ("" if level == 0.95 else "; the per-look level of seeds added until decided")
               + f"), smallest effect that matters {delta} (labels: README); family: the judged rungs of this "
               f"table; tests: each rung's H0 (mean 0) p with Holm's adjustment over the family; familywise: the "
               f"label on the Bonferroni interval at 1 - 0.05/(rungs x looks), all of which hold together with "
               f"probability >= 95%; threshold metrics never reached count at the budget (a lower bound, column "
               f"censored) and make a rung's label inconclusive")
    if cfg.published_source:
        caption += f"; published: {cfg.published_source}"
    caption += f"; deviations: {'; '.join(d.text() for d in cfg.deviations) or 'none'}"
    if study is not None:
        from .studies import sequential_note
        caption += f"; {sequential_note(study)}" if sequential_note(study) else ""
    if state is not None:
        file_cfg = load_study(cfg.path)   # registered as written, without seeds added on demand
        caption += f"; {status(state, ladder_key(file_cfg), ladder_fields(file_cfg), cfg.deviations)}"
    return caption


def load_results(path: str, state: Path, storage_url: str | None):
    from .studies import create_or_load, default_storage, with_added_seeds
    cfg = load_study(path)
    study = create_or_load(cfg, storage_url or default_storage(state))
    return with_added_seeds(cfg, study), study


def render(frame: pd.DataFrame, fmt: str, caption: str = "") -> str:
    if fmt == "csv":
        return frame.to_csv(index=False)
    if fmt == "latex":
        from .tables import latex_table
        return latex_table(frame, caption)
    return markdown_table(frame)


def markdown_table(frame: pd.DataFrame) -> str:
    """A pipe table whose cells cannot break it: ``|`` escaped, newlines as spaces."""
    def clean(v):
        return v.replace("|", "\\|").replace("\n", " ") if isinstance(v, str) else v
    return frame.map(clean).rename(columns=clean).to_markdown(index=False, floatfmt=".4g")


def study_table(path: str, state: Path, storage_url: str | None, fmt: str = "markdown", metric: str | None = None) -> str:
    cfg, study = load_results(path, state, storage_url)
    names = [o.metric for o in cfg.objectives]
    if metric is not None and metric not in names:
        raise ConfigError(f"--metric: {metric!r} is not an objective of {cfg.name}; valid: {', '.join(names)}")
    index = names.index(metric) if metric else 0
    metric = names[index]
    if cfg.kind == "ladder":
        from .studies import verdict_plan
        level, looks, _ = verdict_plan(study)
        frame = ladder_table(ladder_rows(study, cfg, index), cfg, index, state, level, looks)
        caption = ladder_caption(cfg, index, state, level, study)
    else:
        frame = search_table(study, cfg)
        caption = f"{cfg.name}: {len(frame)} trials, objectives {[o.metric for o in cfg.objectives]}"
    body = render(frame, fmt, caption)
    if fmt == "markdown" and cfg.kind == "ladder":
        from .scaling import scaling_section   # asymptote A and efficiency C_mid beside the table
        body += scaling_section(state, path, storage_url)
    return body if fmt != "markdown" else f"{caption}\n\n{body}"
