"""The sampling settings' torch functions, one per entry of ``grpolab.method.sampling_options``.

A group filter maps the total reward r (N,) and the verifier's correctness c (N,) to the per-row
values a group must disagree on to be kept; a cap policy maps the rewards by group (n, G), the
informative groups and the number of groups needed to the groups trained when the round cap is hit;
a GFPO metric maps lengths |o| and rewards r, both (n, G), to a score whose largest ``gfpo_keep``
per group are retained. The trainer's hooks that call them: ``grpolab.trainer.sampling``.
"""

from __future__ import annotations

from typing import Callable

import torch

from grpolab.algorithms.registrar import registrar
from grpolab.method.sampling_options import CAP_POLICIES, GFPO_METRICS, SAMPLING_FILTERS

FILTER_FUNCTIONS: dict[str, Callable] = {}
CAP_FUNCTIONS: dict[str, Callable] = {}
GFPO_SCORES: dict[str, Callable] = {}
register_filter = registrar(SAMPLING_FILTERS, FILTER_FUNCTIONS, "sampling filter", "SAMPLING_FILTERS")
register_cap = registrar(CAP_POLICIES, CAP_FUNCTIONS, "cap policy", "CAP_POLICIES")
register_score = registrar(GFPO_METRICS, GFPO_SCORES, "gfpo metric", "GFPO_METRICS")


class SamplingCapError(RuntimeError):
    """Dynamic sampling hit its round cap with too few informative groups (policy ``fail``)."""


@register_filter("accuracy")
def accuracy(total_reward: torch.Tensor, correct: torch.Tensor) -> torch.Tensor:
    """DAPO eq. 11, 0 < #correct < G: the values are c_i (float), so length shaping cannot rescue an
    all-wrong group."""
    return correct.to(total_reward.device, torch.float32)


@register_filter("reward")
def reward(total_reward: torch.Tensor, correct: torch.Tensor) -> torch.Tensor:
    """verl's newer default: the values are the total shaped reward r_i."""
    return total_reward


@register_cap("fill")
def fill(by_group: torch.Tensor, informative: torch.Tensor, target: int) -> torch.Tensor:
    """The informative groups, then the others by descending reward std (ties: generation order)
    up to ``target`` groups."""
    std = by_group.std(1)
    kept = set(informative.tolist())
    rest = torch.tensor([i for i in range(by_group.size(0)) if i not in kept], device=by_group.device, dtype=torch.long)
    order = rest[torch.argsort(std[rest], descending=True, stable=True)]
    return torch.cat([informative, order[:target - len(informative)]])


@register_cap("fail")
def fail(by_group: torch.Tensor, informative: torch.Tensor, target: int) -> torch.Tensor:
    """Raise ``SamplingCapError``: a batch of informative groups only, or none."""
    raise SamplingCapError(
        f"dynamic sampling found {len(informative)} informative groups of {target} needed within the round cap; "
        "raise method.max_sampling_rounds, ease the task, or set method.sampling_cap_policy=fill")


@register_score("length")
def length(lengths: torch.Tensor, rewards: torch.Tensor) -> torch.Tensor:
    """score_i = -|o_i|: the shortest are retained."""
    return -lengths


@register_score("token_efficiency")
def token_efficiency(lengths: torch.Tensor, rewards: torch.Tensor) -> torch.Tensor:
    """score_i = r_i / max(|o_i|, 1), an unscored r_i (NaN) read as -inf: the largest reward per token."""
    return torch.nan_to_num(rewards.float(), nan=-float("inf")) / lengths.clamp(min=1.0)
