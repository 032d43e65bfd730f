"""Every metric key that passes through grpolab's logging path, defined once: name, definition,
population, weighting, range, the TRL key it mirrors, and when it is logged (``metric_record``).

The trainer (required keys, loss-side weighting, TRL's loss-side names), the recorder (the TRL
keys it drops), study objectives and figures (a metric's range), the dashboard (panel titles) and
docs/metrics.md (``render_doc``, ``grpolab metrics-doc``) read it here; tests/tracking/test_metric_catalog.py
fails on a key the package logs that no record covers.
"""

from __future__ import annotations

from functools import cache

from grpolab.tracking.metric_entries import ROLLOUT_AND_RUN
from grpolab.tracking.metric_entries_loss import TRL_DROPPED, UPDATE
from grpolab.tracking.metric_record import ANY, REQUIRED, TRAINED, Metric, range_text

CATALOG: tuple[Metric, ...] = ROLLOUT_AND_RUN + UPDATE + TRL_DROPPED
_EXACT = {m.name: m for m in CATALOG if not m.is_family}
_FAMILIES = tuple(m for m in CATALOG if m.is_family)


def lookup(name: str) -> Metric | None:
    """The record covering a key as MLflow stores it (a family's pattern when no exact name), or None."""
    found = _EXACT.get(name)
    if found is not None:
        return found
    return next((m for m in _FAMILIES if m.pattern.match(name)), None)


def range_of(name: str) -> tuple[float, float]:
    """The values a metric key can take; any number for a key the catalog does not know."""
    found = lookup(name)
    return found.range if found is not None else ANY


def trl_mirror(name: str) -> str:
    """The TRL 1.16 key the metric mirrors ("" none, or an unknown key)."""
    found = lookup(name)
    return found.trl if found is not None else ""


def required_keys() -> tuple[str, ...]:
    """Keys every tracked training run must hold (tests read them back from MLflow)."""
    return tuple(m.name for m in CATALOG if m.when == REQUIRED)


def weighted_by(weighting: str) -> frozenset[str]:
    return frozenset(m.name for m in CATALOG if m.weighting == weighting)


def dropped_keys() -> frozenset[str]:
    """TRL's keys the recorder does not store (exact names; ``dropped_prefixes`` the families)."""
    return frozenset(m.name for m in CATALOG if not m.stored and not m.is_family)


def dropped_prefixes() -> tuple[str, ...]:
    return tuple(m.name.split("<", 1)[0] for m in CATALOG if not m.stored and m.is_family)


@cache
def trl_loss_keys() -> frozenset[str]:
    """The loss-side statistics ``algorithms.policy_loss`` reports under TRL 1.16's own names and
    meanings (its ``GRPOTrainer._compute_loss``), which the drop-in trainer logs as TRL does."""
    return frozenset(m.name for m in CATALOG if not m.stored and m.population == TRAINED)


def definitions() -> dict[str, str]:
    """name -> definition of every stored metric (a family under its ``<...>`` name)."""
    return {m.name: m.definition for m in CATALOG if m.stored}


def label(name: str) -> str:
    """The metric's dashboard panel title (the name itself when it has none)."""
    found = lookup(name)
    return found.label if found is not None and found.label else name


INTRO = [
    "# Metrics", "", "Every curve grpolab logs to MLflow, with its exact meaning. Generated from",
    "`grpolab.tracking.metric_catalog` (`grpolab metrics-doc`).", "",
    "Populations. `generated` curves are over every completion generated for a generation",
    "batch (all dynamic-sampling rounds, before any filter), so they mean the same on every rung;",
    "`trained` curves (names starting `trained/`, and the loss-side `clip/*`, `kl`, ...) are over",
    "what the update uses: the kept groups, rows with a non-empty loss mask, their valid tokens.",
    "Rollout curves are logged once per generation batch; loss-side curves are reduced over every",
    "micro-batch of the generation batch (the fresh and the reused passes together, so they do not",
    "zigzag) and over every process, and logged at its last optimizer step.", "",
    "Weighting: what one unit of a mean or fraction is. A loss-side curve weighted by `token` is",
    "each micro-batch's value weighted by its valid (loss-mask) tokens; by `micro-batch`, one count",
    "per micro-batch and process.", "",
    "Clip curves are non-zero only when rollouts are reused (`train.minibatches > 1` or",
    "`train.num_iterations > 1`): with one optimizer step per rollout the ratio is exactly 1.",
    "Experiments that compare clipping must be configured that way (grpolab warns otherwise).", "",
    "Held-out keys are written as MLflow stores them (`eval/pass_at_1`); study metrics use the",
    "same names. `<...>` in a name stands for one variable part (a benchmark, a reward function).", "",
    "A curve with no value at a step (`length/correct` when no completion was correct,",
    "`clip/high_old_prob` when no token was clipped) is left out of that step, never logged as",
    "NaN or None (TRL's `log` passes None, which MLflow refuses with a warning): in CLI runs and",
    "in `GrpoLabTrainer`'s own `report_to` logging alike.", "",
    "`TRL` names the TRL 1.16 key a curve mirrors; `logged` says when it is logged: `every run",
    "(required)` curves are read back from every tracked training run by the tests.", "",
]


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render_doc() -> str:
    head = "| metric | population | weighting | range | TRL | logged | definition |"
    rows = [f"| `{m.name}` | {m.population} | {m.weighting} | {range_text(m.range)} | "
            f"{f'`{m.trl}`' if m.trl else ''} | {_cell(m.when)} | {_cell(m.definition)} |"
            for m in CATALOG if m.stored]
    dropped = [f"| `{m.name}` | {_cell(m.definition)} |" for m in CATALOG if not m.stored]
    lines = INTRO + [head, "|---|---|---|---|---|---|---|", *rows, "",
                     "## TRL keys grpolab does not store", "",
                     "TRL (and the drop-in trainer, for its own `report_to`) logs these; CLI runs leave them out",
                     "of MLflow: they duplicate grpolab's curves, mislead, or are TRL's end-of-train summary.", "",
                     "| key | why |", "|---|---|", *dropped]
    return "\n".join(lines) + "\n"
