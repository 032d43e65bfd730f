"""One self-contained HTML page of plotly figures, notes and tables, with a self-check script that
records what each panel rendered (read back by the browser tests)."""

from __future__ import annotations

import html
import time
from pathlib import Path

import plotly.graph_objects as go
import plotly.offline

from grpolab.errors import ConfigError
from grpolab.report.figures import MODEBAR_CONFIG, ablation_figure, curve_figure, paired_delta_figure  # noqa: F401 (re-exported)

PLOTLYJS_MODES = ("inline", "shared")


def plotly_script(out: Path, mode: str) -> str:
    """inline: plotly.js inside the page (one file, works offline; ~4.7 MB per page). shared: one
    ``plotly-<version>.min.js`` beside the pages, written once and loaded by relative path (the
    folder stays offline-complete; copy it whole)."""
    if mode not in PLOTLYJS_MODES:
        raise ConfigError(f"--plotlyjs: {mode!r} is not valid; valid: {', '.join(PLOTLYJS_MODES)}")
    if mode == "inline":
        return f"<script>{plotly.offline.get_plotlyjs()}</script>"
    from plotly import __version__ as plotly_version
    name = f"plotly-{plotly_version}.min.js"
    script = Path(out).parent / name
    if not script.exists():
        script.write_text(plotly.offline.get_plotlyjs())
    return f'<script src="{name}"></script>'


SELF_CHECK = """
const rect = el => { const r = el.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom].map(v => Math.round(v * 10) / 10); };
// every title text (figure title and its note lines, annotations such as subplot titles, axis
// titles), the legend and plotly's toolbar (modebar, shown on hover but always laid out), as
// viewport boxes [left, top, right, bottom]: the browser tests check that no two intersect
const TITLE_CLASS = /^(gtitle|gtitle-subtitle|annotation-text|[xy]\\d*title)$/;
const textBoxes = gd => {
  const out = [...gd.querySelectorAll("text")].filter(t => [...t.classList].some(c => TITLE_CLASS.test(c)) && t.textContent.trim())
    .map(t => ({kind: [...t.classList].find(c => TITLE_CLASS.test(c)), text: t.textContent, box: rect(t)}));
  gd.querySelectorAll(".modebar, g.legend").forEach(el => out.push({kind: el.classList.contains("modebar") ? "modebar" : "legend",
                                                                     text: "", box: rect(el)}));
  return out.filter(b => b.box[2] - b.box[0] > 0 && b.box[3] - b.box[1] > 0);
};
window.addEventListener("load", () => setTimeout(() => {
  const panels = [...document.querySelectorAll("section.panel")].map(s => {
    const gd = s.querySelector(".js-plotly-plot");
    const traces = gd && gd._fullData ? gd._fullData : [];
    const points = traces.reduce((n, t) => n + (t._length || (t.y || t.x || t.z || []).length || 0), 0);
    const xs = traces.flatMap(t => (t.type === "scatter" ? Array.from(t.x || []) : [])).filter(Number.isFinite);
    const bars = traces.filter(t => t.error_y && t.error_y.visible).map(t => {
      const y = Array.from(t.y), up = t.error_y.array || [], down = t.error_y.arrayminus || up;
      return {meta: t.meta, low: Math.min(...y.map((v, i) => v - (down[i] || 0))),
              high: Math.max(...y.map((v, i) => v + (up[i] || 0)))};
    });
    const layout = gd && gd._fullLayout;
    return {panel: s.dataset.panel, traces: traces.length, points: points, rendered: !!layout,
            xTitle: layout && layout.xaxis && layout.xaxis.title ? layout.xaxis.title.text : null,
            xMax: xs.length ? Math.max(...xs) : null, seedLines: traces.filter(t => t.meta === "seed").length,
            yAxes: layout ? Object.keys(layout).filter(k => /^yaxis\\d*$/.test(k)).length : 0,
            overlaying: layout ? Object.keys(layout).filter(k => /^yaxis/.test(k) && layout[k].overlaying).length : 0,
            errorBars: bars, box: gd ? rect(gd) : null, boxes: gd ? textBoxes(gd) : []};
  });
  document.getElementById("grpolab-self-check").textContent = JSON.stringify({panels, errors: window.__grpolabErrors});
}, 300));
"""


def render_page(title: str, sections: list[tuple[str, go.Figure]], notes: list[str], tables: list[str],
                plotly_tag: str | None = None) -> str:
    """The page; a self-check script records per panel what rendered (traces, points, x-axis
    title and largest x, per-seed lines, error-bar extents, the panel's box and the boxes of its
    titles, legend and toolbar) in ``#grpolab-self-check``. The toolbar shows on hover, without
    the select and lasso tools (``figures.MODEBAR_CONFIG``)."""
    parts = []
    for i, (name, fig) in enumerate(sections):
        div = fig.to_html(full_html=False, include_plotlyjs=False, div_id=f"panel-{i}",
                          config=MODEBAR_CONFIG)
        parts.append(f'<section class="panel" data-panel="{html.escape(name)}">{div}</section>')
    note_html = "".join(f"<li>{html.escape(n)}</li>" for n in notes)
    plotly_tag = plotly_tag or f"<script>{plotly.offline.get_plotlyjs()}</script>"
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<script>window.__grpolabErrors = []; window.addEventListener("error", e => window.__grpolabErrors.push(String(e.message)));</script>
{plotly_tag}
<style>body{{font-family:sans-serif;margin:16px;background:#fafafa}} .grid{{display:grid;grid-template-columns:repeat(auto-fill,minmax(560px,1fr));gap:12px}}
.panel{{background:#fff;border:1px solid #ddd;border-radius:6px;padding:4px}} table{{border-collapse:collapse;font-size:13px}}
td,th{{border:1px solid #ccc;padding:3px 8px}} #grpolab-self-check{{display:none}}</style></head>
<body><h1>{html.escape(title)}</h1><p>Generated {time.strftime('%Y-%m-%d %H:%M:%S')} by grpolab from stored MLflow runs and Optuna trials.</p>
{''.join(tables)}<div class="grid">{''.join(parts)}</div>
{f'<h3>Not shown</h3><ul>{note_html}</ul>' if notes else ''}
<pre id="grpolab-self-check"></pre>
<script>{SELF_CHECK}</script></body></html>"""
