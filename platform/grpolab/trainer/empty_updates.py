"""No inert update at run time: an update batch whose loss gives the policy no gradient is warned
about with its cause, and ``max_empty_updates`` such batches in a row raise. A part of
``GrpoLabTrainer``; it reads the trainer's public accelerator, args and state.
"""

from __future__ import annotations

import torch

from grpolab.errors import EmptyUpdatesError, EmptyUpdateWarning, warn_at_caller
from grpolab.method.entropy_modes import ENTROPY_MODES
from grpolab.method.kl import kl_in_loss
from grpolab.method.sampling_modes import SAMPLING_MODES, on_flat_groups
from grpolab.trainer import sampling
from grpolab.trainer.rollouts import Generated, RolloutRow


class EmptyUpdateChecks:
    """Update-signal checks of a ``GrpoLabTrainer`` (its ``max_empty_updates``; the streak is kept
    in its ``counters``, which the checkpoint saves)."""

    def __init__(self, trainer):
        self.trainer = trainer

    def _other_gradient_terms(self) -> list[str]:
        """Loss terms that give the policy a gradient when every advantage is 0."""
        trainer = self.trainer
        spec, terms = trainer.spec, []
        if kl_in_loss(spec):
            terms.append("in-loss KL")
        if trainer.entropy_control.coef or ENTROPY_MODES[spec.entropy_mode].adaptive:
            terms.append("entropy bonus")
        if spec.positive_lm_coef > 0:
            terms.append("positive-example LM loss")
        if getattr(trainer, "aux_loss_enabled", False):
            terms.append("MoE router auxiliary loss")
        return terms

    def check(self, out: dict, total: torch.Tensor, rows: list[RolloutRow], trained_rows: torch.Tensor,
                             generated: Generated, G: int) -> None:
        """An update batch whose loss gives the policy no gradient -- every row masked out of the loss,
        or every trained token's advantage 0 with no other loss term -- is warned about (its cause)
        at the first of a streak; ``max_empty_updates`` such batches in a row raise EmptyUpdatesError
        (0: never). Decided on gathered values, so every process raises together."""
        trainer = self.trainer
        mask = (out["completion_mask"] * out.get("tool_mask", 1)).float()
        A = out["advantages"]
        A = A.unsqueeze(1) if A.dim() == 1 else A
        signal = ((A.abs() > 0).float() * mask).sum().reshape(1)
        if trainer.accelerator.num_processes > 1:
            signal = trainer.accelerator.reduce(signal, reduction="sum")
        if not trained_rows.any():
            cause = self._no_rows_cause(generated, G)
        elif float(signal) == 0 and not self._other_gradient_terms():
            cause = self._zero_advantage_cause(total, rows, G)
        else:
            trainer.counters.empty_streak = 0
            return
        counters, limit = trainer.counters, trainer.max_empty_updates
        counters.empty_streak += 1
        if counters.empty_streak == 1:
            warn_at_caller(f"GrpoLabTrainer: update batch at step {trainer.state.global_step} gives the policy no "
                           f"gradient: {cause}" + (f"; the run fails after {limit} such batches in a row "
                                                   "(max_empty_updates)" if limit else ""), EmptyUpdateWarning)
        if limit and counters.empty_streak >= limit:
            raise EmptyUpdatesError(f"{counters.empty_streak} update batches in a row gave the policy no gradient "
                                    f"(max_empty_updates={limit}; CLI: train.max_empty_updates, 0 = never fail), up "
                                    f"to step {trainer.state.global_step}: {cause}")

    def _no_rows_cause(self, generated: Generated, G: int) -> str:
        trainer, spec = self.trainer, self.trainer.spec
        n, truncated = len(generated.rows), sum(bool(r.truncated) for r in generated.rows)
        parts = []
        if trainer.args.mask_truncated_completions and truncated:
            parts.append(f"{truncated} of {n} completions hit max_completion_length={trainer.max_completion_length} "
                         "without EOS and the overlong filter (method.overlong_filter, GRPOConfig."
                         "mask_truncated_completions) masks truncated completions out of the loss")
        if SAMPLING_MODES[spec.sampling].drops_flat_groups:
            parts.append(f"method.sampling={spec.sampling} dropped every group whose "
                         f"{spec.sampling_filter} does not vary")
        return ("every row of the update batch is masked out of the loss: " + "; ".join(parts or [
            "no completion token is left in the loss mask"]))

    def _zero_advantage_cause(self, total: torch.Tensor, rows: list[RolloutRow], G: int) -> str:
        flat = (sampling.group_spread(total.float().cpu(), G) <= sampling.ZERO_VARIANCE_TOL)
        zero, groups = int(flat.sum()), flat.numel()
        spec = self.trainer.spec
        where = on_flat_groups(spec)   # method/sampling_modes.py
        masked = sum(bool(r.truncated) for r in rows) if self.trainer.args.mask_truncated_completions else 0
        extra = (f"; the overlong filter (method.overlong_filter) masked {masked} truncated completions"
                 if masked else "")
        return (f"every trained completion has advantage 0 ({zero} of {groups} groups have equal rewards, so "
                f"method.advantage={spec.advantage} gives them 0; {where}){extra}, and no other loss "
                "term (in-loss KL, entropy bonus) gives a gradient")

