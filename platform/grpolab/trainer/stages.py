"""The stages of one generation batch after TRL's generation and scoring, over named records:
advantages (the KL in the reward, GFPO's filter, the estimator's inputs, ``compute_advantages``) ->
metrics (the rollout curves, the completions table, the update-signal check). A part of
``GrpoLabTrainer``: its ``_generate_and_score_completions`` builds the ``Rollout`` (generate ->
score -> select) and calls these in order. Reads the trainer's public state only and logs
through its ``record_curve``.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import torch

from grpolab import algorithms
from grpolab.algorithms import AdvantageInputs
from grpolab.method.advantages import ADVANTAGES
from grpolab.method.sampling_modes import SAMPLING_MODES
from grpolab.trainer import batch_extras, dropin
from grpolab.trainer.batch_extras import BatchExtras
from grpolab.trainer.metrics import rollout_metrics, trained_metrics
from grpolab.trainer.rollouts import (Generated, RolloutRow, RolloutView, ScoredRound, completion_rows, correct_of,
                                      generated_mask, lengths_of, truncated_of)


class Rollout(NamedTuple):
    """One generation batch as the stages read it: this process's batch (TRL's dict, which the
    stages fill for the loss), the kept rows' reward components (N, K) and rows (every process,
    rank order), every completion generated for it, this process's first row, the group size,
    the loss's model tokens (n_local, T) and the reward-side KL per token (None: none)."""
    out: dict
    rewards: torch.Tensor
    rows: list[RolloutRow]
    generated: Generated
    start: int
    G: int
    mask: torch.Tensor
    penalty: torch.Tensor | None


class Scored(NamedTuple):
    """The advantage stage's result: this process's advantages, (n_local,) or per token (n_local, T),
    the combined reward (N,), GFPO's retained rows (None: every row is in the baselines) and, with a
    critic, its values at generation (its provider's ``old_values``) and GAE's value targets
    (n_local, T) (None without one)."""
    advantages: torch.Tensor
    total: torch.Tensor
    retained: torch.Tensor | None
    old_values: torch.Tensor | None = None
    returns: torch.Tensor | None = None


