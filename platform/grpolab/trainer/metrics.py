"""Every rollout curve the platform tracks, computed in one place. ``tracking.metric_catalog``
defines them (docs/metrics.md).

Rollout metrics are computed once per generation batch over the whole (all-process) batch;
loss metrics come from ``algorithms.policy_loss`` per micro-batch and are averaged over each
logging window by TRL's ``log``.
"""

from __future__ import annotations

import torch

from grpolab.algorithms.shaping import overlong_buffer

ZERO_VARIANCE_TOL = 1e-6   # a group is zero-variance when max(r) - min(r) <= this


def group_spread(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """max - min reward per group over its scorable rows (NaN: every reward function returned
    None), shape (N / G,); 0 for a group with none."""
    g = rewards.view(-1, group_size).float()
    valid = ~torch.isnan(g)
    high = torch.where(valid, g, float("-inf")).max(1).values
    low = torch.where(valid, g, float("inf")).min(1).values
    return torch.where(valid.any(1), high - low, torch.zeros_like(high))


def soft_penalized_fraction(lengths: torch.Tensor, max_length: int, buffer: int) -> float:
    """Fraction of completions in soft overlong punishment's zone, where DAPO eq. 13 gives a
    penalty < 0: |o| > L_max - L_cache, with L_cache = ``buffer`` (0: 20 % of the cap, as the
    punishment itself, ``algorithms.overlong_buffer``). Truncated completions (|o| = L_max) are
    in it. Computed the same whether or not the method punishes, so it means the same on every
    rung: how many completions the punishment reaches (or would reach)."""
    start = max_length - overlong_buffer(max_length, buffer)
    return (lengths.float() > start).float().mean().item() if lengths.numel() else float("nan")


def rollout_metrics(rewards: torch.Tensor, correct: torch.Tensor, lengths: torch.Tensor,
                    truncated: torch.Tensor, group_size: int, overlong: tuple[int, int] | None = None
                    ) -> dict[str, float]:
    """Curves of one population of completions (groups contiguous blocks of G).

    rewards (N,) total reward; correct (N,) bool from the task verifier; lengths (N,) completion
    tokens incl. EOS; truncated (N,) bool (hit the length cap without EOS); overlong (L_max,
    configured L_cache or 0) adds ``length/soft_penalized_fraction`` and, over the correct
    completions only, ``length/soft_penalized_correct_fraction``. ``length/std`` is the
    spread of lengths (std, N-1) that token-level aggregation weighs differently from sequence-
    level: sum_i sum_t / sum_i |o_i| vs mean_i (1/|o_i|) sum_t. ``groups/zero_variance``
    is about the reward (no policy gradient); ``groups/all_correct`` and ``groups/all_wrong`` are
    about correctness only, whatever the reward shaping adds. ``reward/mean`` and ``reward/std``
    average the scorable completions only (a NaN total: every reward function returned None;
    TRL's ``reward`` curve leaves them out the same way); every other curve counts them all."""
    correct = correct.bool()
    lengths = lengths.float()
    g_c = correct.view(-1, group_size)
    zero_var = group_spread(rewards, group_size) <= ZERO_VARIANCE_TOL  # = not sampling.group_spread > tol
    scored = rewards[~torch.isnan(rewards)]
    out = {
        "reward/mean": scored.mean().item() if scored.numel() else float("nan"),
        "reward/std": scored.std().item() if scored.numel() > 1 else 0.0,
        "accuracy": correct.float().mean().item(),
        "length/mean": lengths.mean().item(),
        "length/correct": lengths[correct].mean().item() if correct.any() else float("nan"),
        "length/incorrect": lengths[~correct].mean().item() if (~correct).any() else float("nan"),
        "length/std": lengths.std().item() if lengths.numel() > 1 else 0.0,
        "length/cv": (lengths.std() / lengths.mean()).item() if lengths.numel() > 1 and lengths.mean() > 0 else 0.0,
        "length/truncated_fraction": truncated.float().mean().item(),
        "groups/zero_variance": zero_var.float().mean().item(),
        "groups/all_correct": g_c.all(1).float().mean().item(),
        "groups/all_wrong": (~g_c.any(1)).float().mean().item(),
        "tokens/generated": lengths.sum().item(),
    }
    if overlong is not None:
        out["length/soft_penalized_fraction"] = soft_penalized_fraction(lengths, *overlong)
        # the premise of soft punishment: it shapes an over-long tail, not the correct answers
        out["length/soft_penalized_correct_fraction"] = soft_penalized_fraction(lengths[correct], *overlong)
    return out


def trained_metrics(rewards: torch.Tensor, correct: torch.Tensor, lengths: torch.Tensor, trained: torch.Tensor,
                    group_size: int, retained: torch.Tensor | None = None) -> dict[str, float]:
    """The same curves over the trained population: the groups the sampling axis kept (all rows
    of the update batch), and, for per-row curves, only rows whose loss mask is not empty
    (``trained``; overlong filtering empties truncated rows). Prefixed ``trained/``. The group
    curves read each group's ``retained`` rows (default all; GFPO rejects the rest, which enter no
    baseline): a group whose retained rewards agree trains with A = 0 whatever its rejected rows got."""
    trained, correct, lengths = trained.bool(), correct.bool(), lengths.float()
    retained = torch.ones_like(correct) if retained is None else retained.bool()
    in_group = rewards.float().masked_fill(~retained, float("nan"))
    kept_correct, kept_wrong = (correct & retained).view(-1, group_size), (~correct & retained).view(-1, group_size)
    out = {"trained/groups/zero_variance": (group_spread(in_group, group_size) <= ZERO_VARIANCE_TOL).float().mean().item(),
           "trained/groups/all_correct": (~kept_wrong.any(1)).float().mean().item(),
           "trained/groups/all_wrong": (~kept_correct.any(1)).float().mean().item()}
    if trained.any():
        rows = rollout_metrics(rewards[trained], correct[trained], lengths[trained], trained[trained], 1)
        for key in ("reward/mean", "accuracy", "length/mean", "length/correct", "length/incorrect"):
            out[f"trained/{key}"] = rows[key]
    out["trained/rows_fraction"] = trained.float().mean().item()
    return out


# Prefixes of the curves that measure wall-clock time (``key.startswith(MEASURED_TIME)``): two runs of
# one configuration never log equal values, so a resumed run equals an undisturbed one in every curve
# except these (and MLflow's system/* samples).
MEASURED_TIME = ("step_time", "time/")
