"""Dashboards: layout YAML + extracted DataFrames -> plotly figures -> one offline HTML file.

plotly.js is embedded once in the page (no CDN: clusters are often offline). Panels whose
metric no run logged (e.g. KL with the KL off) are not drawn; the page says which and why.
A small self-check script records, after rendering, how many traces and points each panel
holds and any script error, in ``<pre id="grpolab-self-check">`` (tests read it in Chromium).
"""

from __future__ import annotations

import html
import json
import time
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import plotly.offline
import yaml

from . import dashboard_data as data
from .errors import ConfigError

DEFAULT_LAYOUT = {
    "panels": [
        {"title": "Held-out pass@1", "metric": "eval/pass_at_1"},
        {"title": "Reward (rollout mean)", "metric": "reward/mean"},
        {"title": "Policy entropy", "metric": "entropy"},
        {"title": "Length of correct completions", "metric": "length/correct"},
        {"title": "Length of incorrect completions", "metric": "length/incorrect"},
        {"title": "Clip fraction (either bound binds)", "metric": "clip/region_fraction"},
        {"title": "Old-policy probability of upper-clipped tokens", "metric": "clip/high_old_prob"},
        {"title": "All-correct groups (zero variance)", "metric": "groups/all_correct"},
        {"title": "All-wrong groups (zero variance)", "metric": "groups/all_wrong"},
        {"title": "KL to the reference", "metric": "kl"},
    ],
    "ablation": True,
    "optuna": True,
}
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]


def load_layout(path: str | None) -> dict:
    if path is None:
        return DEFAULT_LAYOUT
    layout = yaml.safe_load(Path(path).read_text()) or {}
    unknown = set(layout) - {"title", "panels", "ablation", "optuna"}
    if unknown:
        raise ConfigError(f"dashboard layout: unknown key {sorted(unknown)[0]!r}; valid: title, panels, ablation, optuna")
    for i, panel in enumerate(layout.get("panels") or []):
        if not isinstance(panel, dict) or "metric" not in panel:
            raise ConfigError(f"dashboard layout: panels[{i}] needs a metric (and optional title)")
    return {**DEFAULT_LAYOUT, **layout}


def curve_figure(summary: pd.DataFrame, metric: str, title: str) -> go.Figure:
    """Mean over seeds per group with a shaded min-max band across seeds."""
    fig = go.Figure()
    rows = summary[summary.metric == metric]
    for i, (label, part) in enumerate(rows.groupby(["order", "label"], sort=True)):
        color = PALETTE[i % len(PALETTE)]
        part = part.sort_values("step")
        fig.add_trace(go.Scatter(x=list(part.step) + list(part.step[::-1]), y=list(part.high) + list(part.low[::-1]),
                                 fill="toself", fillcolor=color, opacity=0.15, line={"width": 0}, hoverinfo="skip",
                                 showlegend=False, legendgroup=label[1]))
        fig.add_trace(go.Scatter(x=part.step.tolist(), y=part["mean"].tolist(), mode="lines+markers", name=label[1],
                                 legendgroup=label[1],
                                 line={"color": color}, marker={"size": 4},
                                 hovertemplate=f"{label[1]}<br>step %{{x}}<br>%{{y:.4f}} (n=%{{customdata}})",
                                 customdata=part.n.tolist()))
    fig.update_layout(title=title, xaxis_title="optimizer step", yaxis_title=metric, height=340,
                      margin={"l": 50, "r": 10, "t": 40, "b": 40}, legend={"font": {"size": 10}})
    return fig


def ablation_figure(table: pd.DataFrame, metric: str) -> go.Figure:
    """Bars: mean with 95 % CI per rung; published values on a second axis (their own scale)."""
    fig = go.Figure()
    fig.add_trace(go.Bar(x=table.rung.tolist(), y=table["mean"].tolist(), name=f"toy: {metric}",
                         error_y={"type": "data", "array": table.ci95.fillna(0).tolist(), "visible": True}))
    if table.published.notna().any():
        fig.add_trace(go.Scatter(x=table.rung.tolist(), y=table.published.tolist(), name="published", mode="lines+markers",
                                 yaxis="y2", line={"dash": "dot", "color": "#d62728"}))
        fig.update_layout(yaxis2={"title": "published", "overlaying": "y", "side": "right"})
    fig.update_layout(title="Ablation: mean over seeds with 95% CI (cumulative rungs)", yaxis_title=metric,
                      height=380, margin={"l": 50, "r": 50, "t": 40, "b": 80})
    return fig


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
            figures.append((title, fig.update_layout(height=380)))
        else:
            skipped.append(f"{title}: no data yet")
    return figures, skipped