def group_extras(total: torch.Tensor, rows: list[RolloutRow], G: int, local: slice) -> BatchExtras:
    """This process's rows (``local`` of the gathered batch) as the loss reads them: group i // G of
    row i, the combined reward ``total`` (N,) and correctness, on ``total``'s device; no critic fields."""
    device = total.device
    return BatchExtras(group_ids=(torch.arange(total.numel(), device=device) // G)[local], rewards=total[local],
                       correct=correct_of(rows).to(device)[local])


class RolloutStages:
    """The advantage and metric stages of a ``GrpoLabTrainer``'s generation batches."""

    def __init__(self, trainer):
        self.trainer = trainer

    def _gather(self, t: torch.Tensor) -> torch.Tensor:
        accelerator = self.trainer.accelerator
        return accelerator.gather(t) if accelerator.num_processes > 1 else t

    def _rewards(self, rollout: Rollout, total: torch.Tensor) -> torch.Tensor:
        """The rewards the estimator reads: the components, or total - sum_t KL_t where the reward-side
        KL is folded in per sequence."""
        trainer, penalty = self.trainer, rollout.penalty
        if penalty is None:
            return rollout.rewards
        seq_pen = self._gather((penalty * rollout.mask).sum(-1))
        trainer.record_curve("kl_reward_penalty", seq_pen.mean().item())
        if ADVANTAGES[trainer.spec.advantage].kl_per_token:   # those fold it in per token
            return rollout.rewards
        return total - seq_pen   # (N,): the weights are already in ``total``, never applied twice

    def advantages(self, rollout: Rollout, inputs: list[dict]) -> Scored:
        """grpolab's advantages of the batch: one ``AdvantageInputs`` record (the trainer's inputs, its
        providers' and its rollout's, ``EstimatorInputs.extras``) through ``algorithms.compute_advantages``;
        a critic's values at generation and value targets ride on for the critic's loss."""
        trainer, out, start, G, mask = self.trainer, rollout.out, rollout.start, rollout.G, rollout.mask
        spec, accelerator, n_local = trainer.spec, trainer.accelerator, out["completion_ids"].size(0)
        total = algorithms.combine_rewards(rollout.rewards, spec.reward_weights)
        rewards_adj = self._rewards(rollout, total)
        retained = None   # GFPO: the rows in the baselines; the group curves and the zero-advantage cause read them
        if SAMPLING_MODES[spec.sampling].retains:
            kept = trainer.group_sampling.gfpo(out, rewards_adj, start)
            rewards_adj, retained = kept.rewards, kept.retained
        reduce = (lambda t: accelerator.reduce(t, reduction="sum")) if accelerator.num_processes > 1 else None
        generated_tokens = generated_mask(out, rollout.rows, start)   # model tokens, before any filter's masking
        # the optimal token baselines are over every generated model token (truncated rows included), as verl's;
        # the loss applies the trained mask
        baseline_mask = generated_tokens.float() if ADVANTAGES[spec.advantage].over_generated_tokens else mask
        x = AdvantageInputs.of(rewards_adj, G, mask=baseline_mask, token_penalty=rollout.penalty,
                               prompt_keys=[r.prompt for r in rollout.rows], tracker=trainer.tracker,
                               local_rows=slice(start, start + n_local), reduce=reduce,
                               lengths=self._gather(generated_tokens.sum(1)),
                               **trainer.estimator_inputs.extras(inputs, out, baseline_mask))
        estimate = algorithms.compute_advantages(spec, x)
        if trainer.tracker is not None:
            trainer.record_curve("tracker/prompts", float(len(trainer.tracker.state)))
        advantages = estimate.advantages
        if advantages.dim() == 1:
            advantages = advantages[start:start + n_local]
        return Scored(advantages, total, retained, x.old_values, estimate.value_targets)

    def record(self, rollout: Rollout, scored: Scored) -> None:
        """The loss's per-row inputs into ``rollout.out`` (``advantages``, and grpolab's own as one
        ``BatchExtras`` record under ``batch_extras.KEY``), the completions table
        (``trainer.last_rollout``), the rollout curves and the update-signal check."""
        trainer, out, start, G, rows = self.trainer, rollout.out, rollout.start, rollout.G, rollout.rows
        total, device, n_local = scored.total, rollout.rewards.device, out["completion_ids"].size(0)
        out["advantages"] = scored.advantages.to(device)
        kept = 4 * G if trainer.rollout_rows_kept is None else trainer.rollout_rows_kept
        trainer.last_rollout = completion_rows(RolloutView(rows, rollout.rewards, total, start, G),
                                               trainer.reward_func_names, scored.advantages, rollout.mask, kept)
        # added last to TRL's dict: TRL's split reads the micro-batch size from the .shape[0] of the
        # batch's first non-None value (prompt_ids), which the record (no shape) must never be
        out[batch_extras.KEY] = dataclasses.replace(group_extras(total, rows, G, slice(start, start + n_local)),
                                                    old_values=scored.old_values, returns=scored.returns)
        trained_rows = self._gather((out["completion_mask"].sum(1) > 0).float()).bool().cpu()
        self._curves(rollout, scored, trained_rows)
        retained = scored.retained
        in_baseline = total if retained is None else total.masked_fill(~retained.to(total.device), float("nan"))
        trainer.empty_updates.check(out, in_baseline, rows, trained_rows, rollout.generated, G)

    def record_evaluation(self, out: dict, scored: ScoredRound, G: int) -> None:
        """An evaluation batch's per-row loss inputs into ``out`` (TRL's dict; its advantages are
        TRL's): the groups of ``G`` (the evaluation's group size), the combined reward and
        correctness of this process's rows, so that every method's loss evaluates (the pairwise
        surrogates read the groups and rewards, VAPO's LM term the correct rows). No critic values:
        evaluation trains no critic."""
        trainer, n_local = self.trainer, out["completion_ids"].size(0)
        start = trainer.accelerator.process_index * n_local
        total = algorithms.combine_rewards(scored.rewards, trainer.spec.reward_weights)
        # added last, as ``record`` adds it (TRL's dict keeps prompt_ids first)
        out[batch_extras.KEY] = group_extras(total, scored.rows, G, slice(start, start + n_local))

    def _curves(self, rollout: Rollout, scored: Scored, trained_rows: torch.Tensor) -> None:
        """Curves once per generation batch, in two populations: unprefixed over every completion
        generated for it (all dynamic-sampling rounds, before any filter), ``trained/`` over the
        rows the update uses (``metrics.trained_metrics``)."""
        trainer, generated, rows, G = self.trainer, rollout.generated, rollout.rows, rollout.G
        spec, accelerator, counters = trainer.spec, trainer.accelerator, trainer.counters
        gen_rows = generated.rows
        gen_total = algorithms.combine_rewards(generated.rewards, spec.reward_weights)
        stats = rollout_metrics(gen_total.float().cpu(), correct_of(gen_rows), lengths_of(gen_rows),
                                truncated_of(gen_rows), G, overlong=(trainer.max_completion_length, spec.overlong_buffer))
        stats.update(trained_metrics(scored.total.float().cpu(), correct_of(rows), lengths_of(rows), trained_rows, G,
                                     scored.retained))
        if trainer.correctness.kind == "none":   # "correct" was the stand-in: the names say so
            stats = dropin.rename_for_proxy(stats)
        ent = generated.entropy   # None: the loss logs it (pi_old_entropy.loss_sees_pi_old_on_every_token)
        if ent is not None and accelerator.num_processes > 1:
            ent = accelerator.reduce(ent.to(accelerator.device), reduction="sum").cpu()
        if ent is not None and ent[1] > 0:
            stats["entropy"] = float(ent[0] / ent[1])
        counters.cumulative_tokens += stats["tokens/generated"]
        stats["tokens/cumulative"] = counters.cumulative_tokens
        stats["override/advantage"] = 1.0
        for key, value in stats.items():
            trainer.record_curve(key, value)
