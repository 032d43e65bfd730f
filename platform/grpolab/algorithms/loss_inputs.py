"""``LossInputs``: the named inputs of one micro-batch's policy loss (``policy_loss(spec, inputs)``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch


@dataclass(frozen=True)
class LossInputs:
    """One micro-batch of B completions padded to T tokens, as ``policy_loss`` reads it.

    logp, old_logp: (B, T) log pi_theta(o_t) and log pi_old(o_t); rho_t = exp(logp - old_logp).
    advantages: (B,) A_i per completion, or (B, T) A_{i,t} per token. mask: (B, T), 1 on the
    tokens the loss trains. ref_logp: (B, T) log pi_ref, read by the KL term (None: no KL).
    token_normaliser: the token count a global aggregation divides by (the generation batch's
    loss tokens per process and micro-step); max_completion_length: L of the constant-length
    aggregations. entropies: (B, T) H_t, a statistic, the entropy bonus's input
    (- entropy_coef * mean_t H_t) and top-entropy selection's score. rewards (B,) and group_ids
    (B,) (the combined reward and the group of each row) are read by pairwise surrogates;
    generator by a surrogate that samples; gather maps this process's values to every
    process's (global quantiles). positive: (B,) which completions are correct (VAPO's
    positive-example LM loss). sampling_weights: (B, T) or (B, 1) importance weight w of a
    sampler that is not the trained policy (vLLM: w = pi_train / pi_vllm); keep: (B, 1) or
    (B, T) of 0/1, rows (tokens) whose surrogate term is dropped (TRL's off-policy mask).
    """

    logp: torch.Tensor
    old_logp: torch.Tensor
    advantages: torch.Tensor
    mask: torch.Tensor
    ref_logp: torch.Tensor | None = None
    token_normaliser: torch.Tensor | float | None = None
    max_completion_length: int | None = None
    entropies: torch.Tensor | None = None
    entropy_coef: float | None = None
    rewards: torch.Tensor | None = None
    group_ids: torch.Tensor | None = None
    generator: torch.Generator | None = None
    gather: Callable[[torch.Tensor], torch.Tensor] | None = None
    positive: torch.Tensor | None = None
    sampling_weights: torch.Tensor | None = None
    keep: torch.Tensor | None = None
