"""Advantage estimators: rewards -> advantages. Pure torch, no TRL.

Shapes: ``rewards`` is (N,) or (N, K) with N = groups x G and each group contiguous;
``mask`` is (N, T). Every group-relative estimator gives exactly 0 to a zero-variance group.
"""

from __future__ import annotations

import torch


def _std(x: torch.Tensor, dim: int | None, unbiased: bool, keepdim: bool = False) -> torch.Tensor:
    if dim is None:
        return x.std(unbiased=unbiased) if x.numel() > 1 else torch.zeros((), dtype=x.dtype, device=x.device)
    if x.shape[dim] < 2:
        return torch.zeros_like(x.mean(dim=dim, keepdim=keepdim))
    return x.std(dim=dim, unbiased=unbiased, keepdim=keepdim)


def _nan_std(x: torch.Tensor, dim: int | None, unbiased: bool) -> torch.Tensor:
    """std over the non-NaN entries (n - 1 when ``unbiased``), kept dims; 0 with fewer than 2."""
    x = x.reshape(1, -1) if dim is None else x
    dim = 1 if dim is None else dim
    n = (~torch.isnan(x)).sum(dim, keepdim=True)
    square_sum = torch.nansum((x - torch.nanmean(x, dim, keepdim=True)) ** 2, dim, keepdim=True)
    std = (square_sum / (n - 1 if unbiased else n).clamp(min=1)).sqrt()
    return torch.where(n >= 2, std, torch.zeros_like(std))


