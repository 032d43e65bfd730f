"""Dashboard layouts (dashboards/*.yaml): which panels, x-axis and seed view a page shows.
Read and checked here without plotly or pandas, so that a bad ``--layout`` is answered at once."""

from __future__ import annotations

from grpolab.errors import ConfigError
from grpolab.tracking.metric_catalog import label
from grpolab.tracking.naming import X_AXES
from grpolab.yaml_input import read_yaml_mapping

# the default page's panels, in order; each panel's title is its metric's label in the catalog
DEFAULT_PANELS = ("eval/pass_at_1", "reward/mean", "entropy", "length/correct", "length/incorrect",
                  "clip/region_fraction", "clip/high_old_prob", "groups/all_correct", "groups/all_wrong", "kl")
DEFAULT_LAYOUT = {
    "panels": [{"title": label(metric), "metric": metric} for metric in DEFAULT_PANELS],
    "ablation": True,
    "paired_delta": True,
    "optuna": True,
    "x": "steps",
    "seeds": "band",
}
LAYOUT_KEYS = {"title": "page title", "panels": "list of {metric, title, x}", "ablation": "ladder table chart",
               "paired_delta": "ladder paired deltas", "optuna": "search plots",
               "x": "steps | tokens | seconds | accelerator_hours", "seeds": "band | lines | both"}
PANEL_KEYS = ("metric", "title", "x")
SEED_VIEWS = ("band", "lines", "both")


def load_layout(path: str | None) -> dict:
    if path is None:
        return dict(DEFAULT_LAYOUT)
    layout = read_yaml_mapping(path, "dashboard layout (--layout)", f"valid keys: {', '.join(LAYOUT_KEYS)}")
    unknown = set(layout) - set(LAYOUT_KEYS)
    if unknown:
        raise ConfigError(f"dashboard layout: unknown key {sorted(unknown)[0]!r}; valid: {', '.join(LAYOUT_KEYS)}")
    panels = layout.get("panels") or []
    if not isinstance(panels, list):
        raise ConfigError(f"dashboard layout: panels: expected a list of {{metric, title, x}}, got {panels!r}")
    for key in ("ablation", "paired_delta", "optuna"):
        if key in layout and not isinstance(layout[key], bool):
            raise ConfigError(f"dashboard layout: {key}: expected true or false, got {layout[key]!r}")
    if "title" in layout and not isinstance(layout["title"], str):
        raise ConfigError(f"dashboard layout: title: expected a string, got {layout['title']!r}")
    for i, panel in enumerate(panels):
        if not isinstance(panel, dict) or "metric" not in panel:
            raise ConfigError(f"dashboard layout: panels[{i}] needs a metric (and optional title, x)")
        bad = set(panel) - set(PANEL_KEYS)
        if bad:
            raise ConfigError(f"dashboard layout: panels[{i}].{sorted(bad)[0]}: unknown key; valid: {', '.join(PANEL_KEYS)}")
        check_choice(f"panels[{i}].x", panel.get("x", "steps"), X_AXES)
    merged = {**DEFAULT_LAYOUT, **layout}
    check_choice("x", merged["x"], X_AXES)
    check_choice("seeds", merged["seeds"], SEED_VIEWS)
    return merged


def check_choice(key: str, value, valid) -> None:
    if value not in valid:
        raise ConfigError(f"dashboard layout: {key}: {value!r} is not valid; valid: {', '.join(valid)}")
