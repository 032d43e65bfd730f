"""The GRPO family's math as pure torch functions: the platform's public math API.

    compute_advantages(spec, AdvantageInputs(rewards, group_size, ...)) -> Estimate(advantages, value_targets)
    policy_loss(spec, LossInputs(logp, old_logp, advantages, mask, ref_logp=None, ...)) -> (loss, stats)

Nothing here imports TRL, MLflow or Optuna; ``grpolab.trainer.grpo_trainer`` calls these inside TRL's loop.
"""

from __future__ import annotations

import dataclasses

import torch

from grpolab.algorithms import gigpo
from grpolab.algorithms import losses as L
from grpolab.algorithms.advantages import ValueTracker
from grpolab.algorithms.kl import kl_estimate
from grpolab.algorithms.loss_inputs import LossInputs
from grpolab.algorithms.estimators import ESTIMATORS, AdvantageInputs, Estimate, refuse_unscorable
from grpolab.algorithms.shaping import overlong_buffer, soft_overlong_penalty
from grpolab.algorithms.surrogates import SURROGATE_LOSSES, Batch, clip_stats, masked_mean, surrogate_loss
from grpolab.method.advantages import ADVANTAGES, input_keys
from grpolab.method.kl import kl_in_loss
from grpolab.method.spec import MethodSpec

__all__ = ["compute_advantages", "AdvantageInputs", "Estimate", "policy_loss", "LossInputs", "entropy_mask",
           "ValueTracker", "soft_overlong_penalty", "overlong_buffer", "combine_rewards"]


def combine_rewards(rewards: torch.Tensor, weights: tuple[float, ...] | None) -> torch.Tensor:
    """(N, K) components -> (N,) weighted sum; (N,) passes through (already combined: weights
    are applied exactly once). A reward function may return None for a completion (TRL makes it
    NaN, e.g. ``accuracy_reward`` when the gold answer does not parse): as in TRL 1.16,
    r_i = nansum_k w_k r_i^k, and a completion every function skipped is unscorable, r_i = NaN
    (``compute_advantages`` leaves it out of the baselines and gives it advantage 0)."""
    if rewards.dim() == 1:
        return rewards
    if weights is not None and len(weights) != rewards.shape[1]:
        raise ValueError(f"method.reward_weights has {len(weights)} weights for {rewards.shape[1]} reward components")
    w = (torch.ones(rewards.shape[1], dtype=rewards.dtype, device=rewards.device) if weights is None
         else torch.tensor(weights, dtype=rewards.dtype, device=rewards.device))
    total = (rewards * w).nansum(1)
    return total.masked_fill(torch.isnan(rewards).all(1), float("nan"))


def compute_advantages(spec: MethodSpec, inputs: AdvantageInputs) -> Estimate:
    """The advantages of N = groups x group_size completions (groups contiguous) by ``spec.advantage``'s
    registry entry (``grpolab.method.advantages``) and function (``grpolab.algorithms.estimators``):
    the one way into the estimators, for the trainer and for a researcher alike.

    ``inputs``: one ``AdvantageInputs`` record (its docstring gives each field's shape and who sets it).
    inputs.rewards is (N,) or (N, K) reward components: only an estimator whose entry keeps
    ``components`` apart sees them; the others get their sum with ``spec.reward_weights``, and a
    completion every reward function skipped (NaN) goes to the estimator's unscorable form (0, out of
    the baselines) or is refused. ``inputs.provided`` may hold only the keys the entry's inputs
    declare (``Estimator.inputs``, ``input_keys``) that are no field: any other is refused, so a
    misspelt input is not carried along unread. With ``inputs.episodes`` (multi-turn episodes, one
    per row of the whole batch) the estimator's advantages are GiGPO's A^E of the episode returns:
    its episode population and step-level term follow (``gigpo.episode_advantages``).
    Returns an ``Estimate``: advantages (N,), one per completion, or, for a ``per_token`` estimator,
    (n_local, T), this process's rows; with episodes (whose levels apply to the whole batch, so
    ``local_rows``, if given, must be all N rows) GiGPO's step term makes them (N, T). A critic's
    value targets are (n_local, T) (None for the others).

    Several processes: rewards and lengths are the gathered (global) batch; mask, token_penalty and
    the per-token provided inputs are this process's rows ``local_rows`` of it, ``reduce`` sums
    tensors across processes, and a per-token result is this process's rows only."""
    entry, estimator, rewards = ADVANTAGES[spec.advantage], ESTIMATORS[spec.advantage], inputs.rewards
    if rewards.shape[0] % inputs.group_size:
        raise ValueError(f"{rewards.shape[0]} rewards do not split into groups of {inputs.group_size}")
    _check_provided(spec.advantage, entry.inputs, inputs.provided)
    if inputs.episodes is not None:
        _check_episodes(inputs)
    if not entry.components:
        inputs = dataclasses.replace(inputs, rewards=combine_rewards(rewards, spec.reward_weights))
    unscorable = not entry.components and torch.isnan(inputs.rewards).any()   # every reward function returned None
    if unscorable and estimator.unscorable is None:
        refuse_unscorable(spec.advantage)
    out = estimator.unscorable(spec, inputs.rewards, inputs) if unscorable else estimator.fn(spec, inputs)
    estimate = out if isinstance(out, Estimate) else Estimate(out)
    if inputs.episodes is not None:
        estimate = estimate._replace(advantages=gigpo.episode_advantages(spec, estimate.advantages, inputs.episodes,
                                                                         inputs.group_size))
    return estimate


