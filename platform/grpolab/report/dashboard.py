"""Dashboards: layout YAML + extracted DataFrames -> plotly figures -> one offline HTML file.

plotly.js is embedded once in the page by default (no CDN: clusters are often offline); with
``plotlyjs="shared"`` pages load one local copy beside them instead (~4.7 MB saved per page).
The layout's ``x`` (steps | tokens | seconds | accelerator_hours, also per panel) picks the curves' x-axis and
``seeds`` (band | lines | both) how seeds are shown. Ladders add the ablation chart and the
paired deltas (report/figures.py). Panels whose metric no run logged (e.g. KL with the KL
off) are not drawn; the page says which and why. A small self-check script records, after
rendering, what each panel holds and any script error, in ``<pre id="grpolab-self-check">``
(tests read it in Chromium).
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import NamedTuple

import pandas as pd
import plotly.graph_objects as go

from grpolab.analysis.ablation import load_results
from grpolab.analysis.side_by_side import final_step, side_by_side
from grpolab.errors import ConfigError
from grpolab.report import dashboard_data as data
from grpolab.report.figures import ablation_figure, curve_figure, paired_delta_figure, titled  # noqa: F401 (re-exported)
from grpolab.report.ladder_caption import caption_html
from grpolab.report.page import plotly_script, render_page
from grpolab.report.verdict_page import (  # rung verdicts: effect + paired t CI, and per-seed differences
    count_cell,
    ladder_sections,
)
from grpolab.report.layout import SEED_VIEWS, check_choice, load_layout  # noqa: F401 (load_layout re-exported)
from grpolab.studies.definition import load_study

COUNT_COLUMNS = ("n", "pairs", "censored", "seeds", "seeds_needed", "seeds_for_power", "seeds for 80% power")   # integers on the page


def optuna_figures(study) -> tuple[list[tuple[str, go.Figure]], list[str]]:
    import optuna.visualization as vis
    figures, skipped = [], []
    multi = len(study.directions) > 1
    makers = [("Parameter importance", lambda: vis.plot_param_importances(study, target=(lambda t: t.values[0]) if multi else None)),
              ("Slice", lambda: vis.plot_slice(study, target=(lambda t: t.values[0]) if multi else None)),
              ("Contour", lambda: vis.plot_contour(study, target=(lambda t: t.values[0]) if multi else None))]
    if multi:
        makers.append(("Pareto front", lambda: vis.plot_pareto_front(study)))
    for title, make in makers:
        try:
            fig = make()
        except (ValueError, RuntimeError) as exc:   # e.g. too few complete trials for importances
            skipped.append(f"{title}: {exc}")
            continue
        if any(len(getattr(t, "x", None) or getattr(t, "y", None) or []) for t in fig.data):
            top = titled(fig, fig.layout.title.text or title)     # below the toolbar, as every panel
            figures.append((title, fig.update_layout(height=340 + top, margin={"t": top})))
        else:
            skipped.append(f"{title}: no data yet")
    return figures, skipped


def default_output_name(study_path: str | None, run_ids: list[str] | None, layout_path: str | None,
                        x: str = "steps", seeds: str = "band") -> str:
    """``<study>[-<layout>][-<x>][-seeds-<view>].html`` or ``runs-<id8>-<id8>...html``: a page is
    named after what it shows, so two dashboards never overwrite each other by accident."""
    if study_path:
        stem = Path(study_path).stem
    else:
        ids = [r[:8] for r in run_ids or []]
        stem = "runs-" + "-".join(ids[:4]) + (f"-and-{len(ids) - 4}-more" if len(ids) > 4 else "")
    parts = [stem]
    if layout_path:
        parts.append(Path(layout_path).stem)
    if x != "steps":
        parts.append(x)
    if seeds != "band":
        parts.append(f"seeds-{seeds}")
    return "-".join(parts) + ".html"


class PageView(NamedTuple):
    """How a dashboard shows its runs: a layout file (None: the default layout), and the x-axis
    and seed view that override the layout's own when set."""
    layout_path: str | None = None
    x: str | None = None        # steps, tokens or seconds (data.X_AXES)
    seeds: str | None = None    # band, lines or both (SEED_VIEWS)