def render_page(title: str, sections: list[tuple[str, go.Figure]], notes: list[str], tables: list[str]) -> str:
    parts = []
    for i, (name, fig) in enumerate(sections):
        div = fig.to_html(full_html=False, include_plotlyjs=False, div_id=f"panel-{i}",
                          config={"displaylogo": False, "responsive": True})
        parts.append(f'<section class="panel" data-panel="{html.escape(name)}">{div}</section>')
    note_html = "".join(f"<li>{html.escape(n)}</li>" for n in notes)
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<script>window.__grpolabErrors = []; window.addEventListener("error", e => window.__grpolabErrors.push(String(e.message)));</script>
<script>{plotly.offline.get_plotlyjs()}</script>
<style>body{{font-family:sans-serif;margin:16px;background:#fafafa}} .grid{{display:grid;grid-template-columns:repeat(auto-fill,minmax(560px,1fr));gap:12px}}
.panel{{background:#fff;border:1px solid #ddd;border-radius:6px;padding:4px}} table{{border-collapse:collapse;font-size:13px}}
td,th{{border:1px solid #ccc;padding:3px 8px}} #grpolab-self-check{{display:none}}</style></head>
<body><h1>{html.escape(title)}</h1><p>Generated {time.strftime('%Y-%m-%d %H:%M:%S')} by grpolab from stored MLflow runs and Optuna trials.</p>
{''.join(tables)}<div class="grid">{''.join(parts)}</div>
{f'<h3>Not shown</h3><ul>{note_html}</ul>' if notes else ''}
<pre id="grpolab-self-check"></pre>
<script>
window.addEventListener("load", () => setTimeout(() => {{
  const panels = [...document.querySelectorAll("section.panel")].map(s => {{
    const gd = s.querySelector(".js-plotly-plot");
    const traces = gd && gd._fullData ? gd._fullData : [];
    const points = traces.reduce((n, t) => n + (t._length || (t.y || t.x || t.z || []).length || 0), 0);
    return {{panel: s.dataset.panel, traces: traces.length, points: points, rendered: !!(gd && gd._fullLayout)}};
  }});
  document.getElementById("grpolab-self-check").textContent = JSON.stringify({{panels, errors: window.__grpolabErrors}});
}}, 300));
</script></body></html>"""


def build_dashboard(state: Path, out: Path, study_path: str | None = None, run_ids: list[str] | None = None,
                    layout_path: str | None = None, storage_url: str | None = None) -> Path:
    layout = load_layout(layout_path)
    cfg = None
    if study_path:
        from .study_config import load_study
        cfg = load_study(study_path)
        runs = data.study_runs(state, cfg.name)
        title = layout.get("title") or f"grpolab study: {cfg.name}"
    elif run_ids:
        runs = data.chosen_runs(state, run_ids)
        title = layout.get("title") or f"grpolab runs: {len(run_ids)}"
    else:
        raise ConfigError("dashboard: give a study file or --runs RUN_ID[,RUN_ID...]")
    if runs.empty:
        raise ConfigError(f"dashboard: no finished runs found for {study_path or run_ids}; run the study first")
    metrics = [p["metric"] for p in layout["panels"]]
    summary = data.band_summary(data.metric_curves(state, runs, metrics))
    sections, notes, tables = [], [], []
    if cfg is not None and cfg.kind == "ladder" and layout.get("ablation"):
        table = data.ablation_frame(state, study_path, storage_url)
        sections.append(("Ablation table", ablation_figure(table, cfg.objectives[0].metric)))
        tables.append(f"<h2>Ablation table</h2><p>{html.escape(cfg.published_source)}</p>"
                      + table.to_html(index=False, float_format=lambda v: f"{v:.3f}", na_rep="--"))
        from .verdict_report import ladder_sections   # rung verdicts: effect + BCa CI, and per-seed differences
        sections.extend(ladder_sections(state, study_path, storage_url))
    for panel in layout["panels"]:
        if summary[summary.metric == panel["metric"]].empty:
            notes.append(f"{panel['metric']}: not logged by these runs (e.g. KL off, or no clipped token)")
            continue
        sections.append((panel.get("title", panel["metric"]), curve_figure(summary, panel["metric"], panel.get("title", panel["metric"]))))
    if cfg is not None and cfg.kind == "search" and layout.get("optuna"):
        from .results import load_results
        _, study = load_results(study_path, state, storage_url)
        figures, skipped = optuna_figures(study)
        sections.extend(figures)
        notes.extend(skipped)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_page(title, sections, notes, tables))
    (out.with_suffix(".json")).write_text(json.dumps({"runs": runs.run_id.tolist(), "panels": [s[0] for s in sections],
                                                      "not_shown": notes}, indent=2))
    return out
