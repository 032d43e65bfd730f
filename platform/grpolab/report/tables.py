"""Results tables from Optuna storage (never by re-running anything).

Ladder: per rung the mean over seeds with a 95 % t-interval, the paired delta against the
previous rung with its verdict (``ladder_verdicts``), and the published value beside it. Missing
or failed rows are shown, never dropped. A threshold metric that was never reached counts at the
run's budget, a lower bound (``censored`` counts them), as in claims.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pandas as pd

from grpolab.analysis.ablation import SequentialLooks, ladder_rows, ladder_table, load_results, search_table
from grpolab.analysis.compute_hours import HOURS_NOTE, add_hours_column, add_run_hours
from grpolab.analysis.rescored import is_rescored, parse_rescored, rescored_rows
from grpolab.analysis.rescored_search import PickedTrials, rescored_trials
from grpolab.analysis.scaling import scaling_frame
from grpolab.analysis.strength import counts_text
from grpolab.analysis.verdicts import DECIDED
from grpolab.errors import ConfigError
from grpolab.report.ladder_caption import LadderCaption, caption_head, caption_lists, ladder_caption, latex_lists
from grpolab.studies.definition import StudyConfig


class LadderView(NamedTuple):
    frame: pd.DataFrame     # ladder_table
    caption: LadderCaption  # ladder_caption
    level: float          # the verdicts' (per-look) level


def ladder_view(path: str, state: Path, storage_url: str | None, objective: int = 0) -> LadderView:
    """A ladder's table and caption as every output shows them (printed table, MLflow tables,
    dashboard): the study's seeds with those added on demand, and its sequential plan."""
    from grpolab.studies.storage import plan_looks, verdict_plan
    cfg, study = load_results(path, state, storage_url)
    level, looks, _ = verdict_plan(study)
    rows = ladder_rows(study, cfg, objective)
    frame = ladder_table(rows, cfg, objective, state, SequentialLooks(level, looks, plan_looks(study)))
    frame = add_hours_column(frame, rows, state)   # each rung's measured GPU-hours (CPU-hours on a CPU machine)
    return LadderView(frame, ladder_caption(cfg, objective, state, level, study), level)


def answer_lines(frame: pd.DataFrame) -> list[str]:
    """One line per rung, the answer first: its label (marked *fragile* where the evaluation draw
    alone could cross its deciding bound), its paired effect on the previous rung with the interval
    the label was judged on, the paired seeds it used, the familywise label beside it, and its regime
    gates; a rung judged at equal generated tokens too has that secondary line after it. The first
    rung is the reference; a later rung with no paired seed yet says so, with its verdict and why."""
    lines = []
    for first, row in zip([True] + [False] * (len(frame) - 1), frame.itertuples(index=False)):
        seeds_n = f"{int(row.n)} seed{'s' if row.n != 1 else ''}"
        if first:
            lines.append(f"{row.rung}: reference, mean {row.mean:.3f} ({seeds_n})")
            continue
        if pd.isna(row.delta_vs_prev):
            lines.append(f"{row.rung}: {row.verdict_vs_prev or 'not judged'} ({row.why or 'no paired seed'}; {seeds_n})")
            continue
        seeds = f"{int(row.pairs)} paired seed{'s' if row.pairs != 1 else ''}"
        low, high = row.delta_vs_prev - row.delta_ci95, row.delta_vs_prev + row.delta_ci95
        interval = f"[{low:+.3f}, {high:+.3f}]" if not pd.isna(row.delta_ci95) else "[interval not measured]"
        family = ((row.family_label + (" (*fragile*)" if getattr(row, "family_fragile", False) else ""))
                  or ("not judged" if not row.label else f"not in the family ({row.label})"))
        lines.append(f"{row.rung}: {row.verdict_vs_prev or 'not judged'}, {row.delta_vs_prev:+.3f} {interval} ({seeds}); "
                     f"familywise: {family}; regime {row.regime}")
        if getattr(row, "equal_tokens", ""):   # a second line where the rung generated more tokens than its control
            lines.append(f"{row.rung}: {row.equal_tokens}")
    return lines


