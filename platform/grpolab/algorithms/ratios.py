"""The ratio axis's torch functions, one per entry of ``grpolab.method.ratios``.

Each maps the token log-ratios l_t = log pi_theta(o_t) - log pi_old(o_t) (B, T) and the mask m to
log rho, (B, T) or (B, 1); rho is what the surrogate reads. An entry that replaces the surrogate
(its ``replaces_surrogate``) also registers its per-sequence loss. Each value's facts are data on
the method floor; here each gets its function, registered by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from grpolab.algorithms.losses import geometric_mean_loss
from grpolab.algorithms.registrar import registrar
from grpolab.method.ratios import RATIOS


@dataclass(frozen=True)
class RatioFn:
    log_weights: Callable                 # (log_ratio, mask) -> log rho
    loss: Callable | None = None          # (spec, log_ratio, A, mask) -> per-sequence losses (B, 1)


RATIO_FUNCTIONS: dict[str, RatioFn] = {}


register = registrar(RATIOS, RATIO_FUNCTIONS, "ratio", "grpolab.method.ratios.RATIOS", RatioFn)


def _sequence_mean(log_ratio: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (log_ratio * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp(min=1.0)


@register("token")
def token(log_ratio: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """l_t, shape (B, T)."""
    return log_ratio


@register("sequence")
def sequence(log_ratio: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """GSPO: log s_i = mean_t l_t over valid tokens, shape (B, 1)."""
    return _sequence_mean(log_ratio, mask)


@register("sequence_token")
def sequence_token(log_ratio: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """GSPO-token: log s_i at every token, gradient per token:
    log s_i,t = sg(log s_i) + log pi_t - sg(log pi_t), so exp() equals s_i, shape (B, T)."""
    return _sequence_mean(log_ratio, mask).detach() + log_ratio - log_ratio.detach()


def _geometric_loss(spec, log_ratio, A, mask) -> torch.Tensor:
    return geometric_mean_loss(log_ratio, A, mask, spec.eps_low, spec.eps_high)


@register("geometric", loss=_geometric_loss)
def geometric(log_ratio: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """GMPO: the per-token l_t (its clip counts); its loss, ``geometric_mean_loss``, clips l_t in log
    space and takes the geometric mean per sequence itself."""
    return log_ratio


def log_importance_weights(log_ratio: torch.Tensor, mask: torch.Tensor, granularity: str) -> torch.Tensor:
    """log rho under ratio ``granularity`` (its function's docstring gives the formula)."""
    if granularity not in RATIO_FUNCTIONS:
        raise ValueError(f"unknown ratio granularity {granularity!r}")
    return RATIO_FUNCTIONS[granularity].log_weights(log_ratio, mask)