def _unscorable_centred(r: torch.Tensor, G: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = r.view(-1, G)
    return g, g - torch.nanmean(g, 1, keepdim=True)


# Advantages when some totals r_i are NaN (every reward function returned None), as TRL 1.16: those
# completions leave every baseline and get A_i = 0. S_g: the scorable rows of group g (n_g of them).

def unscorable_group_std(r: torch.Tensor, G: int, eps: float = 1e-4, unbiased: bool = True) -> torch.Tensor:
    """A_i = (r_i - mean_{S_g} r) / (std_{S_g} r + eps)."""
    g, centred = _unscorable_centred(r, G)
    return torch.nan_to_num((centred / (_nan_std(g, 1, unbiased) + eps)).reshape(-1), nan=0.0)


def unscorable_group_mean(r: torch.Tensor, G: int) -> torch.Tensor:
    """A_i = r_i - mean_{S_g} r."""
    return torch.nan_to_num(_unscorable_centred(r, G)[1].reshape(-1), nan=0.0)


def unscorable_batch_std(r: torch.Tensor, G: int, eps: float = 1e-4, unbiased: bool = True) -> torch.Tensor:
    """A_i = (r_i - mean_{S_g} r) / (std over every scorable row of the batch + eps)."""
    centred = _unscorable_centred(r, G)[1]
    return torch.nan_to_num((centred / (_nan_std(r, None, unbiased) + eps)).reshape(-1), nan=0.0)


def unscorable_leave_one_out(r: torch.Tensor, G: int) -> torch.Tensor:
    """A_i = r_i - (sum_{S_g} r - r_i) / (n_g - 1), 0 when n_g < 2."""
    g = r.view(-1, G)
    n = (~torch.isnan(g)).sum(1, keepdim=True)
    others = (torch.nansum(g, 1, keepdim=True) - g) / (n - 1).clamp(min=1)
    a = torch.where(n >= 2, g - others, torch.zeros_like(g))
    return torch.nan_to_num(a.reshape(-1), nan=0.0)


def group_std(r: torch.Tensor, G: int, eps: float = 1e-4, unbiased: bool = True) -> torch.Tensor:
    """A_i = (r_i - mean_g r) / (std_g r + eps)   (GRPO; std with N-1 when ``unbiased``)."""
    g = r.view(-1, G)
    return ((g - g.mean(1, keepdim=True)) / (_std(g, 1, unbiased, keepdim=True) + eps)).view(-1)


def group_mean(r: torch.Tensor, G: int) -> torch.Tensor:
    """A_i = r_i - mean_g r   (Dr. GRPO: no std, so no question-level difficulty bias)."""
    g = r.view(-1, G)
    return (g - g.mean(1, keepdim=True)).view(-1)


def batch_std(r: torch.Tensor, G: int, eps: float = 1e-4, unbiased: bool = True) -> torch.Tensor:
    """A_i = (r_i - mean_g r) / (std over the whole batch + eps)   (Lite PPO; TRL scale_rewards="batch")."""
    return group_mean(r, G) / (_std(r, None, unbiased) + eps)


def leave_one_out(r: torch.Tensor, G: int) -> torch.Tensor:
    """A_i = r_i - mean_{j != i} r_j = G/(G-1) * (r_i - mean_g r)   (RLOO)."""
    if G < 2:
        raise ValueError("leave_one_out needs a group of at least 2")
    g = r.view(-1, G)
    return (g - (g.sum(1, keepdim=True) - g) / (G - 1)).view(-1)


def decoupled(r: torch.Tensor, G: int, weights: torch.Tensor, eps: float = 1e-4, unbiased: bool = True) -> torch.Tensor:
    """GDPO (2601.05242): normalise each reward component within its group, sum with weights,
    then normalise over the batch:
        a_i^k = (r_i^k - mean_g r^k) / (std_g r^k + eps);  s_i = sum_k w_k a_i^k;
        A_i = (s_i - mean_batch s) / (std_batch s + eps).
    Unlike sum-then-normalise, reward combinations such as (1, 0) and (0, 1) stay apart."""
    N, K = r.shape
    g = r.view(-1, G, K)
    per_k = (g - g.mean(1, keepdim=True)) / (_std(g, 1, unbiased, keepdim=True) + eps)
    s = (per_k.view(N, K) * weights.view(1, K)).sum(1)
    return (s - s.mean()) / (_std(s, None, unbiased) + eps)


def whiten_tokens(values: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8, reduce=None) -> torch.Tensor:
    """(x - mean) / (std + eps) over the valid tokens of the whole batch; padding stays 0.
    ``reduce`` sums (sum, sum of squares, count) across processes, so every rank whitens with
    the statistics of the global batch (std with N-1)."""
    m = mask.to(values.dtype)
    stats = torch.stack([(values * m).sum(), (values * values * m).sum(), m.sum()])
    if reduce is not None:
        stats = reduce(stats)
    total, total_sq, n = stats[0], stats[1], stats[2].clamp(min=1)
    mean = total / n
    var = ((total_sq - n * mean * mean) / (n - 1).clamp(min=1)).clamp(min=0)
    return (values - mean) / (var.sqrt() + eps) * m


def token_returns(seq_reward: torch.Tensor, mask: torch.Tensor, token_penalty: torch.Tensor | None) -> torch.Tensor:
    """Per-token return with gamma = 1: G_t = r_i * [t <= last] - sum_{s >= t} penalty_s.
    The outcome reward sits on the last valid token; ``token_penalty`` (beta * KL_t) is per token."""
    m = mask.to(seq_reward.dtype)
    step_rewards = -(token_penalty * m) if token_penalty is not None else torch.zeros_like(m)
    last = (m.cumsum(1) == m.sum(1, keepdim=True)) & (m > 0)
    step_rewards = step_rewards + last.to(m.dtype) * seq_reward.view(-1, 1)
    return step_rewards.flip(1).cumsum(1).flip(1) * m


def reinforce_pp(r: torch.Tensor, mask: torch.Tensor, token_penalty: torch.Tensor | None = None,
                 reduce=None) -> torch.Tensor:
    """REINFORCE++ (2501.03262): per-token return with the KL folded into the reward
    (r_t = -beta*KL_t, plus the outcome reward on the final token), whitened over all valid
    tokens of the batch. No group baseline. Returns (N, T)."""
    return whiten_tokens(token_returns(r, mask, token_penalty), mask, reduce=reduce)


class ValueTracker:
    """SPO (2509.13232) per-prompt Beta(alpha, beta) tracker of the success probability.

    p_hat(q) = alpha / (alpha + beta), starting from Beta(1, 1) (p_hat = 0.5) for a new prompt.
    After each reward r in [0, 1]: alpha <- rho * alpha + r, beta <- rho * beta + (1 - r).
    SPO adapts rho from the policy's KL drift; here rho (``tracker_decay``) is fixed.
    """

    def __init__(self, decay: float):
        self.decay = decay
        self.state: dict[str, tuple[float, float]] = {}

    def predict(self, keys: list[str]) -> torch.Tensor:
        """p_hat(q) per key, (N,) on the CPU: the tracker's state is host floats."""
        return torch.tensor([a / (a + b) for a, b in (self.state.get(k, (1.0, 1.0)) for k in keys)], device="cpu")

    def update(self, keys: list[str], rewards: torch.Tensor) -> None:
        for k, r in zip(keys, rewards.tolist()):
            a, b = self.state.get(k, (1.0, 1.0))
            self.state[k] = (self.decay * a + r, self.decay * b + (1.0 - r))

    def state_dict(self) -> dict:
        """Every prompt's (alpha, beta); the decay is the method's setting, not state."""
        return {"beta_params": dict(self.state)}

    def load_state_dict(self, state: dict) -> None:
        self.state = {key: (float(a), float(b)) for key, (a, b) in state["beta_params"].items()}


def value_tracker(r: torch.Tensor, keys: list[str], tracker: ValueTracker, eps: float = 1e-4, unbiased: bool = True) -> torch.Tensor:
    """SPO: A_i = r_i - p_hat(q_i) from the tracker *before* this batch updates it, then
    normalised by the batch std: A_i / (std_batch A + eps). No group is needed, so a prompt's
    samples do not have to disagree for it to give signal."""
    if r.min() < 0 or r.max() > 1:
        raise ValueError("value_tracker needs rewards in [0, 1]")
    a = r - tracker.predict(keys).to(device=r.device, dtype=r.dtype)
    tracker.update(keys, r)
    return a / (_std(a, None, unbiased) + eps)


def gae(seq_reward: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lam_policy,
        lam_critic: float, token_penalty: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over completion tokens (PPO; VAPO decouples the lambdas).

    Per-token rewards: the outcome on the last valid token, minus ``token_penalty`` (beta * KL_t).
        delta_t = r_t + gamma * V_{t+1} - V_t   (V after the last token is 0)
        A_t = sum_l (gamma * lambda)^l delta_{t+l}
    Advantages use ``lam_policy`` (a float, or (N, 1) per sequence, e.g. VAPO's length-adaptive
    1 - 1 / (alpha * |o|)); value targets use ``lam_critic``: R_t = A_t(lam_critic) + V_t
    (lam_critic = 1 gives the Monte-Carlo return). Returns (advantages, returns), both (N, T)."""
    m = mask.to(values.dtype)
    last = (m.cumsum(1) == m.sum(1, keepdim=True)) & (m > 0)
    rewards = last.to(m.dtype) * seq_reward.view(-1, 1)
    if token_penalty is not None:
        rewards = rewards - token_penalty * m
    values = values.detach() * m
    next_values = torch.cat([values[:, 1:], torch.zeros_like(values[:, :1])], dim=1)
    delta = (rewards + gamma * next_values - values) * m

    def discounted(lam) -> torch.Tensor:
        lam = torch.as_tensor(lam, dtype=m.dtype, device=m.device).reshape(-1, 1).expand(m.size(0), 1)
        out, running = torch.zeros_like(delta), torch.zeros_like(delta[:, :1])
        for t in reversed(range(delta.size(1))):   # padding is only at the end, where delta = 0
            running = delta[:, t:t + 1] + gamma * lam * running
            out[:, t:t + 1] = running
        return out * m

    advantages = discounted(lam_policy)
    returns = discounted(lam_critic) + values
    return advantages, returns * m


def length_adaptive_lambda(mask: torch.Tensor, alpha: float) -> torch.Tensor:
    """VAPO (2504.05118): lambda_policy = 1 - 1 / (alpha * |o|) per sequence, shape (N, 1),
    floored at 0 for very short completions."""
    lengths = mask.sum(1, keepdim=True).clamp(min=1).to(torch.float32)
    return (1 - 1 / (alpha * lengths)).clamp(min=0.0)
