"""Dynamic sampling (DAPO), zero-variance filtering and GFPO's group filter: the pure part, no TRL.

DAPO keeps only groups whose rewards disagree (0 < #correct < G for binary rewards): a
zero-variance group has A = 0 everywhere and only dilutes the batch. The trainer generates
rounds of fresh groups until ``target`` informative groups exist or ``max_rounds`` is hit;
these functions decide which groups to keep and rebuild one padded batch from the rounds.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from grpolab.algorithms import combine_rewards
from grpolab.algorithms.sampling_options import CAP_FUNCTIONS, FILTER_FUNCTIONS, GFPO_SCORES
from grpolab.trainer.metrics import ZERO_VARIANCE_TOL, group_spread  # one definition of a zero-variance group

# Row-aligned tensors and how to pad them when batches of different widths are joined.
LEFT_PADDED = ("prompt_ids", "prompt_mask")
RIGHT_PADDED = ("completion_ids", "completion_mask", "old_per_token_logps", "ref_per_token_logps",
                "sampling_per_token_logps", "importance_sampling_ratio", "tool_mask")
RECOMPUTED = ("advantages", "num_items_in_batch")


def filter_values(name: str, total_reward: torch.Tensor, correct: torch.Tensor) -> torch.Tensor:
    """What a group must disagree on to be kept, per ``method.sampling_filter`` (its function in
    ``grpolab.algorithms.sampling_options`` gives the formula)."""
    if name not in FILTER_FUNCTIONS:
        raise ValueError(f"unknown sampling filter {name!r}; valid: {', '.join(FILTER_FUNCTIONS)}")
    return FILTER_FUNCTIONS[name](total_reward, correct)


def select_groups(rewards: torch.Tensor, group_size: int, target: int, policy: str) -> tuple[torch.Tensor, int]:
    """Indices of ``target`` groups to train on, and how many of them are degenerate fill-ins.

    Informative groups (spread > tol) are taken in generation order. If fewer than ``target``
    exist, cap policy ``policy`` decides (its function in ``grpolab.algorithms.sampling_options``:
    ``fill`` tops up with the least degenerate groups, ``fail`` raises SamplingCapError)."""
    if policy not in CAP_FUNCTIONS:
        raise ValueError(f"unknown cap policy {policy!r}; valid: {', '.join(CAP_FUNCTIONS)}")
    spread = group_spread(rewards, group_size)
    informative = (spread > ZERO_VARIANCE_TOL).nonzero().view(-1)
    if len(informative) >= target:
        return informative[:target], 0
    return CAP_FUNCTIONS[policy](rewards.view(-1, group_size), informative, target), target - len(informative)


def rows_of_groups(groups: torch.Tensor, group_size: int) -> torch.Tensor:
    """Rows (n * G,) of ``groups`` (n,) in a batch of contiguous groups of G, on the groups' device."""
    return (groups.view(-1, 1) * group_size + torch.arange(group_size, device=groups.device)).view(-1)