def answer_header(frame: pd.DataFrame, cfg: StudyConfig, objective: int = 0) -> str:
    """'k of 5 decided (f fragile), j familywise (g fragile)' (``DECIDED`` labels only: a regime
    that is absent or not measured, a precondition not met, decide nothing; fragile: ``strength``),
    and the smallest effect that matters beside the published increments of the rungs."""
    judged = frame[frame.label != ""]
    decided, family = judged[judged.label.isin(DECIDED)], judged[judged.family_label.isin(DECIDED)]
    flag = (lambda rows, col: int(rows[col].astype(bool).sum()) if col in rows else 0)
    counts = counts_text(len(decided), flag(decided, "fragile"), len(family), flag(family, "family_fragile"), len(judged))
    obj = cfg.objectives[objective]
    if obj.smallest_effect is None:
        return counts
    published = [r.published for r in cfg.rungs]
    steps = [f"{b - a:+g}" for a, b in zip(published, published[1:]) if a is not None and b is not None]
    beside = (f" beside the published increments {', '.join(steps)}"
              + (f" ({cfg.published_source})" if cfg.published_source else "")) if steps else ""
    return f"{counts}; smallest effect that matters {obj.smallest_effect:g} of {obj.metric}{beside}"


def render(frame: pd.DataFrame, fmt: str, caption: str | LadderCaption = "") -> str:
    """The table as csv, LaTeX or markdown. A ladder's caption puts its design above the table and
    its dated deviations and column notes after it; the csv, which has no caption, carries the
    deviations in a column (after the re-scored ``metric`` column where there is one)."""
    ladder = isinstance(caption, LadderCaption)
    if fmt == "csv":
        if ladder:
            frame = frame.copy()
            frame.insert(int("metric" in frame), "deviations", "; ".join(caption.deviation_lines()))
        return frame.to_csv(index=False)
    if fmt == "latex":
        if not ladder:
            return latex_table(frame, caption)
        return latex_table(frame, caption_head(caption).replace("\n", "; ")) + latex_lists(caption, escape_latex)
    return markdown_table(frame)


def markdown_table(frame: pd.DataFrame) -> str:
    """A pipe table whose cells cannot break it: ``|`` escaped, newlines as spaces."""
    def clean(v):
        return v.replace("|", "\\|").replace("\n", " ") if isinstance(v, str) else v
    return frame.map(clean).rename(columns=clean).to_markdown(index=False, floatfmt=".4g")


def rescored_view(cfg: StudyConfig, study, state: Path, storage_url: str | None, metric: str) -> tuple[LadderView, StudyConfig]:
    """A ladder's table (``load_results``' cfg and study) under a re-scored metric (``analysis.rescored``),
    and the study config whose one objective it is: the same verdicts and intervals as ``ladder_view``, its caption first saying what
    was re-scored and how. The csv's first column names it too (it has no caption)."""
    from grpolab.studies.storage import plan_looks, verdict_plan
    picked = rescored_rows(ladder_rows(study, cfg), cfg, state, metric, cfg.path, storage_url)
    level, looks, _ = verdict_plan(study)
    frame = ladder_table(picked.rows, picked.cfg, 0, state, SequentialLooks(level, looks, plan_looks(study)), picked.draws)
    frame = add_hours_column(frame, picked.rows, state)
    frame.insert(0, "metric", f"{picked.cfg.objectives[0].metric} (re-scored: {picked.settings})")
    caption = ladder_caption(picked.cfg, 0, state, level, study)
    caption = caption._replace(design=f"{picked.description}. {caption.design}")
    return LadderView(frame, caption, level), picked.cfg


def rescored_search_view(cfg: StudyConfig, study, state: Path, storage_url: str | None, metric: str) -> PickedTrials:
    """A search's trials (``search_table``, with each trial's measured GPU-hours) under a re-scored
    metric (``analysis.rescored_search``); the csv's first column names it, as a ladder's does."""
    trials = study.get_trials(deepcopy=False)
    pruned_at = {t.number: max(t.intermediate_values) for t in trials if t.intermediate_values}   # the last report
    picked = rescored_trials(add_run_hours(search_table(study, cfg), state), cfg, state, metric, cfg.path, storage_url,
                             pruned_at)
    picked.frame.insert(0, "metric", f"{parse_rescored(metric).label} (re-scored: {picked.settings})")
    return picked


