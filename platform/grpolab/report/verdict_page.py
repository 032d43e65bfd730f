"""Verdicts as a table and as figures: claims (``grpolab verdicts``) and ladder rungs.

The verdict panel puts every claim on one axis by expressing its effect in units of its own
smallest effect that matters (effect / delta), so claims on entropy, tokens and pass@1 can sit
side by side; the zero line and the +-1 lines (delta) are drawn, and the published direction is
marked with a triangle. The per-seed panel shows the paired differences themselves.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import pandas as pd
import plotly.graph_objects as go

from grpolab.analysis.ablation import SequentialLooks, ladder_rows, load_results
from grpolab.report.figures import titled
from grpolab.studies.definition import load_study
from grpolab.report.page import render_page

LEGEND_ROW_PX = 30
ARROW = {"increase": "treatment > control", "decrease": "treatment < control", "none": "no difference"}


def _fmt(x: float) -> str:
    return "nan" if x is None or not math.isfinite(x) else f"{x:.4g}"


def count_cell(x) -> str:
    """A count (seeds, seeds for power) as an integer in every output (``7``, never ``7.000`` or
    ``7.0``); ``--`` where there is none."""
    if x is None or isinstance(x, str):
        return x or "--"
    return str(int(x)) if math.isfinite(x) and float(x).is_integer() else ("--" if not math.isfinite(x) else f"{x:g}")


def verdict_frame(results) -> pd.DataFrame:
    """One row per claim: label and reason, interval, tests with Holm, precondition, premise, power,
    pre-registration and deviations (CSV, markdown and the dashboard share it)."""
    from grpolab.analysis.verdicts import DECIDED, family_text, holm_text
    rows = []
    for r in results:
        c, v = r.claim, r.verdict
        treatment = c.treatment.rung + (f" ({c.treatment.metric})" if c.treatment.metric else "")
        control = (c.control.rung + (f" ({c.control.metric})" if c.control.metric else "")
                   if c.control.rung else f"the fixed value {c.control.value:g}")
        extra = [f"{m}: {_fmt(d)} (n={n})" for m, (d, n) in r.report.items()]
        mechanism = "none named"
        if c.mechanism:
            mechanism = f"{c.mechanism.metric} = {_fmt(r.mechanism_value)} (floor {c.mechanism.at_least:g}, {c.mechanism.rows} rows)"
        premise = "none declared" if r.premise is None else f"{r.premise.status}: {r.premise.text()}"
        kind = ("construction check: holds by how the toy is built, not a reproduction" if c.kind == "construction_check"
                else "reproduction")
        if c.statistic_note:
            kind += f"; statistic differs from the paper's: {c.statistic_note}"
        if c.scale == "log10":
            kind += "; judged on log10(treatment) - log10(control), a ratio"
        rows.append({
            "claim": c.name, "kind": kind, "statement": c.statement, "source": c.source,
            "published": f"{ARROW[c.direction]}" + (f"; {c.published}" if c.published else ""),
            "toy comparison": f"{treatment} vs {control}" + ("" if c.treatment.metric and c.control.metric
                                                             else f" on {c.metric}"),
            "toy effect [paired t CI]": f"{_fmt(v.mean)} [{_fmt(v.low)}, {_fmt(v.high)}] at {100 * v.level:.4g} %",
            "smallest effect": f"{c.smallest_effect:g}", "seeds": v.n, "verdict": v.verdict,
            "why": "; ".join([v.reason, *v.diagnostics] + ([r.sequential] if r.sequential else [])),
            "tests": holm_text(v), "familywise": family_text(v), "precondition": mechanism, "premise": premise,
            "seeds for 80% power": "--" if v.verdict in DECIDED else count_cell(v.seeds_needed),   # it conditions on the outcome
            "registration": r.preregistration,
            "deviations": "; ".join([d.text() for d in c.deviations]
                                    + [f"study: {d.text()}" for d in load_study(c.study_path).deviations]) or "none",
            "beside": "; ".join(extra)})
    return pd.DataFrame(rows)


def claims_count(results) -> str:
    """'N empirical claims decided, M construction checks hold': reproductions with a decided label
    (a regime absent or not measured, a precondition not met, decide nothing) apart from the
    construction checks (``kind: construction_check``, a unit test of the toy, not evidence)."""
    from grpolab.analysis.verdicts import DECIDED, HOLDS_EXACTLY, REPRODUCED
    empirical = [r for r in results if r.claim.kind != "construction_check"]
    checks = [r for r in results if r.claim.kind == "construction_check"]
    decided = sum(r.verdict.verdict in DECIDED for r in empirical)
    familywise = sum(r.verdict.family_label in DECIDED for r in empirical)
    hold = sum(r.verdict.verdict in (HOLDS_EXACTLY, REPRODUCED) for r in checks)
    return (f"{decided} empirical claims decided, {hold} construction checks hold (of {len(empirical)} empirical "
            f"claims, {familywise} decided familywise; of {len(checks)} construction checks)")


def family_statement(results) -> str:
    """The multiplicity statement of a verdicts run, ending with the claims' count."""
    size = max((r.verdict.family for r in results), default=0)
    levels = sorted({f"{100 * r.verdict.level:.4g}%" for r in results})
    return (f"Family: the {size} claims judged on data in this run, of {len(results)} named (judge all claims "
            f"together: choosing which to judge after seeing results defeats the adjustment). verdict: each claim's "
            f"own {'/'.join(levels)} interval (a per-look level where seeds were added until decided), not adjusted for "
            "the family; every interval covers the spread over RL seeds of its study's one base model "
            "(warm_start.seed) on its one held-out set (eval.seed), conditional on both. tests: each claim's primary hypothesis, fixed by its "
            "direction (H0: mean 0; for a claim of no effect Heq: |mean| >= delta), with Holm's adjustment over the "
            "family. familywise: the same label rules on Bonferroni intervals at 1 - 0.05/(claims x looks), which "
            f"all hold together with probability >= 95%. Labels: docs/studies.md, 'Verdict labels'. {claims_count(results)}.")


