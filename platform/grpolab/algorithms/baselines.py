"""Further baselines: verl 0.9.1's (``register_adv_est``) OPO, pass@k, GPG, ReMax and the optimal
token baselines, and MaxRL's mean-scaled advantage. Pure torch. Shapes as ``grpolab.algorithms.advantages``: r (N,) with groups of G
contiguous, mask (N, T). Formulas follow verl's ``core_algos.py``; tests/algorithms/test_verl_reference.py
compares each with verl's own output on shared tensors.
"""

from __future__ import annotations

import torch


def opo(r: torch.Tensor, lengths: torch.Tensor, G: int) -> torch.Tensor:
    """OPO (2505.23585), the length-weighted optimal baseline: A_i = r_i - b_g,
    b_g = sum_{j in g} |o_j| r_j / sum_{j in g} |o_j|, |o_j| the generated completion's length (a
    truncated one counts in full, as in the paper); a group of one, or of empty completions, has b = 0."""
    g, n = r.view(-1, G), lengths.to(r).view(-1, G)
    if G == 1:
        return r.clone()
    weight = n.sum(1, keepdim=True)
    return (g - (n * g).sum(1, keepdim=True) / weight.clamp(min=1)).view(-1)


def pass_at_k(r: torch.Tensor, G: int, eps: float = 1e-6, std_norm: bool = True, unbiased: bool = True) -> torch.Tensor:
    """Pass@k training (2503.19595): only each group's best completion gets a non-zero advantage,
    A = (r_max - r_second) / (std_g r + eps) (without the std when ``std_norm`` is off); ties at the top
    give 0. Needs G >= 2."""
    if G < 2:
        raise ValueError("grpo_passk needs a group of at least 2")
    g = r.view(-1, G)
    top = torch.topk(g, 2, dim=1)
    gap = top.values[:, 0] - top.values[:, 1]
    if std_norm:
        gap = gap / (g.std(1, unbiased=unbiased) + eps)
    out = torch.zeros_like(g)
    out.scatter_(1, top.indices[:, :1], gap.unsqueeze(1))
    return out.view(-1)


def gpg(r: torch.Tensor, G: int) -> torch.Tensor:
    """GPG (2504.02546): A_i = alpha (r_i - mean_g r), alpha = N / #{i: r_i != 0} over the whole batch
    (verl's F_norm = 1); a group of one has mean 0. alpha rescales the gradient by the share of
    completions with a non-zero reward."""
    alpha = r.numel() / torch.count_nonzero(r).clamp(min=1)
    g = r.view(-1, G)
    mean = g.mean(1, keepdim=True) if G > 1 else torch.zeros_like(g)
    return (alpha * (g - mean)).view(-1)


def mean_scaled(r: torch.Tensor, G: int, eps: float = 1e-4) -> torch.Tensor:
    """MaxRL (2602.02710): A_i = (r_i - mean_g r) / (mean_g r + eps), the centred reward divided by the
    group's success rate instead of its std: hard prompts (low success) weigh more. Derived for
    binary rewards; 0 for a group with no success (r = mean = 0)."""
    g = r.view(-1, G)
    mean = g.mean(1, keepdim=True)
    return ((g - mean) / (mean + eps)).view(-1)


def remax(r: torch.Tensor, greedy_r: torch.Tensor) -> torch.Tensor:
    """ReMax (2310.10505): A_i = r_i - r(greedy completion of the same prompt)."""
    return r - greedy_r.to(r)


