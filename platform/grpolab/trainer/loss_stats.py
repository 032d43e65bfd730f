"""Loss-side statistics reduced over a whole window (a generation batch, or an optimizer step)
and over every process, so a curve means the same with 1 or N processes and does not zigzag
between the fresh and the reused passes over a rollout.

Each statistic is kept as (numerator, denominator): a token mean as (sum over tokens, tokens),
the old-policy probability of upper-clipped tokens as (sum over those tokens, their count), a
count per micro-batch as (count, 1 / processes). The mean reported is sum(num) / sum(den)
over the window and all processes. No TRL here; the trainer passes a cross-process sum.
"""

from __future__ import annotations

import math

import torch

from grpolab.tracking.metric_catalog import weighted_by

# statistic -> how it is weighted (the catalog's weighting); "tokens" unless listed
PER_MICRO_BATCH = weighted_by("micro-batch")
PER_HIGH_CLIPPED = weighted_by("upper-clipped token")


def weighted(stats: dict[str, float], tokens: float, processes: int) -> dict[str, tuple[float, float]]:
    """(num, den) per statistic of one micro-batch with ``tokens`` valid (loss-mask) tokens."""
    out = {}
    for key, value in stats.items():
        if isinstance(value, float) and math.isnan(value):
            continue   # NaN marks an empty population in this micro-batch (e.g. no correct completion): no data
        if key in PER_MICRO_BATCH:
            out[key] = (float(value), 1.0 / processes)
        elif key in PER_HIGH_CLIPPED:
            n_high = stats.get("clip/high_fraction", 0.0) * tokens
            out[key] = (0.0, 0.0) if math.isnan(value) or n_high == 0 else (value * n_high, n_high)
        else:
            out[key] = (float(value) * tokens, tokens)
    return out


class WindowStats:
    """Accumulates (num, den) pairs until ``emit`` reduces them over processes."""

    def __init__(self):
        self.sums: dict[str, list[float]] = {}

    def add(self, pairs: dict[str, tuple[float, float]]) -> None:
        for key, (num, den) in pairs.items():
            acc = self.sums.setdefault(key, [0.0, 0.0])
            acc[0] += num
            acc[1] += den

    def emit(self, reduce_sum=None) -> dict[str, float]:
        """Means over the window (and over processes through ``reduce_sum``, which every process
        must call with the same keys); keys whose denominator is 0 are left out. Resets."""
        keys = sorted(self.sums)
        self.sums, sums = {}, self.sums
        if not keys:
            return {}
        t = torch.tensor([sums[k] for k in keys], dtype=torch.float64, device="cpu")   # reduce_sum moves it
        if reduce_sum is not None:
            t = reduce_sum(t)
        return {k: float(n / d) for k, (n, d) in zip(keys, t.tolist()) if d > 0}