def render_verdicts(results, fmt: str = "markdown") -> str:
    frame = verdict_frame(results)
    if fmt == "csv":
        return frame.to_csv(index=False)
    from grpolab.report.tables import markdown_table
    return markdown_table(frame) + "\n\n" + family_statement(results) + "\n"


class VerdictItems(NamedTuple):
    """What a verdict panel draws: one entry per item (a claim, a rung) in every list."""
    labels: list[str]
    means: list[float]        # the paired difference's mean
    lows: list[float]         # its interval's ends
    highs: list[float]
    deltas: list[float]       # the smallest effect that matters (the unit of the x-axis)
    directions: list[str]     # the published direction: increase, decrease or none
    verdicts: list[str]       # the label shown beside the point


def verdict_figure(items: VerdictItems, title: str) -> go.Figure:
    """Effect and CI per item in units of its smallest effect; zero line; published direction marked."""
    labels, means, lows, highs, deltas, directions, verdicts = items
    scale = [d if d and d > 0 else 1.0 for d in deltas]
    x = [m / s for m, s in zip(means, scale)]
    err_hi = [(h - m) / s for h, m, s in zip(highs, means, scale)]
    err_lo = [(m - lo) / s for lo, m, s in zip(lows, means, scale)]
    hover = [f"{v}<br>effect {_fmt(m)} [{_fmt(lo)}, {_fmt(h)}], delta {d:g}"
             for v, m, lo, h, d in zip(verdicts, means, lows, highs, scale)]
    fig = go.Figure(go.Scatter(x=x, y=labels, mode="markers+text", name="toy effect / smallest effect, paired t CI (level in the title)",
                               text=list(verdicts), textposition="top center", textfont={"size": 10},
                               error_x={"type": "data", "array": err_hi, "arrayminus": err_lo, "visible": True},
                               marker={"size": 10, "color": "#1f77b4"}, hovertext=hover, hoverinfo="text"))
    marks = {"increase": ("triangle-right", 1.0), "decrease": ("triangle-left", -1.0), "none": ("diamond", 0.0)}
    fig.add_trace(go.Scatter(x=[marks[d][1] for d in directions], y=labels, mode="markers", name="published direction",
                             marker={"symbol": [marks[d][0] for d in directions], "size": 12, "color": "#d62728"}))
    fig.add_vline(x=0, line={"color": "black", "width": 1})
    for edge in (-1, 1):
        fig.add_vline(x=edge, line={"color": "#999", "dash": "dot", "width": 1})
    top, bottom = titled(fig, title), 50 + LEGEND_ROW_PX     # the legend in a row under the x-axis title
    fig.update_layout(xaxis_title="paired difference / smallest effect that matters",
                      height=top + bottom + 40 + 45 * len(labels), margin={"l": 220, "r": 30, "t": top, "b": bottom},
                      legend={"orientation": "h", "x": 0, "xref": "container", "xanchor": "left",
                              "y": 0, "yref": "container", "yanchor": "bottom", "font": {"size": 11}})
    return fig


