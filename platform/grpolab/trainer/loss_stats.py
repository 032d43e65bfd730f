"""Loss-side statistics reduced over a whole window (a generation batch, or an optimizer step)
and over every process, so a curve means the same with 1 or N processes and does not zigzag
between the fresh and the reused passes over a rollout.

Each statistic is kept as (numerator, denominator): a token mean as (sum over tokens, tokens),
the old-policy probability of upper-clipped tokens as (sum over those tokens, their count), a
count per micro-batch as (count, 1 / processes). The mean reported is sum(num) / sum(den)
over the window and all processes. No TRL here: ``loss_curves.LossCurves``, the trainer's part that
keeps the windows, reads its accelerator and logs through its ``record_curve``.
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


def combine_over_processes(stats: dict, tokens: float, accelerator) -> dict:
    """TRL's own loss-side curves of one micro-batch combined over processes as TRL combines them:
    the token fractions ``clip_ratio/*_mean`` and ``cispo_clip_ratio`` as token-weighted means over
    every process's tokens (TRL's ``global_masked_mean``), ``clip_ratio/low_min`` by nanmin,
    ``clip_ratio/high_max`` by nanmax, the rest (``policy_loss``, ``aux_loss``) by the mean over
    processes. ``tokens``: this process's loss-mask tokens."""
    keys = sorted(stats)
    row = [tokens, *(stats[k] for k in keys)]
    t = torch.tensor(row, dtype=torch.float32, device=accelerator.device)
    t = accelerator.gather(t.unsqueeze(0)).view(-1, len(keys) + 1).double().cpu()
    weights, values = t[:, 0], t[:, 1:]

    def token_weighted(c):
        ok = ~c.isnan() & (weights > 0)
        return (c[ok] * weights[ok]).sum() / weights[ok].sum() if ok.any() else c[0]
    combine = {"clip_ratio/low_min": lambda c: c[~c.isnan()].min() if (~c.isnan()).any() else c[0],
               "clip_ratio/high_max": lambda c: c[~c.isnan()].max() if (~c.isnan()).any() else c[0],
               "clip_ratio/low_mean": token_weighted, "clip_ratio/high_mean": token_weighted,
               "clip_ratio/region_mean": token_weighted, "cispo_clip_ratio": token_weighted}
    return {k: float(combine.get(k, torch.nanmean)(values[:, i])) for i, k in enumerate(keys)}


def gather_valid(accelerator, values: torch.Tensor) -> torch.Tensor:
    """A 1-D tensor of different length on each process -> all of them, on every process."""
    sizes = accelerator.gather(torch.tensor([values.numel()], device=values.device))
    padded = torch.full((int(sizes.max()),), float("nan"), dtype=values.dtype, device=values.device)
    padded[:values.numel()] = values
    gathered = accelerator.gather(padded)
    return gathered[~torch.isnan(gathered)]
