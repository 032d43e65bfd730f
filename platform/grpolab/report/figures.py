"""Plotly figures of a dashboard, built from dashboard_data's DataFrames (no MLflow here).

- Curves: mean over seeds per group with a min-max band, optionally one thin line per seed (the panel's
  note says which, over how many seeds); x: optimizer step, cumulative completion tokens or seconds.
- Ablation: the toy result (mean with a 95 % t-interval, clipped to the metric's range, e.g. a
  pass rate stays in [0, 1]) and the published numbers in a separate panel with its own axis:
  the two are different scales and must not read as one.
- Paired delta: per rung, the mean over seeds of (rung - previous rung) with the verdict's paired
  t-interval (at the verdict's level, named in the panel; the rung-verdict panel shows the same).
- Re-scored trials (a search): each re-scored trial's value against its training-time objective.

Every title sits below plotly's toolbar row and is wrapped to the page's narrowest panel (``titled``).
"""

from __future__ import annotations

import math
import textwrap

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from grpolab.studies.objectives import metric_range
from grpolab.tracking.naming import X_AXES

# Panel furniture. The page's grid is at least 560 px wide per panel; plotly's toolbar (modebar:
# shown on hover, always laid out) sits in the top-right corner, about 25 px high, so every
# title starts below it, left-aligned, and is wrapped to fit the narrowest panel; the top margin
# is computed from the lines it holds (the browser tests check that no titles, legend or toolbar
# intersect, and that none is cut at the panel's edge).
MODEBAR_PX = 30          # the toolbar's row at the top of the figure
TITLE_PX, NOTE_PX = 14, 11
LINE_PX = 19             # one title line (plotly spaces lines 1.3 x the title's font size)
TITLE_CHARS = 64         # a 14 px line of 64 characters fits a 560 px panel
NOTE_CHARS = 80          # an 11 px note line
MODEBAR_CONFIG = {"displaylogo": False, "responsive": True, "displayModeBar": "hover",
                  "modeBarButtonsToRemove": ["select2d", "lasso2d"]}

PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]


def wrap(text: str, chars: int) -> list[str]:
    """``text`` in lines of at most ``chars`` characters (a longer single word is split)."""
    return textwrap.wrap(str(text), chars, break_on_hyphens=False) or [""]


def titled(fig: go.Figure, title: str, note: str = "", below: int = 0) -> int:
    """Put ``title`` (and a smaller ``note`` under it) left-aligned below the toolbar row, wrapped
    to the narrowest panel; returns the top margin that holds them plus ``below`` px (e.g.
    subplot titles), which the caller gives to ``margin.t``."""
    lines = wrap(title, TITLE_CHARS) + [f'<span style="font-size:{NOTE_PX}px">{line}</span>'
                                        for line in (wrap(note, NOTE_CHARS) if note else [])]
    # plotly puts a one-line title's text box about 3 px above pad.t and a wrapped one's about
    # 13 px above it (measured in Chromium): the extra pad keeps both clear of the toolbar
    pad = MODEBAR_PX + (14 if len(lines) > 1 else 0)
    fig.update_layout(title={"text": "<br>".join(lines), "font": {"size": TITLE_PX}, "x": 0, "xref": "container",
                             "xanchor": "left", "y": 1, "yref": "container", "yanchor": "top",
                             "pad": {"l": 10, "t": pad}})
    return pad + LINE_PX * len(lines) + 8 + below


