"""Surrogates (the importance ratios: ``algorithms/ratios.py``; the KL estimators: ``algorithms/kl.py``). Pure torch, no TRL.

Notation: l_t = log pi_theta(o_t) - log pi_old(o_t), rho_t = exp(l_t), mask m, A advantage
(broadcast (B, 1) or per token (B, T)). Every function returns per-token losses (B, T) or
(B, 1); ``aggregate`` (the aggregation axis's registry, ``algorithms/aggregations.py``) turns
them into a scalar.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from grpolab.algorithms.aggregations import aggregate  # noqa: F401  (the per-token losses' one reduction)

# --- surrogates ----------------------------------------------------------------------------

def clip_surrogate(coef: torch.Tensor, A: torch.Tensor, eps_low: float, eps_high: float) -> torch.Tensor:
    """PPO clip: max(-A rho, -A clip(rho, 1 - eps_low, 1 + eps_high))."""
    return -torch.min(coef * A, torch.clamp(coef, 1 - eps_low, 1 + eps_high) * A)


def dual_clip_surrogate(coef, A, eps_low: float, eps_high: float, c: float) -> torch.Tensor:
    """Dual-clip PPO: the clip loss, and for A < 0 also capped at -A * c (c > 1)."""
    loss = clip_surrogate(coef, A, eps_low, eps_high)
    return torch.where(A < 0, torch.min(loss, -A * c), loss)


def cispo_surrogate(coef, A, logp, eps_low: float, eps_high: float) -> torch.Tensor:
    """CISPO (MiniMax-M1, 2506.13585): -sg(clip(rho, 1 - eps_low, 1 + eps_high)) * A * log pi.
    The IS weight is clipped and detached, so no token's gradient is ever dropped."""
    return -torch.clamp(coef, 1 - eps_low, 1 + eps_high).detach() * A * logp


def sapo_surrogate(coef, A, tau_pos: float, tau_neg: float) -> torch.Tensor:
    """SAPO (2511.20347): -(4 / tau) * sigmoid(tau * (rho - 1)) * A, tau = tau_pos if A > 0 else tau_neg.
    A smooth gate instead of a hard clip: its gradient at rho = 1 equals the unclipped one."""
    tau = torch.where(A > 0, torch.full_like(A, tau_pos), torch.full_like(A, tau_neg))
    return -torch.sigmoid(tau * (coef - 1)) * 4 / tau * A


VESPO_LOG_W_MIN, VESPO_LOG_W_MAX = math.log(1e-8), 20.0   # TRL 1.16's (and the paper code's) clamps


def vespo_weights(log_ratio, A, mask, k_pos: float, lambda_pos: float, k_neg: float, lambda_neg: float,
                  log_sampler_ratio: torch.Tensor | None = None) -> torch.Tensor:
    """VESPO's gamma kernel on the sequence importance weight (Shen et al. 2026, arXiv:2602.10693),
    detached, shape (B, 1) (or (B, T) for per-token advantages):
        log w_i = clamp(sum_t m_it clamp(l_it, -20, 20) [+ log w^sampler_i], log 1e-8, 20)
                  (the sum over the sequence: no length normalisation, unlike GSPO's mean);
        phi(w)  = w^k exp(lambda (1 - w)),   (k, lambda) = (k_pos, lambda_pos) if A >= 0 else (k_neg, lambda_neg),
    normalised so phi(1) = 1 (on-policy VESPO is REINFORCE), computed in log space as
    lambda + k log w - lambda w; non-finite values become 0. ``log_sampler_ratio`` (B, 1): the
    summed log of a vLLM sampler correction pi_old / pi_sampler, folded into w as TRL does."""
    seq = (torch.clamp(log_ratio, -20.0, 20.0) * mask).sum(-1, keepdim=True)
    if log_sampler_ratio is not None:
        seq = seq + log_sampler_ratio
    log_w = torch.clamp(seq, VESPO_LOG_W_MIN, VESPO_LOG_W_MAX).detach()
    nonneg = A >= 0
    k = torch.where(nonneg, torch.full_like(A, k_pos), torch.full_like(A, k_neg))
    lam = torch.where(nonneg, torch.full_like(A, lambda_pos), torch.full_like(A, lambda_neg)).clamp(min=1e-4)
    phi = torch.exp(lam + k * log_w - lam * torch.exp(log_w))
    return phi.nan_to_num(nan=0.0, posinf=0.0, neginf=0.0).detach()


