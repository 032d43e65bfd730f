"""Named records of what one generation batch produced, passed between TRL's override hooks.
No TRL here: plain data, plus the per-row tensors the rollout curves are computed from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import torch


class RolloutRow(NamedTuple):
    """One generated completion as the curves and the correctness rules read it. A NamedTuple:
    ``gather_object`` pickles it across processes like the plain tuple TRL gathers."""
    correct: bool
    length: int        # completion tokens returned
    truncated: bool    # no EOS at the end (or empty)
    prompt: Any        # the dataset's prompt (TRL's own where the dataset has none)
    completion: Any


@dataclass
class ScoredRound:
    """``_calculate_rewards``' result of one generation round, gathered over processes in rank
    order: the reward components (N, K) and one RolloutRow per completion."""
    rewards: torch.Tensor
    rows: list[RolloutRow]


@dataclass
class Generated:
    """Every completion generated for one update batch (all dynamic-sampling rounds, before any
    filter): its reward components, rows, and ``(entropy sum, tokens)`` of pi_old (None: the
    loss logs the entropy curve itself)."""
    rewards: torch.Tensor
    rows: list[RolloutRow]
    entropy: torch.Tensor | None


class Round(NamedTuple):
    """One round of TRL's generation and scoring: this process's batch, the round's rewards and
    rows (``ScoredRound``, all processes) and pi_old's (entropy sum, tokens) over this process's
    generated tokens, on the CPU."""
    out: dict
    scored: ScoredRound
    entropy: torch.Tensor


class RolloutView(NamedTuple):
    """A generation batch as the completions table reads it: every process's rows, their reward
    components (N, K) and combined reward (N,), this process's first row and the group size."""
    rows: list[RolloutRow]
    rewards: torch.Tensor
    total: torch.Tensor
    start: int
    G: int


class SampledBatch(NamedTuple):
    """What dynamic sampling hands to the advantage step: this process's rebuilt batch, the kept
    rows' reward components and rows (global, rank order), and the generated population."""
    local: dict
    rewards: torch.Tensor
    rows: list[RolloutRow]
    generated: Generated


# Host tensors from the rows (device="cpu"): callers move them beside the batch they join.
def correct_of(rows: list[RolloutRow]) -> torch.Tensor:
    return torch.tensor([bool(r.correct) for r in rows], device="cpu")


def lengths_of(rows: list[RolloutRow]) -> torch.Tensor:
    return torch.tensor([r.length for r in rows], dtype=torch.float32, device="cpu")


def truncated_of(rows: list[RolloutRow]) -> torch.Tensor:
    return torch.tensor([bool(r.truncated) for r in rows], device="cpu")


def generated_mask(out: dict, rows: list[RolloutRow], start: int, model_only: bool = True) -> torch.Tensor:
    """(n_local, T): ones over each generated completion's tokens (its length from the rollout's
    ``rows``, this process's from ``start``), before the zero-variance filter or TRL's
    ``mask_truncated_completions`` zero rows of the loss's mask; ``model_only``: the model's own
    tokens (tool tokens of multi-turn episodes out)."""
    ids = out["completion_ids"]
    lengths = torch.tensor([r.length for r in rows[start:start + ids.size(0)]], device=ids.device)
    attend = (torch.arange(ids.size(1), device=ids.device).unsqueeze(0) < lengths.unsqueeze(1)).to(out["prompt_mask"].dtype)
    return attend * out["tool_mask"] if model_only and "tool_mask" in out else attend


def completion_rows(rollout: RolloutView, names: list[str], advantages: torch.Tensor, mask: torch.Tensor,
                    limit: int | None = None) -> list[dict]:
    """This process's completions of a rollout as rows of the completions table: the prompt, the
    completion, each reward component (``reward/<name>``), the combined reward, the advantage, the
    length in tokens, the truncated and correct flags, and the group index (the G rows of a group
    share a prompt). ``advantages``: this process's, (n,) or per token (n, T); a per-token advantage is
    reported as its mean over the row's trained tokens, A_i = sum_t A_it m_it / sum_t m_it (None
    where the row trains no token). ``rollout.rewards``: (N, K) components, global, columns named by
    ``names``. ``limit``: only this process's first rows (the table keeps a few per rollout; None: all)."""
    rows, start, G = rollout.rows, rollout.start, rollout.G
    n = advantages.size(0) if limit is None else min(advantages.size(0), limit)
    advantages, mask = advantages[:n], mask[:n]
    if advantages.dim() == 2:
        m = mask.float()
        count = m.sum(1)
        seq = ((advantages.float() * m).sum(1) / count.clamp(min=1)).masked_fill(count == 0, float("nan"))
    else:
        seq = advantages.float()
    adv = seq.detach().cpu().tolist()
    comp = rollout.rewards[start:start + n].float().cpu().tolist()
    tot = rollout.total[start:start + n].float().cpu().tolist()
    return [{"prompt": r.prompt, "completion": r.completion, "reward": tot[i],
             **{f"reward/{name}": comp[i][j] for j, name in enumerate(names)},
             "advantage": None if adv[i] != adv[i] else adv[i], "length": r.length, "truncated": bool(r.truncated),
             "correct": bool(r.correct), "group": (start + i) // G}
            for i, r in enumerate(rows[start:start + n])]