class PromptDraws:
    """Which training prompts dynamic sampling's extra rounds use: a CPU generator (the same picks
    on every device) seeded per process, so ranks draw different prompts; made at the first draw."""

    def __init__(self, seed: int, rank: int):
        self.seed = seed * 7919 + rank
        self.generator: torch.Generator | None = None

    def draw(self, n_prompts: int, n_available: int) -> torch.Tensor:
        """(n_prompts,) dataset indices, on the CPU."""
        if self.generator is None:
            self.generator = torch.Generator().manual_seed(self.seed)
        return torch.randint(n_available, (n_prompts,), device="cpu", generator=self.generator)

    def state_dict(self) -> dict:
        return {"generator": None if self.generator is None else self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.generator = None
        if state["generator"] is not None:
            self.generator = torch.Generator()
            self.generator.set_state(state["generator"])


def _pad_to(t: torch.Tensor, width: int, left: bool, value) -> torch.Tensor:
    extra = width - t.size(1)
    if extra <= 0:
        return t
    pad = torch.full((t.size(0), extra), value, dtype=t.dtype, device=t.device)
    return torch.cat([pad, t] if left else [t, pad], dim=1)


def concat_batches(batches: list[dict], pad_token_id: int) -> dict:
    """Join row-aligned batches: prompts re-padded on the left, completions on the right."""
    keys = set(batches[0])
    unknown = keys - set(LEFT_PADDED) - set(RIGHT_PADDED) - set(RECOMPUTED)
    if unknown:
        raise NotImplementedError(f"dynamic sampling cannot merge batch fields {sorted(unknown)} (multimodal/tools)")
    out = {}
    for key in keys - set(RECOMPUTED):
        parts = [b[key] for b in batches]
        width = max(p.size(1) for p in parts)
        left = key in LEFT_PADDED
        value = pad_token_id if key in ("prompt_ids", "completion_ids") else 0
        out[key] = torch.cat([_pad_to(p, width, left, value) for p in parts], dim=0)
    return out


def take_rows(batch: dict, rows: torch.Tensor) -> dict:
    """Rows of a joined batch, trimmed of columns that became all padding."""
    out = {k: v[rows.to(v.device)] for k, v in batch.items()}
    keep_c = out["completion_mask"].sum(0) > 0
    width_c = int(keep_c.nonzero().max()) + 1 if keep_c.any() else 1
    keep_p = out["prompt_mask"].sum(0) > 0
    start_p = int(keep_p.nonzero().min()) if keep_p.any() else 0
    for k in list(out):
        if k in RIGHT_PADDED:
            out[k] = out[k][:, :width_c]
        elif k in LEFT_PADDED:
            out[k] = out[k][:, start_p:]
    return out


def gfpo_retained(lengths: torch.Tensor, rewards: torch.Tensor, group_size: int, keep: int,
                  metric: str) -> torch.Tensor:
    """GFPO (Shrivastava et al. 2025, arXiv:2508.09726): in each group of G completions, retain the
    ``keep`` best by ``metric`` (its score in ``grpolab.algorithms.sampling_options``: length, the
    shortest |o_i|; token_efficiency, the largest r_i / |o_i|) and reject the rest (the caller gives
    them advantage 0 and leaves them out of the group's mean and std, and of the loss). Ties go to the
    earlier completion. A row with no loss tokens (length 0: a truncated completion under
    overlong_filter, whose mask TRL has already zeroed) ranks last: it cannot train, so it must not
    take a keep slot from one that can. Returns a bool (N,) mask of retained rows."""
    if not 2 <= keep < group_size:
        raise ValueError(f"method.gfpo_keep={keep}: must be in [2, group_size) = [2, {group_size})")
    if metric not in GFPO_SCORES:
        raise ValueError(f"unknown gfpo metric {metric!r}; valid: {', '.join(GFPO_SCORES)}")
    lengths = lengths.float().view(-1, group_size)
    score = GFPO_SCORES[metric](lengths, rewards.view(-1, group_size))
    score = score.masked_fill(lengths <= 0, -float("inf"))
    order = torch.sort(score, dim=1, descending=True, stable=True).indices[:, :keep]
    retained = torch.zeros_like(score, dtype=torch.bool).scatter_(1, order, True)
    return retained.view(-1)


class GfpoFiltered(NamedTuple):
    rewards: torch.Tensor    # the gathered rewards, NaN on rejected rows (out of every baseline, A = 0)
    kept_fraction: float     # retained / generated completions
    length_gap: float        # mean rejected length - mean retained length (tokens)
    retained: torch.Tensor   # bool (N,) over the gathered batch: the rows in the baselines


def gfpo_filter(out: dict, rewards: torch.Tensor, spec, group_size: int, start: int, gather) -> GfpoFiltered:
    """GFPO on one generation batch: choose the retained completions on the gathered lengths and
    rewards (``gfpo_retained``), mask this process's rejected rows (from ``start``) out of the loss
    and its token count (``out`` changed in place), and mark them NaN in ``rewards``, which the
    group estimators read as "out of the baseline, advantage 0" (as TRL treats unscorable rows)."""
    mask = out["completion_mask"] * out.get("tool_mask", 1)
    lengths = gather(mask.sum(1).float())
    total = combine_rewards(rewards, spec.reward_weights)
    retained = gfpo_retained(lengths.cpu(), total.cpu(), group_size, spec.gfpo_keep, spec.gfpo_metric)
    local = retained[start:start + mask.size(0)].to(mask.device)
    out["completion_mask"] = out["completion_mask"] * local.unsqueeze(1).to(out["completion_mask"].dtype)
    local_items = (out["completion_mask"] * out.get("tool_mask", 1)).sum()
    out["num_items_in_batch"] = gather(local_items.unsqueeze(0)).sum()
    filtered = rewards.clone().float()
    filtered[~retained.to(filtered.device)] = float("nan")
    lengths = lengths.cpu()
    gap = float(lengths[~retained].mean() - lengths[retained].mean())
    return GfpoFiltered(filtered, float(retained.float().mean()), gap, retained)