def _outcome_returns(r: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """G_t: the outcome reward r_i at every valid token (it sits on the last one; gamma = 1)."""
    m = mask.to(r.dtype)
    last = (m.cumsum(1) == m.sum(1, keepdim=True)) & (m > 0)
    return (last.to(r.dtype) * r.view(-1, 1)).flip(1).cumsum(1).flip(1) * m


def _group_token_baselines(returns, weights, mask, groups, eps: float) -> torch.Tensor:
    """Per group: B_t = sum_i G_it W_it m_it / (sum_i W_it m_it + eps) at each position t; a group of
    one gets B = 0; a group's unique longest row gets B = 0 beyond the second-longest length."""
    baselines = torch.zeros_like(returns)
    lengths = mask.sum(1)
    for rows in groups:
        if len(rows) < 2:
            continue
        idx = torch.tensor(rows, device=mask.device)
        m = mask[idx]
        b = (returns[idx] * weights[idx] * m).sum(0) / ((weights[idx] * m).sum(0) + eps)
        baselines[idx] = b.to(baselines.dtype)
        n = lengths[idx]
        ordered = torch.sort(n).values
        longest = (n == ordered[-1]).nonzero(as_tuple=True)[0]
        if longest.numel() == 1 and ordered[-1] > ordered[-2]:
            baselines[rows[int(longest[0])], int(ordered[-2]):] = 0.0
    return baselines


def _path_variance(mask: torch.Tensor, old_logp: torch.Tensor, sum_pi_squared: torch.Tensor) -> torch.Tensor:
    """W_t = sum_{j <= t} (1 - 2 pi_j + sum_v pi_v^2) m_j: the cumulative path-variance proxy."""
    return ((1 - 2 * old_logp.exp() + sum_pi_squared) * mask).cumsum(1)


def optimal_token_baseline(r: torch.Tensor, mask: torch.Tensor, old_logp: torch.Tensor,
                           sum_pi_squared: torch.Tensor, G: int, eps: float = 1e-8) -> torch.Tensor:
    """Optimal token baseline (verl's ``optimal_token_baseline``): A_it = G_it - B_t with one
    baseline per token position, B_t = E[G_t W_t] / E[W_t] over the group (see
    ``_group_token_baselines``), W_t the cumulative path variance of pi_old, the policy that
    generated the batch (``sum_pi_squared``: sum over the vocabulary of pi_old^2 at each token). r, mask
    and the token statistics are the same rows (the trainer's: one process's, whole groups). Returns
    (rows, T)."""
    m = mask.to(r.dtype)
    returns = _outcome_returns(r, m)
    groups = [list(range(s, s + G)) for s in range(0, r.numel(), G)]
    return (returns - _group_token_baselines(returns, _path_variance(m, old_logp, sum_pi_squared), m, groups, eps)) * m


def tir_optimal_token_baseline(r: torch.Tensor, mask: torch.Tensor, old_logp: torch.Tensor,
                               sum_pi_squared: torch.Tensor, G: int, eps: float = 1e-8) -> torch.Tensor:
    """The optimal token baseline for tool-interleaved turns (verl's ``tir_optimal_token_baseline``):
    as ``optimal_token_baseline``, but position t is a row's t-th *model* token (its valid tokens
    packed left, tool tokens skipped), so rows align by how many tokens the policy produced;
    rows with no model token leave their group."""
    m = mask.to(r.dtype)
    returns, weights = _outcome_returns(r, m), _path_variance(m, old_logp, sum_pi_squared)
    lengths = m.sum(1).long()
    width = int(lengths.max()) if lengths.numel() else 0
    packed_r, packed_w = returns.new_zeros(len(r), width), returns.new_zeros(len(r), width)
    packed_m = returns.new_zeros(len(r), width)
    for i, n in enumerate(lengths.tolist()):
        keep = m[i].bool()
        packed_r[i, :n], packed_w[i, :n], packed_m[i, :n] = returns[i, keep], weights[i, keep], 1.0
    groups = [[i for i in range(s, s + G) if lengths[i] > 0] for s in range(0, r.numel(), G)]
    packed = packed_r - _group_token_baselines(packed_r, packed_w, packed_m, groups, eps)
    out = torch.zeros_like(returns)
    for i, n in enumerate(lengths.tolist()):
        out[i, m[i].bool()] = packed[i, :n]
    return out * m