def seed_figure(labels: list[str], differences: list[dict], deltas, title: str) -> go.Figure:
    """One point per seed: the paired difference (in units of the smallest effect)."""
    fig = go.Figure()
    for label, diffs, delta in zip(labels, differences, deltas):
        scale = delta if delta and delta > 0 else 1.0
        seeds = sorted(diffs)
        fig.add_trace(go.Scatter(x=[diffs[s] / scale for s in seeds], y=[label] * len(seeds), mode="markers",
                                 name=label, text=[f"seed {s}: {diffs[s]:.4g}" for s in seeds], hoverinfo="text",
                                 marker={"size": 8, "opacity": 0.75}, showlegend=False))
    fig.add_vline(x=0, line={"color": "black", "width": 1})
    top = titled(fig, title)
    fig.update_layout(xaxis_title="per-seed paired difference / smallest effect",
                      height=top + 50 + 40 + 45 * len(labels), margin={"l": 220, "r": 30, "t": top, "b": 50})
    return fig


def claim_sections(results) -> list[tuple[str, go.Figure]]:
    labels = [r.claim.name for r in results]
    v = [r.verdict for r in results]
    deltas = [r.claim.smallest_effect for r in results]
    items = VerdictItems(labels, [x.mean for x in v], [x.low for x in v], [x.high for x in v], deltas,
                         [r.claim.direction for r in results], [x.verdict for x in v])
    return [("Verdicts", verdict_figure(items, f"Claims: toy effect with {'/'.join(sorted({x.interval for x in v}))} "
                                               "CI and its label (red: published direction)")),
            ("Per-seed paired differences", seed_figure(labels, [x.differences for x in v], deltas,
                                                       "Per-seed paired differences (treatment - control)"))]


def write_claims_dashboard(results, out) -> str:
    import html
    from pathlib import Path

    table = verdict_frame(results).to_html(index=False, na_rep="--")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_page("grpolab verdicts on published claims", claim_sections(results), [],
                               [f"<h2>Verdicts</h2><p>{html.escape(family_statement(results))}</p>{table}"]))
    return str(out)


def ladder_sections(state, study_path: str, storage_url: str | None) -> list[tuple[str, go.Figure]]:
    """Rung verdict panels for a ladder dashboard: each rung vs the previous one, paired by seed
    (``ladder_verdicts``: the same numbers and labels as the table's verdict_vs_prev column)."""
    from grpolab.analysis.ladder_verdicts import rung_verdicts
    from grpolab.studies.storage import plan_looks, verdict_plan
    cfg, study = load_results(study_path, state, storage_url)
    level, looks, _ = verdict_plan(study)
    steps = [r for r in rung_verdicts(ladder_rows(study, cfg), cfg, 0, state, SequentialLooks(level, looks, plan_looks(study)))[1]
             if r.verdict is not None]
    if not steps:
        return []
    from grpolab.analysis.strength import shown_label
    labels = [cfg.rungs[r.rung].name for r in steps]
    deltas = [cfg.objectives[0].smallest_effect] * len(steps)
    verdicts = [r.verdict for r in steps]
    items = VerdictItems(labels, [v.mean for v in verdicts], [v.low for v in verdicts], [v.high for v in verdicts],
                         deltas, [r.direction for r in steps], [shown_label(v) for v in verdicts])
    return [("Rung verdicts", verdict_figure(items, f"Each rung vs the previous: paired difference, {100 * level:.4g}% "
                                                    "paired t CI, label (units of the smallest effect; red: published "
                                                    "direction)")),
            ("Per-seed rung differences", seed_figure(labels, [v.differences for v in verdicts], deltas,
                                                     "Per-seed paired difference vs the previous rung"))]
