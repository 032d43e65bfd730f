"""The surrogate axis's torch functions, one per entry of ``grpolab.method.surrogates``.

Each value's facts (what it reads, when it acts, its clip, its TRL name) are data on the method
floor; here each gets its function, registered by name (as verl registers its policy losses).
A per-token function maps one micro-batch to per-token losses (B, T) or (B, 1), aggregated by
``policy_loss``; a pairwise one (Group-DPO) returns the micro-batch's loss itself.
Formulas: the docstrings of ``grpolab.algorithms.losses``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from grpolab.algorithms import losses as L
from grpolab.algorithms.ratios import RATIO_FUNCTIONS
from grpolab.algorithms.registrar import registrar
from grpolab.method.ratios import RATIOS
from grpolab.method.surrogates import SURROGATES


@dataclass
class Batch:
    """One micro-batch as a surrogate reads it: (B, T) unless said."""
    logp: torch.Tensor
    log_ratio: torch.Tensor                     # log pi_theta - log pi_old
    coef: torch.Tensor                          # the importance ratio rho, (B, T) or (B, 1) by spec.ratio
    A: torch.Tensor                             # advantages, (B, 1) or (B, T)
    mask: torch.Tensor
    generator: torch.Generator | None = None
    sampling_weights: torch.Tensor | None = None   # (B, T) or (B, 1): pi_train / pi_sampler (vLLM)
    ref_logp: torch.Tensor | None = None
    rewards: torch.Tensor | None = None         # (B,)
    group_ids: torch.Tensor | None = None       # (B,)


@dataclass(frozen=True)
class SurrogateLoss:
    fn: Callable                      # (spec, Batch, stats) -> per-token loss, or the loss when pairwise
    pairwise: bool = False            # returns the aggregated loss: no aggregation, KL term or sampler weight
    own_sampler_weight: bool = False  # folds the sampler's weight into its own instead of being multiplied by it


SURROGATE_LOSSES: dict[str, SurrogateLoss] = {}


register = registrar(SURROGATES, SURROGATE_LOSSES, "surrogate", "grpolab.method.surrogates.SURROGATES", SurrogateLoss)


def masked_mean(x: torch.Tensor, m: torch.Tensor) -> float:
    x = x.expand_as(m) if x.shape != m.shape else x
    return float((x.float() * m).sum() / m.sum().clamp(min=1.0))


@register("clip")
def clip(spec, b: Batch, stats) -> torch.Tensor:
    return L.clip_surrogate(b.coef, b.A, spec.eps_low, spec.eps_high)


@register("dual_clip")
def dual_clip(spec, b: Batch, stats) -> torch.Tensor:
    return L.dual_clip_surrogate(b.coef, b.A, spec.eps_low, spec.eps_high, spec.dual_clip_c)


@register("cispo")
def cispo(spec, b: Batch, stats) -> torch.Tensor:
    return L.cispo_surrogate(b.coef, b.A, b.logp, spec.eps_low, spec.eps_high)


@register("sapo")
def sapo(spec, b: Batch, stats) -> torch.Tensor:
    """SAPO applies no clip: its soft gate is reported instead, the factor on the unclipped
    gradient w = 4 s (1 - s), s = sigmoid(tau (rho - 1)): ``sapo/gate_mean`` and
    ``sapo/gate_below_half`` over valid tokens."""
    coef, A_full = b.coef.detach().expand_as(b.mask), b.A.expand_as(b.mask)
    tau = torch.where(A_full > 0, torch.full_like(A_full, spec.sapo_tau_pos), torch.full_like(A_full, spec.sapo_tau_neg))
    gate = torch.sigmoid(tau * (coef - 1))
    weight = 4 * gate * (1 - gate)
    stats["sapo/gate_mean"] = masked_mean(weight, b.mask)
    stats["sapo/gate_below_half"] = masked_mean(weight < 0.5, b.mask)
    return L.sapo_surrogate(b.coef, b.A, spec.sapo_tau_pos, spec.sapo_tau_neg)


@register("reinforce")
def reinforce(spec, b: Batch, stats) -> torch.Tensor:
    return L.reinforce_surrogate(b.A, b.logp)


@register("vespo", own_sampler_weight=True)
def vespo(spec, b: Batch, stats) -> torch.Tensor:
    log_sampler = None
    if b.sampling_weights is not None:   # vLLM's pi_old / pi_sampler, per token or per sequence, in log space
        log_is = torch.clamp(torch.log(b.sampling_weights.to(b.log_ratio.dtype)), L.VESPO_LOG_W_MIN, L.VESPO_LOG_W_MAX)
        log_sampler = (log_is * b.mask if log_is.shape == b.mask.shape else log_is).sum(-1, keepdim=True)
    phi = L.vespo_weights(b.log_ratio, b.A, b.mask, spec.vespo_k_pos, spec.vespo_lambda_pos, spec.vespo_k_neg,
                          spec.vespo_lambda_neg, log_sampler)
    stats["vespo/phi_seq_mean"] = float(phi.mean()) if phi.shape[-1] == 1 else masked_mean(phi, b.mask)
    return L.vespo_surrogate(phi, b.A, b.logp)


def _old_kl(b: Batch, stats) -> None:
    """verl's ``actor/ppo_kl``: the mean over valid tokens of log pi_old - log pi."""
    stats["policy/old_kl"] = masked_mean(-b.log_ratio.detach(), b.mask)