def vespo_surrogate(phi, A, logp) -> torch.Tensor:
    """VESPO: -sg(phi(w_i)) * A * log pi_theta per token, so the gradient is phi(w) A grad log pi
    (a soft, asymmetric reshaping of the sequence weight instead of a hard clip)."""
    return -phi * A * logp


def reinforce_surrogate(A, logp) -> torch.Tensor:
    """REINFORCE: -A * log pi_theta (no ratio; exact on-policy)."""
    return -A * logp


DPPO_LOG_RATIO_CLAMP = 20.0   # verl clamps the token log-ratio to +-20 before exp


class DivergenceMask(NamedTuple):
    """DPPO's per-token verdict: ``keep`` (1 where the divergence from pi_old is within its bound)
    and ``weight``, the detached importance ratio truncated above at c."""
    keep: torch.Tensor
    weight: torch.Tensor
    ratio: torch.Tensor


def dppo_mask(logp, old_logp, A, low: float, high: float, c: float, divergence: str) -> DivergenceMask:
    """DPPO (2602.04879), binary divergence between pi and pi_old at the sampled token, p = pi, q = pi_old:
      tv: D = p - q; a token is kept when D <= high (A > 0) or D >= -low (A <= 0);
      kl: D = q log(q/p) + (1-q) log((1-q+1e-8)/(1-p+1e-8)); kept when D <= high or p <= q (A > 0),
          D <= low or p >= q (A <= 0): only moves *away* in the direction the advantage pushes are bounded.
    The IS weight is sg(min(rho, c)) (truncated IS instead of a dual clip)."""
    ratio = torch.exp(torch.clamp(logp - old_logp, -DPPO_LOG_RATIO_CLAMP, DPPO_LOG_RATIO_CLAMP))
    p, q = torch.exp(logp), torch.exp(old_logp)
    if divergence == "tv":
        up, down = (p - q) <= high, (p - q) >= -low
    else:
        kl = q * (old_logp - logp) + (1 - q) * torch.log((1.0 - q + 1e-8) / (1.0 - p + 1e-8))
        up, down = (kl <= high) | (p <= q), (kl <= low) | (p >= q)
    keep = torch.where(A > 0, up, down).detach().to(logp.dtype)
    return DivergenceMask(keep, torch.clamp(ratio, max=c).detach(), ratio.detach())


def dppo_surrogate(divergence: DivergenceMask, A, logp) -> torch.Tensor:
    """-A sg(min(rho, c)) log pi on the kept tokens, 0 elsewhere (its gradient: the truncated-IS policy gradient)."""
    return -A * divergence.weight * logp * divergence.keep


def dro_surrogate(A, logp, log_ratio, beta: float) -> torch.Tensor:
    """DRO as verl 0.9.1 implements it: -(A log pi - (beta/2) (log pi - log pi_old)^2). On-policy the
    penalty and its gradient are 0 (REINFORCE); off-policy it pulls pi back towards pi_old."""
    return -(logp * A - 0.5 * beta * log_ratio.square())


