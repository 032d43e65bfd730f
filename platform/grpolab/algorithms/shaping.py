"""Reward shaping that depends on completion length. Pure torch."""

from __future__ import annotations

import math

import torch


def overlong_buffer(max_length: int, buffer: int = 0) -> int:
    """L_cache of DAPO eq. 13: ``buffer`` tokens when set, else DAPO's ratio 4096 / 20480 = 20 %
    of the hard cap, rounded up, at least 1."""
    if max_length < 1 or buffer < 0:
        raise ValueError(f"overlong buffer: need max_length >= 1 and buffer >= 0, got {max_length}, {buffer}")
    return buffer or max(1, math.ceil(0.2 * max_length))


def soft_overlong_penalty(lengths: torch.Tensor, max_length: int, buffer: int, penalty: float = 1.0) -> torch.Tensor:
    """DAPO eq. 13, with hard cap L_max = ``max_length`` and buffer L_cache = ``buffer``:
        R(|o|) = 0                                  if |o| <= L_max - L_cache
               = ((L_max - L_cache) - |o|) / L_cache  if L_max - L_cache < |o| <= L_max
               = -1                                 if |o| > L_max
    scaled by ``penalty``. Added to the task reward."""
    lengths = lengths.to(torch.float32)
    start = max_length - buffer
    ramp = (start - lengths) / buffer
    out = torch.where(lengths <= start, torch.zeros_like(lengths), ramp)
    out = torch.where(lengths > max_length, torch.full_like(lengths, -1.0), out)
    return out * penalty
