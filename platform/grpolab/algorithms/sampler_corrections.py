"""The sampler-correction axis's torch functions, one per entry of ``grpolab.method.sampler_corrections``.

Each maps d (B, T) = (log pi_train - log pi_sampler) * mask, NaN (a log-prob the sampler did not
return) read as 0, and the bounds C_min, C_max to the weight w that multiplies the per-token
policy term: (B, T) per token, (B, 1) per sequence. TRL 1.16 computes w itself on its vLLM path
(``importance_sampling_ratio``); these are its formulas, to test and to reuse.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from grpolab.algorithms.registrar import registrar
from grpolab.method.sampler_corrections import SAMPLER_CORRECTIONS

CORRECTION_FUNCTIONS: dict[str, Callable] = {}
register = registrar(SAMPLER_CORRECTIONS, CORRECTION_FUNCTIONS, "sampler correction", "SAMPLER_CORRECTIONS")


def _masked(w: torch.Tensor, c_min: float | None, c_max: float | None) -> torch.Tensor:
    lo = -math.inf if c_min is None else c_min
    hi = math.inf if c_max is None else c_max
    return w.masked_fill((w < lo) | (w > hi), 0.0)


@register("sequence_mask")
def sequence_mask(d: torch.Tensor, c_min: float | None, c_max: float | None) -> torch.Tensor:
    """MIS: w_i = exp(sum_t d_t), set to 0 when outside [C_min, C_max]. (B, 1)."""
    return _masked(torch.exp(d.sum(-1, keepdim=True)), c_min, c_max)


@register("sequence_truncate")
def sequence_truncate(d: torch.Tensor, c_min: float | None, c_max: float | None) -> torch.Tensor:
    """Sequence-level TIS: w_i = clip(exp(sum_t d_t), C_min, C_max). (B, 1)."""
    return torch.clamp(torch.exp(d.sum(-1, keepdim=True)), min=c_min, max=c_max)


@register("token_mask")
def token_mask(d: torch.Tensor, c_min: float | None, c_max: float | None) -> torch.Tensor:
    """IcePop: w_t = exp(d_t), set to 0 when outside [C_min, C_max]. (B, T)."""
    return _masked(torch.exp(d), c_min, c_max)


@register("token_truncate")
def token_truncate(d: torch.Tensor, c_min: float | None, c_max: float | None) -> torch.Tensor:
    """TIS: w_t = clip(exp(d_t), C_min, C_max). (B, T)."""
    return torch.clamp(torch.exp(d), min=c_min, max=c_max)


@register("none")
def none(d: torch.Tensor, c_min: float | None, c_max: float | None) -> torch.Tensor:
    """No correction: w = 1. (B, 1)."""
    return torch.ones(d.shape[0], 1, dtype=d.dtype, device=d.device)


def sampler_weights(train_logp: torch.Tensor, sampler_logp: torch.Tensor, mask: torch.Tensor, name: str,
                    c_min: float | None, c_max: float | None) -> torch.Tensor:
    """w under correction ``name`` (its function's docstring gives the formula)."""
    if name not in CORRECTION_FUNCTIONS:
        raise ValueError(f"unknown sampler correction {name!r}")
    d = torch.nan_to_num((train_logp - sampler_logp) * mask, nan=0.0)
    return CORRECTION_FUNCTIONS[name](d, c_min, c_max)
