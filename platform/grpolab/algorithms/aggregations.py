"""The aggregation axis's torch functions, one per entry of ``grpolab.method.aggregations``.

Each maps per-token losses L (B, T) or (B, 1), broadcast to the mask m (B, T), to the
micro-batch's scalar loss. Each value's facts (source, normaliser kind, TRL name) are data on the
method floor; here each gets its function, registered by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from grpolab.algorithms.registrar import registrar
from grpolab.method.aggregations import AGGREGATIONS


@dataclass(frozen=True)
class Normalisers:
    """What an aggregation may read beyond the micro-batch (its entry's ``reads``)."""
    token_normaliser: float | torch.Tensor | None = None   # valid tokens of the generation batch per micro-batch
    max_completion_length: int | None = None


AGGREGATION_FUNCTIONS: dict[str, Callable] = {}


# one function per entry of AGGREGATIONS
register = registrar(AGGREGATIONS, AGGREGATION_FUNCTIONS, "aggregation", "grpolab.method.aggregations.AGGREGATIONS")


@register("seq_mean_token_mean")
def seq_mean_token_mean(masked: torch.Tensor, mask: torch.Tensor, n: Normalisers) -> torch.Tensor:
    """GRPO: (1/B) sum_i sum_t L_it m_it / |o_i|."""
    return (masked.sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()


@register("token_mean")
def token_mean(masked: torch.Tensor, mask: torch.Tensor, n: Normalisers) -> torch.Tensor:
    """DAPO: sum_it L_it m_it / N_tok, N_tok = ``token_normaliser`` (the valid tokens of the global
    batch per micro-batch; this micro-batch's own count if None)."""
    denom = mask.sum() if n.token_normaliser is None else n.token_normaliser
    return masked.sum() / (denom.clamp(min=1.0) if torch.is_tensor(denom) else max(float(denom), 1.0))


@register("token_mean_local")
def token_mean_local(masked: torch.Tensor, mask: torch.Tensor, n: Normalisers) -> torch.Tensor:
    """TRL "bnpo": sum_it L_it m_it / valid tokens of this micro-batch."""
    return masked.sum() / mask.sum().clamp(min=1.0)


@register("seq_mean_token_sum")
def seq_mean_token_sum(masked: torch.Tensor, mask: torch.Tensor, n: Normalisers) -> torch.Tensor:
    """LUSPO: (1/B) sum_i sum_t L_it m_it: a sequence-level loss weighted by its length |o_i|
    (GSPO's per-sequence term times |o_i|; TRL "luspo")."""
    return masked.sum(-1).mean()


@register("seq_mean_token_sum_norm")
def seq_mean_token_sum_norm(masked: torch.Tensor, mask: torch.Tensor, n: Normalisers) -> torch.Tensor:
    """Dr. GRPO: sum_it L_it m_it / (B * max_completion_length)."""
    if n.max_completion_length is None:
        raise ValueError("seq_mean_token_sum_norm needs max_completion_length")
    return masked.sum() / (masked.size(0) * n.max_completion_length)


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, mode: str,
              token_normaliser: float | torch.Tensor | None = None,
              max_completion_length: int | None = None) -> torch.Tensor:
    """The scalar loss of per-token losses ``per_token`` under aggregation ``mode`` (its function's
    docstring gives the formula)."""
    if mode not in AGGREGATION_FUNCTIONS:
        raise ValueError(f"unknown aggregation {mode!r}")
    per_token = per_token.expand_as(mask) if per_token.shape != mask.shape else per_token
    return AGGREGATION_FUNCTIONS[mode](per_token * mask, mask, Normalisers(token_normaliser, max_completion_length))