def study_table(path: str, state: Path, storage_url: str | None, fmt: str = "markdown", metric: str | None = None,
                scaling: dict | None = None) -> str:
    """The printed table of a study; ``scaling``: the scaling fit's compute axis and window
    (``scaling_frame``'s compute, skip_below, fit_upto); ``metric``: an objective, or a re-scored
    metric (``analysis.rescored``)."""
    cfg, study = load_results(path, state, storage_url)
    names = [o.metric for o in cfg.objectives]
    if metric is not None and metric not in names and not is_rescored(metric):
        raise ConfigError(f"--metric: {metric!r} is not an objective of {cfg.name}; valid: {', '.join(names)}, "
                          "or a re-scored one: rescored:eval/<benchmark>/<score> (docs/studies.md)")
    index = names.index(metric) if metric in names else 0
    if is_rescored(metric) and not cfg.study_kind.paired_rungs:
        frame, caption = rescored_search_view(cfg, study, state, storage_url, metric)[:2]
    elif is_rescored(metric):   # cfg: the study with the re-scored metric as its one objective
        (frame, caption, level), cfg = rescored_view(cfg, study, state, storage_url, metric)
    elif cfg.study_kind.paired_rungs:
        frame, caption, level = ladder_view(path, state, storage_url, index)
    else:
        frame = add_run_hours(search_table(study, cfg), state)   # each trial's measured GPU-hours
        caption = f"{cfg.name}: {len(frame)} trials, objectives {[o.metric for o in cfg.objectives]}; {HOURS_NOTE}"
    if is_rescored(metric) and fmt != "csv":   # the caption says it; the csv carries it in its first column
        frame = frame.drop(columns="metric")
    body = render(frame, fmt, caption)
    if fmt != "markdown":
        return body
    if not cfg.study_kind.paired_rungs:
        return f"{caption}\n\n{body}"
    body += "\n\n" + caption_lists(caption)   # the dated deviations and the column notes, after the table
    body += scaling_section(state, path, storage_url, **(scaling or {}))   # asymptote A and efficiency C_mid
    answer = "\n".join(f"- {line}" for line in answer_lines(frame))   # the answer first, the details below
    return (f"{cfg.name}: {answer_header(frame, cfg, index)}. Each rung's label, effect on the previous rung and its "
            f"{100 * level:.4g} % interval, paired seeds used, familywise label, regime gates\n{answer}\n\n"
            f"{caption_head(caption)}\n\n{body}")


def latex_table(frame: pd.DataFrame, caption: str = "", float_format: str = "{:.3g}") -> str:
    """A booktabs LaTeX table (``\\usepackage{booktabs}``). Cells and column names are escaped
    (``%``, ``_``, ``&``, ``#`` ...); NaN is ``--``; the caption is escaped the same way."""
    return frame.to_latex(index=False, escape=True, na_rep="--", float_format=float_format.format,
                          caption=escape_latex(caption) if caption else None)


def escape_latex(text: str) -> str:
    """Text mode escaping (pandas escapes cells itself, not the caption)."""
    return "".join(LATEX_SPECIALS.get(ch, ch) for ch in text)


def scaling_section(state, study_path: str, storage_url: str | None, compute: str = "tokens",
                    skip_below: float = 0.0, fit_upto: float = 1.0) -> str:
    """Markdown shown beside a ladder's table, or '' when no fit is possible."""
    frame = scaling_frame(state, study_path, storage_url, compute=compute, skip_below=skip_below, fit_upto=fit_upto)
    if frame is None or frame.empty:
        return ""
    axis = {"tokens": "generated tokens", "accelerator_hours": "measured accelerator-hours"}[compute]
    window = (f"; points with C < {skip_below:g} left out" if skip_below else "") + (
        f"; fitted on C <= {fit_upto:g} x each run's largest C, the extrapolation's mean |error| checked on the rest"
        if fit_upto < 1 else "")
    return (f"\nCompute scaling (ScaleRL-style): R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B), C = {axis}, "
            f"R = held-out pass@1, R0 = the step-0 value; one fit per seed, mean and 95% t-interval over seeds{window}\n\n"
            + frame.to_markdown(index=False, floatfmt=".4g"))


LATEX_SPECIALS = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}