def rung_axis(names: list[str], px: float) -> tuple[dict, int]:
    """(x-axis settings, bottom margin) for rung names under a column ``px`` wide: each name
    wrapped at 14 characters, level when they fit side by side, else turned upright (an upright
    label stays under its bar and never runs into the next column) in as few lines as its bar's
    width holds (13 px a line)."""
    slot = px / max(1, len(names))
    lines = [wrap(n, 14) for n in names]
    widest = 7 * max((len(line) for ls in lines for line in ls), default=1)
    level = widest <= slot - 6
    chars, room = 14, max(1, int(slot // 13))
    while not level and max(len(ls) for ls in lines) > room and chars < max(len(n) for n in names):
        chars += 2
        lines = [wrap(n, chars) for n in names]
        widest = 7 * max(len(line) for ls in lines for line in ls)
    axis = {"tickmode": "array", "tickvals": list(names), "ticktext": ["<br>".join(ls) for ls in lines],
            "tickangle": 0 if level else -90, "tickfont": {"size": 11}}
    return axis, (15 * max((len(ls) for ls in lines), default=1) if level else widest) + 16


def seed_note(summary: pd.DataFrame, seeds: str) -> str:
    """What the mean line, band and thin lines of a curve panel are, with the number of seeds."""
    counts = sorted({int(n) for n in summary.groupby(["order", "label"]).n.max()}) if len(summary) else [0]
    n = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    parts = [f"line: mean over {n} seed{'s' if counts[-1] != 1 else ''}"]
    if seeds in ("band", "both"):
        parts.append(f"band: min-max over {n} seeds" if counts[-1] > 1 else "band: none (one seed)")
    if seeds in ("lines", "both"):
        parts.append("thin lines: one per seed")
    return "; ".join(parts)


def clipped_error(values: list[float], half_widths: list[float], low: float, high: float
                  ) -> tuple[list[float], list[float]]:
    """(plus, minus) error-bar lengths of value +- half-width, cut at [low, high]; 0 where the
    value or the half-width is not finite (no interval claimed)."""
    plus, minus = [], []
    for v, h in zip(values, half_widths):
        ok = v is not None and h is not None and math.isfinite(v) and math.isfinite(h)
        plus.append(max(0.0, min(v + h, high) - v) if ok else 0.0)
        minus.append(max(0.0, v - max(v - h, low)) if ok else 0.0)
    return plus, minus


def curve_figure(summary: pd.DataFrame, metric: str, title: str, x: str = "steps",
                 curves: pd.DataFrame | None = None, seeds: str = "band") -> go.Figure:
    """Mean over seeds per group; ``seeds``: band (min-max), lines (one line per seed, needs
    ``curves``) or both. The panel's note says which, over how many seeds."""
    fig = go.Figure()
    rows = summary[summary.metric == metric]
    if "x" not in rows:
        rows = rows.assign(x=rows.step.astype(float))
    for i, ((order, label), part) in enumerate(rows.groupby(["order", "label"], sort=True)):
        color = PALETTE[i % len(PALETTE)]
        part = part.sort_values("step")
        if seeds in ("band", "both"):
            fig.add_trace(go.Scatter(x=list(part.x) + list(part.x[::-1]), y=list(part.high) + list(part.low[::-1]),
                                     fill="toself", fillcolor=color, opacity=0.15, line={"width": 0}, hoverinfo="skip",
                                     showlegend=False, legendgroup=label, meta="band",
                                     name=f"{label} band: min-max over {int(part.n.max())} seeds"))
        if seeds in ("lines", "both") and curves is not None:
            mine = curves[(curves.metric == metric) & (curves.label == label) & (curves.order == order)]
            for seed, line in mine.groupby("seed"):
                line = line.sort_values("step")
                fig.add_trace(go.Scatter(x=line.x.tolist(), y=line.value.tolist(), mode="lines", opacity=0.45,
                                         line={"color": color, "width": 1}, legendgroup=label, showlegend=False,
                                         name=f"{label} seed {seed}", meta="seed",
                                         hovertemplate=f"{label} seed {seed}<br>x %{{x}}<br>%{{y:.4f}}"))
        fig.add_trace(go.Scatter(x=part.x.tolist(), y=part["mean"].tolist(), mode="lines+markers", name=label,
                                 legendgroup=label, line={"color": color}, marker={"size": 4}, meta="mean",
                                 hovertemplate=f"{label}<br>x %{{x}}<br>%{{y:.4f}} (n=%{{customdata}})",
                                 customdata=part.n.tolist()))
    top = titled(fig, title, seed_note(rows, seeds if curves is not None else ("band" if seeds in ("band", "both") else "")))
    fig.update_layout(xaxis_title=X_AXES[x], yaxis_title=metric, height=300 + top,
                      margin={"l": 50, "r": 10, "t": top, "b": 40}, legend={"font": {"size": 10}})
    return fig


def ablation_figure(table: pd.DataFrame, metric: str, published_source: str = "") -> go.Figure:
    """Left: the toy result per rung (mean, 95 % t-interval clipped to the metric's range). Right, only
    when the study gives them: the published numbers on their own axis."""
    published = table.published.notna().any() if "published" in table else False
    spacing, widths, margin = 0.14, [0.6, 0.4] if published else [1.0], {"l": 55, "r": 20}
    names = [f"toy analog: {metric}", f"published: {published_source or 'paper'}"]
    plot_px = 560 - 10 - margin["l"] - margin["r"]       # the narrowest panel's plotting width
    columns_px = [plot_px * w * (1 - spacing if published else 1) for w in widths]
    # each subplot title wrapped to its own column (12 px text, about 7 px a character)
    sub = [wrap(name, max(12, int(px / 7))) for name, px in zip(names, columns_px)]
    fig = make_subplots(rows=1, cols=2 if published else 1, column_widths=widths,
                        subplot_titles=["<br>".join(lines) for lines in sub] if published else None,
                        horizontal_spacing=spacing)
    means = table["mean"].tolist()
    plus, minus = clipped_error(means, table.ci95.tolist(), *metric_range(metric))
    fig.add_trace(go.Bar(x=table.rung.tolist(), y=means, name=f"toy: {metric}", meta="toy",
                         error_y={"type": "data", "symmetric": False, "array": plus, "arrayminus": minus,
                                  "visible": True}), row=1, col=1)
    low, high = metric_range(metric)
    if math.isfinite(low) and math.isfinite(high):
        fig.update_yaxes(range=[low, high + 0.02 * (high - low)], row=1, col=1)
    fig.update_yaxes(title_text=metric, row=1, col=1)
    if published:
        fig.add_trace(go.Bar(x=table.rung.tolist(), y=table.published.tolist(), name="published", meta="published",
                             marker={"color": "#d62728", "opacity": 0.6}), row=1, col=2)
        fig.update_yaxes(title_text="published (own scale)", row=1, col=2)
        fig.update_annotations(font={"size": 12}, yshift=4)
    bottom = 0
    for col, px in enumerate(columns_px, start=1):
        axis, need = rung_axis(table.rung.tolist(), px)
        fig.update_xaxes(axis, row=1, col=col)
        bottom = max(bottom, need)
    below = 16 * max(len(lines) for lines in sub) + 8 if published else 0
    top = titled(fig, "Ablation: mean over seeds per rung (cumulative rungs)",
                 "whiskers: 95% t-interval of the mean over seeds, cut at the metric's range"
                 + ("; published values on their own axis" if published else ""), below)
    fig.update_layout(height=250 + top + bottom, margin={**margin, "t": top, "b": bottom}, showlegend=False)
    return fig


def paired_delta_figure(table: pd.DataFrame, metric: str, level: float | None = None) -> go.Figure:
    """Per rung after the first: mean over shared seeds of (rung - previous rung) with the verdict's
    paired t-interval (``delta_ci95``: its half-width at the verdict's ``level``, by default the
    table's ``attrs["level"]`` or 95 %), the level named in the panel."""
    level = level if level is not None else table.attrs.get("level", 0.95)
    part = table.iloc[1:]
    low, high = metric_range(metric)
    span = high - low    # a difference of two values in [low, high] lies in [-span, span]
    deltas = part.delta_vs_prev.tolist()
    plus, minus = clipped_error(deltas, part.delta_ci95.tolist(), -span, span)
    fig = go.Figure(go.Bar(x=part.rung.tolist(), y=deltas, meta="delta", name="paired delta",
                           error_y={"type": "data", "symmetric": False, "array": plus, "arrayminus": minus,
                                    "visible": True}))
    fig.add_hline(y=0, line={"color": "#555", "width": 1})
    top = titled(fig, f"Paired delta vs previous rung: {metric}",
                 f"bars: mean over shared seeds of (rung - previous rung); whiskers: {100 * level:.4g}% paired "
                 "t-interval, the verdict's interval")
    axis, bottom = rung_axis(part.rung.tolist(), 560 - 10 - 55 - 10)
    fig.update_layout(yaxis_title=f"delta {metric}", xaxis=axis, height=230 + top + bottom,
                      margin={"l": 55, "r": 10, "t": top, "b": bottom})
    return fig


def rescored_trials_figure(frame: pd.DataFrame, label: str, beside: str | None) -> go.Figure:
    """One point per trial of a search with a re-scored value (column ``label``): against its
    training-time objective ``beside`` (against the trial number where no objective re-measures it).
    Trials without one, or without a finite ``beside`` value, are counted in the note, not drawn
    (the table names each and why)."""
    scored = frame[frame[label].notna()]
    x = pd.to_numeric(scored[beside] if beside else scored.trial, errors="coerce")
    shown, x = scored[np.isfinite(x)], x[np.isfinite(x)]
    fig = go.Figure(go.Scatter(x=x.tolist(), y=shown[label].tolist(), mode="markers+text", name=label,
                               text=[f"trial {int(t)}" for t in shown.trial], textposition="top center"))
    fig.update_xaxes(title_text=f"{beside} (training-time)" if beside else "trial")
    fig.update_yaxes(title_text=label)
    note = (f"{len(shown)} of {len(frame)} trials plotted, one point each; {len(frame) - len(scored)} not re-scored"
            + (f"; {len(scored) - len(shown)} re-scored but not plotted: no finite {beside}"
               if len(scored) > len(shown) else ""))
    top = titled(fig, "Re-scored value per trial", note)
    fig.update_layout(height=300 + top, margin={"l": 55, "r": 20, "t": top, "b": 50}, showlegend=False)
    return fig