def _check_provided(advantage: str, names: tuple[str, ...], provided: dict) -> None:
    """Refuses a ``provided`` key that none of the entry's inputs declares: a misspelt input must
    not pass as one nobody reads."""
    fields = {f.name for f in dataclasses.fields(AdvantageInputs)} - {"provided"}
    valid = sorted({key for name in names for key in input_keys(name)} - fields)
    unread = sorted(set(provided) - set(valid))
    if unread:
        raise TypeError(f"compute_advantages: input {unread[0]!r} is not one advantage={advantage} reads: besides "
                        f"the AdvantageInputs fields ({', '.join(sorted(fields))}) it reads "
                        f"{', '.join(valid) or 'no other input'}" + (f" (its inputs: {', '.join(names)})" if names else ""))


def _check_episodes(inputs: AdvantageInputs) -> None:
    """GiGPO's episode population and step term are computed over the episodes given, which must be
    the rows the advantages apply to: one episode per row of the whole batch, on one process
    (an episode rollout's episodes are this process's and are not gathered)."""
    n, rows, local = len(inputs.episodes.step_rewards), inputs.rewards.shape[0], inputs.local_rows
    if n != rows:
        raise ValueError(f"compute_advantages: {n} episodes for {rows} rows: the episodes input needs one episode "
                         "per row of the whole batch")
    if local is not None and range(rows)[local] != range(rows):
        raise ValueError(f"compute_advantages: the episodes input applies to the whole batch of {rows} rows, but "
                         f"local_rows is {local}: episodes are not gathered across processes (one process only)")


def entropy_mask(entropies: torch.Tensor, mask: torch.Tensor, top_quantile: float, gather=None) -> torch.Tensor:
    """The top ``top_quantile`` fraction of valid tokens by entropy (the "80/20" rule, 2506.01939,
    keeps 0.2; the others get zero policy-gradient loss but stay in the token normaliser):
    tokens with entropy >= the (1 - top_quantile) quantile over valid tokens. ``gather`` maps
    this process's valid entropies to those of every process, so the quantile is global."""
    valid = entropies[mask.bool()].float()
    if gather is not None:
        valid = gather(valid)
    if valid.numel() == 0:
        return torch.zeros_like(mask, dtype=torch.bool)
    threshold = quantile(valid, 1 - top_quantile)
    return ((entropies * mask.float()) >= threshold) & mask.bool()


def quantile(values: torch.Tensor, q: float) -> torch.Tensor:
    """``torch.quantile(values, q)`` of a 1-D tensor, linear interpolation, without its limit of
    2^24 elements (a global batch of long completions passes it): with the rank r = q (n - 1)
    computed in the values' dtype, as torch does, and v_(k) the k-th smallest (1-based),
    quantile = lerp(v_(floor r + 1), v_(ceil r + 1), r - floor r). kthvalue selects without a full sort."""
    n = values.numel()
    rank = torch.tensor(q, dtype=values.dtype, device="cpu") * (n - 1)   # a host scalar: no device sync
    below, above = int(rank), int(torch.ceil(rank))
    low, high = values.kthvalue(below + 1).values, values.kthvalue(above + 1).values
    return torch.lerp(low, high, float(rank - below))


def _at_least_fp32(t: torch.Tensor | None) -> torch.Tensor | None:
    return t.float() if t is not None and t.dtype in (torch.bfloat16, torch.float16) else t


