"""Plotly figures of a dashboard, built from dashboard_data's DataFrames (no MLflow here).

- Curves: mean over seeds per group with a min-max band, optionally one thin line per seed;
  the x-axis is the optimizer step, cumulative completion tokens or wall-clock seconds.
- Ablation: the toy result (mean with a 95 % CI, the CI clipped to the metric's range, e.g. a
  pass rate stays in [0, 1]) and the published numbers in a separate panel with its own axis:
  the two are different scales and must not read as one.
- Paired delta: per rung, the mean over seeds of (rung - previous rung) with its 95 % CI.
"""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .dashboard_data import X_AXES

PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]
UNIT_INTERVAL = ("eval/pass", "eval/greedy_accuracy", "accuracy", "groups/", "clip/", "length/truncated_fraction",
                 "sampling/kept_fraction", "entropy/kept_fraction", "override/")
NON_NEGATIVE = ("length/", "tokens/", "entropy", "step_time", "eval/mean_length", "steps_to:", "tokens_to:")


def metric_range(metric: str) -> tuple[float, float]:
    """The values a metric (or study objective such as ``final:eval/pass_at_1``) can take."""
    key = metric.split(":", 1)[1] if metric.split(":", 1)[0] in ("final", "auc", "tail") else metric
    if key.startswith(UNIT_INTERVAL):
        return 0.0, 1.0
    if key.startswith(NON_NEGATIVE):
        return 0.0, math.inf
    return -math.inf, math.inf


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
    ``curves``) or both."""
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
                                     showlegend=False, legendgroup=label, meta="band"))
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
    fig.update_layout(title=title, xaxis_title=X_AXES[x], yaxis_title=metric, height=340,
                      margin={"l": 50, "r": 10, "t": 40, "b": 40}, legend={"font": {"size": 10}})
    return fig


def ablation_figure(table: pd.DataFrame, metric: str, published_source: str = "") -> go.Figure:
    """Left: the toy result per rung (mean, 95 % CI clipped to the metric's range). Right, only
    when the study gives them: the published numbers on their own axis."""
    published = table.published.notna().any() if "published" in table else False
    fig = make_subplots(rows=1, cols=2 if published else 1, column_widths=[0.6, 0.4] if published else None,
                        subplot_titles=[f"toy analog: {metric}", f"published: {published_source or 'paper'}"]
                        if published else None, horizontal_spacing=0.12)
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
        fig.update_yaxes(title_text="published value (its own scale)", row=1, col=2)
    fig.update_layout(title="Ablation: mean over seeds with 95% CI (cumulative rungs)", height=400,
                      margin={"l": 50, "r": 30, "t": 60, "b": 90}, showlegend=False)
    return fig


def paired_delta_figure(table: pd.DataFrame, metric: str) -> go.Figure:
    """Per rung after the first: mean over shared seeds of (rung - previous rung), 95 % CI."""
    part = table.iloc[1:]
    low, high = metric_range(metric)
    span = high - low    # a difference of two values in [low, high] lies in [-span, span]
    deltas = part.delta_vs_prev.tolist()
    plus, minus = clipped_error(deltas, part.delta_ci95.tolist(), -span, span)
    fig = go.Figure(go.Bar(x=part.rung.tolist(), y=deltas, meta="delta", name="paired delta",
                           error_y={"type": "data", "symmetric": False, "array": plus, "arrayminus": minus,
                                    "visible": True}))
    fig.add_hline(y=0, line={"color": "#555", "width": 1})
    fig.update_layout(title=f"Paired delta vs previous rung: {metric} (mean over seeds, 95% CI)",
                      yaxis_title=f"delta {metric}", height=360, margin={"l": 50, "r": 10, "t": 40, "b": 90})
    return fig

