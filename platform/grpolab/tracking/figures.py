"""One image of a run's main curves, logged on the run with MLflow's ``log_figure``
(``tracking: {figures: true}``), so the stock MLflow UI shows the run at a glance without a
dashboard. Off by default: importing and drawing with matplotlib costs about 1-5 s per run on
these 2-core machines, a lot beside a toy run of seconds.

Panels (x: optimizer step): reward/mean; entropy; completion length (mean, correct, incorrect);
held-out pass@1 (one point per evaluation, step 0 = the warm start).
"""

from __future__ import annotations

PANELS = (("reward", ("reward/mean",)), ("entropy", ("entropy",)),
          ("completion length (tokens)", ("length/mean", "length/correct", "length/incorrect")))


def curves_figure(curves: dict, evals: dict):
    """``curves``: metric -> [(step, value)] as the run logged them; ``evals``: step -> held-out
    metrics. Returns a matplotlib Figure (Agg backend: no display needed)."""
    import math

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figure, axes = plt.subplots(2, 2, figsize=(10, 6.5), squeeze=False)
    for ax, (title, keys) in zip(axes.flat, PANELS):
        for key in keys:
            points = [(s, v) for s, v in curves.get(key, []) if math.isfinite(v)]
            if points:
                ax.plot(*zip(*points), label=key, linewidth=1.2)
        _finish(ax, title, len(keys) > 1)
    ax = axes.flat[3]
    points = sorted((step, m["eval/pass_at_1"]) for step, m in evals.items() if "eval/pass_at_1" in m)
    if points:
        ax.plot(*zip(*points), marker="o", label="eval/pass_at_1")
    ax.set_ylim(-0.02, 1.02)
    _finish(ax, "held-out pass@1", False)
    figure.tight_layout()
    return figure


def _finish(ax, title: str, legend: bool) -> None:
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("optimizer step", fontsize=8)
    ax.grid(alpha=0.3)
    if legend and ax.lines:
        ax.legend(fontsize=7)