def policy_loss(spec: MethodSpec, inputs: LossInputs):
    """Loss of one micro-batch (before gradient-accumulation scaling) and its statistics.

    ``inputs``: one ``LossInputs`` record (its docstring gives each field's shape and meaning). The
    loss is w * surrogate(rho) [+ beta * KL (times rho if kl_ratio_correction) when kl_placement
    == "loss"] aggregated per ``spec.aggregation`` [+ positive_lm_coef * NLL of the correct
    completions] [- entropy_coef * mean entropy], rho = exp(logp - old_logp); w is the sampler's
    importance weight (1 without one; it weights the policy term, not the KL, as TRL and verl do),
    and the rows (tokens) ``keep`` drops lose their surrogate term, the KL kept. Stats: clip
    fractions (low: rho < 1 - eps_low with A < 0; high: rho > 1 + eps_high with A > 0; region:
    either), mean old-policy probability of high-clipped tokens, KL, entropy, and the method's own
    selection counts."""
    # bf16 / fp16 log-probs carry 3 significant digits: the ratio exp(logp - old_logp), the KL and
    # the surrogate are computed in float32 (fp32 and fp64 inputs are left as they are)
    logp, old_logp, ref_logp = (_at_least_fp32(t) for t in (inputs.logp, inputs.old_logp, inputs.ref_logp))
    mask, entropies, generator = inputs.mask.to(logp.dtype), inputs.entropies, inputs.generator
    sampling_weights, keep = inputs.sampling_weights, inputs.keep
    A = inputs.advantages.unsqueeze(1) if inputs.advantages.dim() == 1 else inputs.advantages
    stats: dict[str, float] = {}
    eff_mask = _top_entropy_tokens(spec, mask, entropies, inputs.gather, stats)
    log_ratio = logp - old_logp
    surrogate = SURROGATE_LOSSES[spec.surrogate]   # the registry: algorithms/surrogates.py
    if surrogate.pairwise:
        if sampling_weights is not None or keep is not None:
            raise ValueError(f"{spec.surrogate} has no per-token loss to re-weight or mask: set "
                             "generation.is_correction=none and no off-policy mask")
        coef = torch.exp(log_ratio)
        loss = surrogate.fn(spec, Batch(logp, log_ratio, coef, A, eff_mask, generator=generator, ref_logp=ref_logp,
                                        rewards=inputs.rewards, group_ids=inputs.group_ids), stats)
        stats["kl"] = masked_mean(kl_estimate(logp.detach(), ref_logp, spec.kl_estimator), mask)
    else:
        per_token, coef = surrogate_loss(spec, logp, log_ratio, A, mask, stats, generator, sampling_weights)
        per_token = _selected_and_weighted(spec, per_token, mask, eff_mask, keep,
                                           None if surrogate.own_sampler_weight else sampling_weights, stats)
        kl = kl_estimate(logp, ref_logp, spec.kl_estimator) if ref_logp is not None else None
        if kl is not None and kl_in_loss(spec):
            # on every valid token, also when top-entropy selection masks the policy gradient (as TRL);
            # the ratio correction gives the unbiased reverse-KL gradient off-policy; it changes it on-policy too
            per_token = per_token + spec.kl_coef * (kl * coef if spec.kl_ratio_correction else kl)
        loss = L.aggregate(per_token, mask, spec.aggregation, inputs.token_normaliser, inputs.max_completion_length)
        if kl is not None:
            stats["kl"] = masked_mean(kl.detach(), mask)
    stats["policy_loss"] = float(loss.detach())
    if spec.positive_lm_coef > 0:
        loss = loss + spec.positive_lm_coef * _positive_nll(logp, mask, inputs.positive, stats)
    if entropies is not None:
        stats["entropy"] = masked_mean(entropies.detach(), mask)
        if inputs.entropy_coef:
            loss = loss - inputs.entropy_coef * (entropies * eff_mask).sum() / eff_mask.sum().clamp(min=1.0)
    clip_stats(spec, coef.detach(), A, old_logp, mask, stats)
    return loss, stats


def _top_entropy_tokens(spec: MethodSpec, mask, entropies, gather, stats: dict):
    """The tokens whose policy term trains: every valid token, or with top_entropy_quantile q < 1
    only the highest-entropy (1 - q) of them (the 80/20 rule); the kept fraction is a stat."""
    if spec.top_entropy_quantile >= 1.0:
        return mask
    if entropies is None:
        raise ValueError("top_entropy_quantile < 1 needs per-token entropies")
    eff_mask = mask * entropy_mask(entropies.detach(), mask, spec.top_entropy_quantile, gather).to(mask.dtype)
    stats["entropy/kept_fraction"] = masked_mean(eff_mask, mask)
    return eff_mask


def _selected_and_weighted(spec: MethodSpec, per_token, mask, eff_mask, keep, sampling_weights, stats: dict):
    """The per-token policy term, before the KL is added: rows (tokens) TRL's off-policy mask drops
    (``keep``) and tokens top-entropy selection leaves out contribute 0 (the normaliser still counts
    them), and a sampler that is not the trained policy weights the rest by w (``sampling_weights``;
    None where the surrogate folds w into its own weight, as VESPO does). The KL is weighted by no
    sampler ratio and masked by neither, as in TRL 1.16 and verl."""
    if keep is not None:
        per_token = per_token * keep.to(per_token.dtype)
        stats["off_policy/kept_fraction"] = masked_mean(keep, mask)
    if spec.top_entropy_quantile < 1.0:
        per_token = per_token * eff_mask
    if sampling_weights is not None:
        per_token = per_token * sampling_weights.to(per_token.dtype)
    return per_token


def _positive_nll(logp, mask, positive, stats) -> torch.Tensor:
    """VAPO's positive-example LM loss: -sum log pi over the tokens of correct completions /
    their token count (in this micro-batch); ``positive`` (B,) marks correct completions."""
    if positive is None:
        raise ValueError("positive_lm_coef > 0 needs which completions are correct (positive)")
    pos = mask * positive.view(-1, 1).to(mask.dtype)
    n = pos.sum()
    stats["lm/positive_nll"] = float((-(logp.detach() * pos).sum() / n)) if n > 0 else float("nan")
    return -(logp * pos).sum() / n.clamp(min=1.0)