def _dppo(divergence: str):
    def fn(spec, b: Batch, stats) -> torch.Tensor:
        """DPPO reports the tokens its divergence mask dropped (``dppo/masked_fraction``, verl's
        pg_clipfrac) and the kept tokens whose ratio exceeded the IS cap (``dppo/truncated_fraction``,
        verl's pg_clipfrac_lower)."""
        verdict = L.dppo_mask(b.logp, b.logp.detach() - b.log_ratio.detach(), b.A.expand_as(b.mask), spec.eps_low,
                              spec.eps_high, spec.dual_clip_c, divergence)
        stats["dppo/masked_fraction"] = masked_mean(1.0 - verdict.keep, b.mask)
        stats["dppo/truncated_fraction"] = masked_mean((verdict.ratio > spec.dual_clip_c).float() * verdict.keep, b.mask)
        _old_kl(b, stats)
        return L.dppo_surrogate(verdict, b.A, b.logp)
    return fn


for _divergence in ("tv", "kl"):
    register(f"dppo_{_divergence}")(_dppo(_divergence))


@register("dro")
def dro(spec, b: Batch, stats) -> torch.Tensor:
    _old_kl(b, stats)
    return L.dro_surrogate(b.A, b.logp, b.log_ratio, spec.dro_beta)


@register("clip_cov")
def clip_cov(spec, b: Batch, stats) -> torch.Tensor:
    loss, sel = L.clip_cov_loss(b.coef, b.A, b.logp, b.mask, spec.eps_low, spec.eps_high, spec.cov_fraction,
                                spec.cov_low, spec.cov_high, b.generator)
    stats["cov/selected_fraction"] = masked_mean(sel, b.mask)
    return loss


@register("kl_cov")
def kl_cov(spec, b: Batch, stats) -> torch.Tensor:
    loss, sel = L.kl_cov_loss(b.coef, b.A, b.logp, b.log_ratio, b.mask, spec.cov_fraction, spec.kl_cov_coef)
    stats["cov/selected_fraction"] = masked_mean(sel, b.mask)
    return loss


@register("group_dpo", pairwise=True)
def group_dpo(spec, b: Batch, stats) -> torch.Tensor:
    if b.ref_logp is None or b.rewards is None or b.group_ids is None:
        raise ValueError("group_dpo needs ref_logp, rewards and group_ids")
    loss, pairs = L.group_dpo_loss(b.logp, b.ref_logp, b.mask, b.rewards, b.group_ids, spec.dpo_beta)
    stats["dpo/pairs"] = float(pairs)
    return loss


def surrogate_loss(spec, logp, log_ratio, A, mask, stats, generator, sampling_weights=None):
    """Per-token (or per-sequence) surrogate loss and the ratio it used. A ratio whose entry
    ``replaces_surrogate`` (GMPO clips in log space itself) brings its own loss (validation: surrogate clip)."""
    ratio = RATIO_FUNCTIONS[spec.ratio]
    coef = torch.exp(ratio.log_weights(log_ratio, mask))
    if ratio.loss is not None:
        return ratio.loss(spec, log_ratio, A, mask), coef
    batch = Batch(logp, log_ratio, coef, A, mask, generator, sampling_weights)
    return SURROGATE_LOSSES[spec.surrogate].fn(spec, batch, stats), coef