def geometric_mean_loss(log_ratio, A, mask, eps_low: float, eps_high: float) -> torch.Tensor:
    """GMPO (2507.20673): sign-aware clipping in log space, then a geometric mean per sequence:
        l'_t = min(l_t, eps_high) if A > 0 else max(l_t, -eps_low);
        R_i = exp(mean_t l'_t);  loss_i = -A_i * R_i.   Shape (B, 1)."""
    clipped = torch.where(A > 0, torch.clamp(log_ratio, max=eps_high), torch.clamp(log_ratio, min=-eps_low))
    mean_log = (clipped * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp(min=1.0)
    A_seq = A if A.shape[-1] == 1 else A[:, :1]
    return -A_seq * torch.exp(mean_log)


def _centered_cov(logp: torch.Tensor, A: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """cov_t = (A_t - mean A) * (log pi_t - mean log pi) over valid tokens (detached)."""
    valid = mask > 0
    A_full = A.expand_as(logp).detach()
    lp = logp.detach()
    return (A_full - A_full[valid].mean()) * (lp - lp[valid].mean())


def clip_cov_loss(coef, A, logp, mask, eps_low, eps_high, fraction, low, high, generator=None):
    """Clip-Cov (2505.22617, as in verl): among valid tokens the clip did not already bind on,
    those with covariance in (low, high) are candidates; max(1, fraction * #valid) of them,
    drawn at random, get a zero gradient. Returns (per-token loss, selected mask)."""
    A_full = A.expand_as(coef)
    loss1, loss2 = -A_full * coef, -A_full * torch.clamp(coef, 1 - eps_low, 1 + eps_high)
    cov = _centered_cov(logp, A, mask)
    candidate = (cov > low) & (cov < high) & (mask > 0) & ~(loss2 > loss1)
    idx = candidate.nonzero()
    n_select = max(int(fraction * mask.sum().item()), 1)
    selected = torch.zeros_like(candidate)
    if len(idx):
        # drawn where the generator lives (the CPU's default one without): one seed, one pick on every device
        perm = torch.randperm(len(idx), generator=generator, device=generator.device if generator is not None else "cpu")
        pick = idx[perm.to(idx.device)[:n_select]]
        selected[pick[:, 0], pick[:, 1]] = True
    return torch.max(loss1, loss2) * (~selected).to(coef.dtype), selected


def kl_cov_loss(coef, A, logp, log_ratio, mask, fraction, kl_coef):
    """KL-Cov (2505.22617, as in verl): -A * rho on every token, plus kl_coef * |l_t| on the
    top max(1, fraction * #valid) valid tokens by covariance. No clipping. Returns (loss, selected)."""
    A_full = A.expand_as(coef)
    loss = -A_full * coef
    cov = _centered_cov(logp, A, mask).masked_fill(mask <= 0, float("-inf"))
    n_select = max(int(fraction * mask.sum().item()), 1)
    flat = cov.flatten().topk(min(n_select, int((mask > 0).sum().item()))).indices
    selected = torch.zeros(cov.numel(), dtype=torch.bool, device=cov.device)
    selected[flat] = True
    selected = selected.view_as(cov)
    return torch.where(selected, loss + kl_coef * log_ratio.abs(), loss), selected


def group_dpo_loss(logp, ref_logp, mask, rewards, group_ids, beta: float):
    """Group-DPO (seed 000's "GDPO"): in each group, the best (y+) and worst (y-) completions by
    reward form a pair;  loss = -log sigmoid(beta * ((log pi(y+) - log pi_ref(y+))
                                                  - (log pi(y-) - log pi_ref(y-)))).
    log pi(y) sums token log-probs. Groups whose rewards are all equal give no pair; unscorable
    completions (NaN reward: every reward function returned None) are never in one.
    Returns (mean loss over pairs, number of pairs)."""
    seq = ((logp - ref_logp) * mask).sum(-1)
    losses = []
    for g in torch.unique(group_ids):
        rows = ((group_ids == g) & ~torch.isnan(rewards)).nonzero().view(-1)
        if rows.numel() < 2:
            continue
        r = rewards[rows]
        if r.max() - r.min() <= 1e-6:
            continue
        best, worst = rows[r.argmax()], rows[r.argmin()]
        losses.append(-torch.nn.functional.logsigmoid(beta * (seq[best] - seq[worst])))
    if not losses:
        return (logp * 0).sum(), 0
    return torch.stack(losses).mean(), len(losses)