def build_dashboard(state: Path, out: Path, study_path: str | None = None, run_ids: list[str] | None = None,
                    view: PageView = PageView(), storage_url: str | None = None, plotlyjs: str = "inline") -> Path:
    """Read the study's (or chosen) runs and write the page as ``view`` says."""
    layout_path, x, seeds = view
    layout = load_layout(layout_path)
    if x is not None:
        check_choice("x", x, data.X_AXES)
        layout = {**layout, "x": x, "panels": [{k: v for k, v in p.items() if k != "x"} for p in layout["panels"]]}
    if seeds is not None:
        check_choice("seeds", seeds, SEED_VIEWS)
        layout = {**layout, "seeds": seeds}
    cfg, runs, title = _select_runs(state, study_path, run_ids, layout)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    plotly_tag = plotly_script(out, plotlyjs)
    sections, notes, tables = [], [], []
    if cfg is not None and cfg.study_kind.paired_rungs and (layout.get("ablation") or layout.get("paired_delta")):
        _ladder_sections(state, study_path, storage_url, cfg, layout, sections, tables)
    _curve_sections(state, runs, layout, sections, notes)
    if study_path:
        _completions_table(state, study_path, storage_url, tables, notes)
    if cfg is not None and cfg.study_kind.optuna_panels and layout.get("optuna"):
        _, study = load_results(study_path, state, storage_url)
        figures, skipped = optuna_figures(study)
        sections.extend(figures)
        notes.extend(skipped)
    out.write_text(render_page(title, sections, notes, tables, plotly_tag))
    (out.with_suffix(".json")).write_text(json.dumps({"runs": runs.run_id.tolist(), "labels": runs.label.tolist(),
                                                      "panels": [s[0] for s in sections], "x": layout["x"],
                                                      "seeds": layout["seeds"], "not_shown": notes}, indent=2))
    return out


def _select_runs(state: Path, study_path, run_ids, layout):
    cfg = None
    if study_path:
        cfg = load_study(study_path)
        runs = data.study_runs(state, cfg.name)
        title = layout.get("title") or f"grpolab study: {cfg.name}"
    elif run_ids:
        runs = data.chosen_runs(state, run_ids)
        title = layout.get("title") or f"grpolab runs: {', '.join(runs.label)}"
    else:
        raise ConfigError("dashboard: give a study file or --runs RUN_ID[,RUN_ID...]")
    if runs.empty:
        raise ConfigError(f"dashboard: no finished runs found for {study_path or run_ids}; run the study first")
    return cfg, runs, title


def _ladder_sections(state, study_path, storage_url, cfg, layout, sections, tables) -> None:
    table = data.ablation_frame(state, study_path, storage_url)
    metric = cfg.objectives[0].metric
    if layout.get("ablation"):
        sections.append(("Ablation table", ablation_figure(table, metric, cfg.published_source)))
    if layout.get("paired_delta") and len(table) > 1:
        sections.append(("Paired delta vs previous rung", paired_delta_figure(table, metric, table.attrs.get("level"))))
    if layout.get("ablation"):
        sections.extend(ladder_sections(state, study_path, storage_url))
    from grpolab.report.tables import answer_header, answer_lines  # the answer; the caption: metric, family, plan
    tables.append('<section id="answer"><h2>Answer: each rung against the previous one</h2>'
                  f"<p>{html.escape(answer_header(table, cfg))}</p><ul>"
                  + "".join(f"<li>{html.escape(line)}</li>" for line in answer_lines(table)) + "</ul></section>")
    above, below = caption_html(table.attrs["caption"])   # the design above; deviations, column notes to open
    tables.append("<h2>Ablation table</h2>" + above
                  + table.to_html(index=False, float_format=lambda v: f"{v:.3f}", na_rep="--",
                                  formatters={c: count_cell for c in table.columns if c in COUNT_COLUMNS}) + below)


def _completions_table(state, study_path, storage_url, tables, notes) -> None:
    """The prompt most runs logged at the last logged step, its completions from every rung and
    seed in one table (as ``grpolab samples`` prints it); a study whose runs logged none says so
    under "Not shown"."""
    try:
        view = side_by_side(study_path, state, storage_url, step=final_step(study_path, state, storage_url))
    except ConfigError as exc:
        notes.append(f"completions side by side: {exc}")
        return
    missing = f"; none logged for it in {', '.join(view.without)}" if view.without else ""
    tables.append(f'<section id="completions"><h2>Completions side by side</h2><p>prompt: '
                  f'<code>{html.escape(view.prompt)}</code>: {len(view.frame)} completions from '
                  f'{view.runs - len(view.without)} of {view.runs} runs{html.escape(missing)} '
                  f'(<code>grpolab samples STUDY --prompt TEXT --step N</code> shows any other)</p>'
                  + view.frame.to_html(index=False, float_format=lambda v: f"{v:.3f}", na_rep="--") + "</section>")


def _curve_sections(state, runs, layout, sections, notes) -> None:
    by_x: dict[str, tuple[pd.DataFrame, pd.DataFrame]] = {}   # x axis -> (curves, summary)
    for panel in layout["panels"]:
        x = panel.get("x", layout["x"])
        if x not in by_x:
            curves = data.metric_curves(state, runs, [p["metric"] for p in layout["panels"]], x)
            by_x[x] = curves, data.band_summary(curves)
        curves, summary = by_x[x]
        if summary[summary.metric == panel["metric"]].empty:
            notes.append(f"{panel['metric']}: not logged by these runs (e.g. KL off, or no clipped token)")
            continue
        title = panel.get("title", panel["metric"])
        sections.append((title, curve_figure(summary, panel["metric"], title, x, curves, layout["seeds"])))
