"""One tracked metric's facts (``Metric``) and the words its fields take; the records themselves
are in ``metric_entries`` and ``metric_entries_loss``, read through ``metric_catalog``."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

# Populations: which completions (or tokens, steps) a value is over.
GENERATED = "generated"     # every completion generated for a generation batch, all rounds, before any filter
TRAINED = "trained"         # what the update uses: kept groups, rows with a non-empty loss mask, their tokens
HELD_OUT = "held-out"       # the held-out evaluation's prompts and samples
BENCHMARK = "benchmark"     # a named benchmark's (eval.benchmarks) prompts and samples
RUN = "run"                 # the optimizer step or the run itself (loss, learning rate, wall time)
MACHINE = "machine"         # the whole machine (MLflow's system metrics)

UNIT = (0.0, 1.0)
NON_NEGATIVE = (0.0, math.inf)
ANY = (-math.inf, math.inf)

REQUIRED = "every run (required)"       # every tracked training run holds it (tests read it back)
EVERY_BATCH = "every generation batch"  # logged for every method, but not among the required keys

VARIABLE = re.compile(r"<[^>]+>")       # "<benchmark>": one variable part of a name, within one path segment


@dataclass(frozen=True)
class Metric:
    """A metric as MLflow stores it. ``weighting``: what one unit of its mean or fraction is
    (a completion, a group, a token of the loss mask, a micro-batch ...); ``trl``: the TRL 1.16 key
    it mirrors ("" none); ``when``: ``REQUIRED`` or when it is logged; ``stored`` False: a key of
    TRL's that passes through the logging path and that the recorder drops; ``label``: the title of
    its dashboard panel where the default dashboard shows it."""
    name: str
    population: str
    weighting: str
    range: tuple[float, float]
    definition: str
    trl: str = ""
    when: str = EVERY_BATCH
    stored: bool = True
    label: str = ""

    @property
    def is_family(self) -> bool:
        return VARIABLE.search(self.name) is not None

    @property
    def pattern(self) -> re.Pattern:
        """The names the record covers: each ``<...>`` stands for one path segment or part of one."""
        return re.compile("^" + VARIABLE.sub("[^/]+", re.escape(self.name)) + "$")


def range_text(bounds: tuple[float, float]) -> str:
    low, high = bounds
    if high == math.inf:
        return "any" if low == -math.inf else f">= {low:g}"
    return f"[{low:g}, {high:g}]"