LOW_OLD_PROB = 0.2   # DAPO Fig. 3a: the up-clipped tokens' old-policy probability stays below 0.2


def clip_stats(spec, coef, A, old_logp, mask, stats) -> None:
    """Fractions of valid (trained) tokens whose update a clip changed, one meaning for every
    surrogate that clips (its entry's ``clip``; per sequence for a sequence-level ratio, broadcast):
      ppo (PPO clip, Clip-Cov, GSPO, GMPO in log space): low = rho < 1 - eps_low with A < 0,
        high = rho > 1 + eps_high with A > 0 (the gradient is cut);
      dual: also dual = rho > c with A < 0 (the loss is capped), counted in the region;
      truncate (CISPO): the IS weight is truncated whatever the sign of A (as verl counts it):
        low = rho < 1 - eps_low, high = rho > 1 + eps_high.
    region = low | high | dual. ``clip/low_old_prob_fraction``: valid tokens whose old-policy
    probability is below ``LOW_OLD_PROB`` (whether the clip has low-probability tokens to act on).
    Surrogates without a clip (REINFORCE, KL-Cov, Group-DPO, VESPO,
    SAPO, whose gate its function reports) report no clip fraction."""
    kind = SURROGATES[spec.surrogate].clip
    if kind is None:
        return
    coef = coef.expand_as(mask) if coef.shape != mask.shape else coef
    A_full = A.expand_as(mask)
    if RATIOS[spec.ratio].log_space_clip:
        low_b, high_b = math.exp(-spec.eps_low), math.exp(spec.eps_high)
    else:
        low_b, high_b = 1 - spec.eps_low, 1 + spec.eps_high
    if kind == "truncate":
        low, high = coef < low_b, coef > high_b
    else:
        low, high = (coef < low_b) & (A_full < 0), (coef > high_b) & (A_full > 0)
    region = low | high
    if kind == "dual":
        dual = (coef > spec.dual_clip_c) & (A_full < 0)
        stats["clip/dual_fraction"] = masked_mean(dual, mask)
        region = region | dual
    stats["clip/low_fraction"] = masked_mean(low, mask)
    stats["clip/high_fraction"] = masked_mean(high, mask)
    stats["clip/region_fraction"] = masked_mean(region, mask)
    _trl_clip_stats(spec, coef, A_full, low, high, mask, stats)
    high_m = high.to(mask.dtype) * mask
    n_high = float(high_m.sum())
    stats["clip/high_old_prob"] = float((torch.exp(old_logp) * high_m).sum() / n_high) if n_high else float("nan")
    # DAPO Fig. 3a's premise: the sampled tokens include low-probability ones the upper clip can act on
    stats["clip/low_old_prob_fraction"] = masked_mean(torch.exp(old_logp) < LOW_OLD_PROB, mask)


def _trl_clip_stats(spec, coef, A_full, low, high, mask, stats) -> None:
    """TRL's own clip curves (``tracking.metric_catalog.trl_loss_keys``), as its ``_compute_loss``
    defines them."""
    if SURROGATES[spec.surrogate].clip == "truncate":
        stats["cispo_clip_ratio"] = masked_mean((coef > 1 + spec.eps_high) & (A_full > 0), mask)
        return
    stats["clip_ratio/low_mean"] = stats["clip/low_fraction"]
    stats["clip_ratio/high_mean"] = stats["clip/high_fraction"]
    stats["clip_ratio/region_mean"] = masked_mean(low | high, mask)
    tokens = mask.sum(-1)
    rows = tokens > 0   # NaN when no row has a valid token (TRL: nanmin / nanmax over sequences)
    low_seq, high_seq = ((low.float() * mask).sum(-1) / tokens)[rows], ((high.float() * mask).sum(-1) / tokens)[rows]
    stats["clip_ratio/low_min"] = float(low_seq.min()) if rows.any() else float("nan")
    stats["clip_ratio/high_max"] = float(high_seq.max()) if rows.any() else float("nan")
