"""The KL estimators' torch functions, one per entry of ``grpolab.method.kl.KL_ESTIMATORS``.

Each maps log pi_theta and log pi_ref (B, T) to a per-token estimate of KL(pi_theta || pi_ref),
with x = log pi_theta - log pi_ref. Each value's facts are data on the method floor; here each
gets its function, registered by name.
"""

from __future__ import annotations

from typing import Callable

import torch

from grpolab.algorithms.registrar import registrar
from grpolab.method.kl import KL_ESTIMATORS

KL_FUNCTIONS: dict[str, Callable] = {}
register = registrar(KL_ESTIMATORS, KL_FUNCTIONS, "KL estimator", "grpolab.method.kl.KL_ESTIMATORS")


@register("k1")
def k1(x: torch.Tensor) -> torch.Tensor:
    """k1 = x (unbiased, high variance, may be negative)."""
    return x


@register("k2")
def k2(x: torch.Tensor) -> torch.Tensor:
    """k2 = x^2 / 2."""
    return 0.5 * x * x


@register("k3")
def k3(x: torch.Tensor) -> torch.Tensor:
    """k3 = exp(-x) - 1 + x (unbiased for KL(pi_theta || pi_ref) under pi_theta, never negative)."""
    return torch.exp(-x) - 1 + x


def kl_estimate(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str) -> torch.Tensor:
    """Per-token KL estimate under ``estimator`` of x = logp - ref_logp (its function gives the formula)."""
    if estimator not in KL_FUNCTIONS:
        raise ValueError(f"unknown KL estimator {estimator!r}")
    return KL_FUNCTIONS[estimator](logp - ref_logp)
