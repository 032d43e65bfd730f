"""The advantage axis's torch functions, one per entry of ``grpolab.method.advantages``.

Each estimator's facts (what it reads, its shape, how it meets a reward-side KL, NaN rewards,
reward components, TRL) are data on the method floor; here each gets its function, registered by
name (as verl's ``register_adv_est``). A function maps ``AdvantageInputs`` to (N,) advantages, one per
completion, or to this process's (n_local, T) per-token advantages when its entry says ``per_token``.
Formulas: the docstrings of ``grpolab.algorithms.advantages`` and ``grpolab.algorithms.baselines``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from grpolab.algorithms import advantages as adv
from grpolab.algorithms import baselines
from grpolab.algorithms.registrar import registrar
from grpolab.method.advantages import ADVANTAGES


@dataclass
class AdvantageInputs:
    """One generation batch as an estimator reads it. N = groups x group_size, groups contiguous."""
    rewards: torch.Tensor                       # (N,) combined, or (N, K) components for a ``components`` entry
    group_size: int
    adv_eps: float
    std_unbiased: bool
    mask: torch.Tensor | None = None            # (n_local, T): this process's rows ``local_rows``
    token_penalty: torch.Tensor | None = None   # (n_local, T): beta * KL per token (a reward-side KL)
    prompt_keys: list[str] | None = None        # (N,)
    tracker: adv.ValueTracker | None = None
    local_rows: slice | None = None
    reduce: Callable | None = None              # sums a tensor over processes
    lengths: torch.Tensor | None = None         # (N,): valid tokens per completion, the whole batch
    greedy_rewards: torch.Tensor | None = None  # (N,): the reward of a greedy completion of each row's prompt
    old_logp: torch.Tensor | None = None        # (n_local, T), as mask: log pi_old of each sampled token
    sum_pi_squared: torch.Tensor | None = None  # (n_local, T), as mask: sum over the vocabulary of pi_old^2 per token
    provided: dict = field(default_factory=dict)   # any other input an entry names, by its provider's keys

    def completion_lengths(self) -> torch.Tensor:
        if self.lengths is not None:
            return self.lengths.to(self.rewards)
        if self.mask is None or self.local_rows is not None and self.mask.shape[0] != self.rewards.shape[0]:
            raise ValueError("this estimator needs every completion's length (lengths, or the whole batch's mask)")
        return self.mask.sum(1).to(self.rewards)


@dataclass(frozen=True)
class EstimatorFn:
    fn: Callable                              # (spec, AdvantageInputs) -> advantages
    unscorable: Callable | None = None        # (r (N,) with NaN rows, AdvantageInputs) -> (N,), NaN rows 0


ESTIMATORS: dict[str, EstimatorFn] = {}


register = registrar(ADVANTAGES, ESTIMATORS, "advantage", "grpolab.method.advantages.ADVANTAGES", EstimatorFn)


def _local(x: AdvantageInputs, r: torch.Tensor) -> torch.Tensor:
    return r if x.local_rows is None else r[x.local_rows]


def _needs_mask(name: str, x: AdvantageInputs) -> torch.Tensor:
    if x.mask is None:
        raise ValueError(f"{name} needs the completion mask")
    return x.mask


def _grouped(name: str, fn: Callable, unscorable: Callable, scaled: bool) -> None:
    """Register a group estimator ``fn(r, G[, eps, unbiased])`` and its form for unscorable rows."""
    scale = (lambda x: (x.adv_eps, x.std_unbiased)) if scaled else (lambda x: ())
    register(name, unscorable=lambda r, x: unscorable(r, x.group_size, *scale(x)))(
        lambda spec, x: fn(x.rewards, x.group_size, *scale(x)))


_grouped("group_std", adv.group_std, adv.unscorable_group_std, scaled=True)
_grouped("group_mean", adv.group_mean, adv.unscorable_group_mean, scaled=False)
_grouped("batch_std", adv.batch_std, adv.unscorable_batch_std, scaled=True)
_grouped("leave_one_out", adv.leave_one_out, adv.unscorable_leave_one_out, scaled=False)


@register("reinforce_pp")
def reinforce_pp(spec, x: AdvantageInputs) -> torch.Tensor:
    return adv.reinforce_pp(_local(x, x.rewards), _needs_mask("reinforce_pp", x), x.token_penalty, x.reduce)


@register("reinforce_pp_baseline")
def reinforce_pp_baseline(spec, x: AdvantageInputs) -> torch.Tensor:
    """REINFORCE++-baseline: group-centre first, then as REINFORCE++."""
    centred = adv.group_mean(x.rewards, x.group_size)
    return adv.reinforce_pp(_local(x, centred), _needs_mask("reinforce_pp_baseline", x), x.token_penalty, x.reduce)


@register("decoupled")
def decoupled(spec, x: AdvantageInputs) -> torch.Tensor:
    r = x.rewards
    if torch.isnan(r).any():
        raise ValueError("advantage=decoupled: a reward function returned None for some completions; the "
                         "per-component normalisation does not define those yet (use an estimator that leaves them "
                         "out of the baseline)")
    if r.dim() != 2 or r.shape[1] < 2:
        raise ValueError("decoupled advantages need (N, K) rewards with K >= 2 components")
    K = r.shape[1]
    w = (torch.ones(K, device=r.device) if spec.reward_weights is None
         else torch.tensor(spec.reward_weights, device=r.device))
    return adv.decoupled(r, x.group_size, w.to(r), x.adv_eps, x.std_unbiased)


@register("value_tracker")
def value_tracker(spec, x: AdvantageInputs) -> torch.Tensor:
    if x.tracker is None or x.prompt_keys is None:
        raise ValueError("value_tracker needs a ValueTracker and one prompt key per completion")
    return adv.value_tracker(x.rewards, x.prompt_keys, x.tracker, x.adv_eps, x.std_unbiased)


@register("gae")
def gae(spec, x: AdvantageInputs) -> torch.Tensor:
    raise ValueError("gae advantages need a critic's values: use grpolab.algorithms.gae_advantages")


@register("opo")
def opo(spec, x: AdvantageInputs) -> torch.Tensor:
    return baselines.opo(x.rewards, x.completion_lengths(), x.group_size)


@register("grpo_passk")
def grpo_passk(spec, x: AdvantageInputs) -> torch.Tensor:
    return baselines.pass_at_k(x.rewards, x.group_size, x.adv_eps, True, x.std_unbiased)


@register("gpg")
def gpg(spec, x: AdvantageInputs) -> torch.Tensor:
    return baselines.gpg(x.rewards, x.group_size)


@register("maxrl")
def maxrl(spec, x: AdvantageInputs) -> torch.Tensor:
    return baselines.mean_scaled(x.rewards, x.group_size, x.adv_eps)


def _given(name: str, field: str, value):
    """An input the trainer computes only for the estimators whose entry asks for it."""
    if value is None:
        raise ValueError(f"advantage={name} needs {field} (the trainer supplies it when the estimator's entry names "
                         f"it in inputs: greedy_rewards / pi_old_token_stats)")
    return value


@register("remax")
def remax(spec, x: AdvantageInputs) -> torch.Tensor:
    return baselines.remax(x.rewards, _given("remax", "the reward of a greedy completion per row", x.greedy_rewards))


def _token_baseline(name: str, fn: Callable, x: AdvantageInputs) -> torch.Tensor:
    """This process's rows: their groups must be whole (groups contiguous), since the per-position
    baseline is over a group's tokens, which only the rows' own process holds."""
    r = _local(x, x.rewards)
    mask = _needs_mask(name, x)
    if r.shape[0] != mask.shape[0] or r.shape[0] % x.group_size:
        raise ValueError(f"advantage={name} needs whole groups on each process ({mask.shape[0]} rows, group size "
                         f"{x.group_size})")
    return fn(r, mask, _given(name, "log pi_old of each token", x.old_logp),
              _given(name, "sum_v pi_old(v)^2 at each token", x.sum_pi_squared), x.group_size)


@register("optimal_token_baseline")
def optimal_token_baseline(spec, x: AdvantageInputs) -> torch.Tensor:
    return _token_baseline("optimal_token_baseline", baselines.optimal_token_baseline, x)


@register("tir_optimal_token_baseline")
def tir_optimal_token_baseline(spec, x: AdvantageInputs) -> torch.Tensor:
    return _token_baseline("tir_optimal_token_baseline", baselines.tir_optimal_token_baseline, x)


def refuse_unscorable(name: str) -> None:
    """The error for an estimator that does not define NaN (unscorable) rewards."""
    valid = [n for n, f in ESTIMATORS.items() if f.unscorable is not None]
    raise ValueError(f"advantage={name}: a reward function returned None for every reward of some completions, "
                     f"which this estimator does not define; estimators that leave such completions out of the "
                     f"baseline (as TRL does): {', '.join(valid)}")
