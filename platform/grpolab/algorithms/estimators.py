"""The advantage axis's torch functions, one per entry of ``grpolab.method.advantages``.

Each estimator's facts (what it reads, its shape, how it meets a reward-side KL, NaN rewards,
reward components, TRL) are data on the method floor; here each gets its function, registered by
name (as verl's ``register_adv_est``). A function maps ``(spec, AdvantageInputs)`` to (N,)
advantages, one per completion, or to this process's (n_local, T) per-token advantages when its
entry says ``per_token``; a critic's function returns an ``Estimate`` that also carries the value
targets. ``AdvantageInputs`` is the one record of what an estimator reads; the settings it reads
(``adv_eps``, ``std_unbiased``, the critic's lambdas) come from the spec.
Formulas: the docstrings of ``grpolab.algorithms.advantages`` and ``grpolab.algorithms.baselines``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Callable, NamedTuple

import torch

from grpolab.algorithms import advantages as adv
from grpolab.algorithms import baselines
from grpolab.algorithms.gigpo import Episodes
from grpolab.algorithms.registrar import registrar
from grpolab.method.advantages import ADVANTAGES


@dataclass
class AdvantageInputs:
    """One generation batch as an estimator reads it. N = groups x group_size, groups contiguous.
    Besides the rewards, each field is set only where something computes it: the trainer's own
    (mask, token_penalty, prompt_keys, tracker, lengths), a provider's for an estimator whose entry
    names it (``Estimator.inputs``: greedy_rewards, old_logp and sum_pi_squared, old_values) and a
    multi-turn rollout's (episodes)."""
    rewards: torch.Tensor                       # (N,) or (N, K) components (combined unless a ``components`` entry)
    group_size: int
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
    old_values: torch.Tensor | None = None      # (n_local, T), as mask: the critic's V(s_t) at generation, no grad
    episodes: Episodes | None = None            # multi-turn episodes, one per row: GiGPO's episode and step levels
    provided: dict = field(default_factory=dict)   # inputs no field holds, by the keys the entry's inputs declare

    @classmethod
    def of(cls, rewards: torch.Tensor, group_size: int, **given) -> "AdvantageInputs":
        """The record of inputs given by name, as providers return them: a field's name sets that
        field, any other name goes to ``provided`` (``compute_advantages`` refuses it unless one of the
        estimator's inputs declares it, ``method.advantages.input_keys``: a misspelt field is not
        carried along unread)."""
        names = {f.name for f in fields(cls)} - {"rewards", "group_size", "provided"}
        return cls(rewards, group_size, **{k: v for k, v in given.items() if k in names},
                   provided={k: v for k, v in given.items() if k not in names})

    def completion_lengths(self) -> torch.Tensor:
        if self.lengths is not None:
            return self.lengths.to(self.rewards)
        if self.mask is None or self.local_rows is not None and self.mask.shape[0] != self.rewards.shape[0]:
            raise ValueError("this estimator needs every completion's length (lengths, or the whole batch's mask)")
        return self.mask.sum(1).to(self.rewards)


class Estimate(NamedTuple):
    """``compute_advantages``'s result: the advantages, (N,) or this process's (n_local, T), and, from a
    critic's estimator, the value targets R_t (n_local, T) its value loss regresses to (None otherwise)."""
    advantages: torch.Tensor
    value_targets: torch.Tensor | None = None


@dataclass(frozen=True)
class EstimatorFn:
    fn: Callable                              # (spec, AdvantageInputs) -> advantages, or an Estimate
    unscorable: Callable | None = None        # (spec, r (N,) with NaN rows, AdvantageInputs) -> (N,), NaN rows 0


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
    scale = (lambda spec: (spec.adv_eps, spec.std_unbiased)) if scaled else (lambda spec: ())
    register(name, unscorable=lambda spec, r, x: unscorable(r, x.group_size, *scale(spec)))(
        lambda spec, x: fn(x.rewards, x.group_size, *scale(spec)))


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
    return adv.decoupled(r, x.group_size, w.to(r), spec.adv_eps, spec.std_unbiased)


@register("value_tracker")
def value_tracker(spec, x: AdvantageInputs) -> torch.Tensor:
    if x.tracker is None or x.prompt_keys is None:
        raise ValueError("value_tracker needs a ValueTracker and one prompt key per completion")
    return adv.value_tracker(x.rewards, x.prompt_keys, x.tracker, spec.adv_eps, spec.std_unbiased)


@register("opo")
def opo(spec, x: AdvantageInputs) -> torch.Tensor:
    return baselines.opo(x.rewards, x.completion_lengths(), x.group_size)


@register("grpo_passk")
def grpo_passk(spec, x: AdvantageInputs) -> torch.Tensor:
    return baselines.pass_at_k(x.rewards, x.group_size, spec.adv_eps, True, spec.std_unbiased)


@register("gpg")
def gpg(spec, x: AdvantageInputs) -> torch.Tensor:
    return baselines.gpg(x.rewards, x.group_size)


@register("maxrl")
def maxrl(spec, x: AdvantageInputs) -> torch.Tensor:
    return baselines.mean_scaled(x.rewards, x.group_size, spec.adv_eps)


def _given(name: str, field: str, value):
    """An input the trainer computes only for the estimators whose entry asks for it."""
    if value is None:
        raise ValueError(f"advantage={name} needs {field} (the trainer supplies it when the estimator's entry names "
                         f"it in inputs: {', '.join(ADVANTAGES[name].inputs) or 'none named'})")
    return value


@register("gae")
def gae(spec, x: AdvantageInputs) -> Estimate:
    """The critic axis (PPO; VAPO), this process's rows: GAE from the critic's values at generation
    V(s_t) (``old_values``), ``adv.gae``'s per-token advantages and value targets. The policy's
    lambda is VAPO's length-adaptive 1 - 1 / (alpha |o|) when ``spec.gae_length_alpha`` > 0, else
    ``spec.gae_lambda``; the targets' is ``spec.gae_lambda_critic``. With ``whiten_advantages`` the
    advantages are (A - mean) / std over the valid tokens of the whole batch (``reduce``: every process)."""
    values = _given("gae", "the critic's values at generation", x.old_values)
    mask = _needs_mask("gae", x)
    lam = adv.length_adaptive_lambda(mask, spec.gae_length_alpha) if spec.gae_length_alpha > 0 else spec.gae_lambda
    advantages, returns = adv.gae(_local(x, x.rewards), values, mask, spec.gae_gamma, lam, spec.gae_lambda_critic,
                                  x.token_penalty)
    if spec.whiten_advantages:
        advantages = adv.whiten_tokens(advantages, mask, reduce=x.reduce)
    return Estimate(advantages, returns)


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
