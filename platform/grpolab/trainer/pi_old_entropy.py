"""The ``entropy`` curve's values, pi_old's per-token entropy over every generated token, taken
from the forward TRL already runs for the old log-probs where it can. A mixin of
``GrpoLabTrainer``; it overrides TRL's ``_get_per_token_logps_and_entropies``.

Entropy at a completion token depends only on the tokens before it and their attention mask
(a causal model), so TRL's old-log-prob forward gives the curve's values exactly on every row
whose attention over the completion is the curve's own (ones over the generated tokens). Rows
whose mask TRL changed (``mask_truncated_completions`` zeroes a truncated row) are forwarded
again, alone. Where TRL runs no old-log-prob pass (on-policy, one update per generation), the
whole round is forwarded once, as before.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from grpolab.method.sampling_modes import SAMPLING_MODES
from grpolab.trainer.rollouts import generated_mask


class TrlForward(NamedTuple):
    """What TRL's ``_get_per_token_logps_and_entropies`` returns (its callers unpack three values)."""
    logps: torch.Tensor
    entropies: torch.Tensor | None
    aux_loss: torch.Tensor | None


class CapturedPass(NamedTuple):
    completion_mask: torch.Tensor   # (n, T): the attention TRL's forward gave the completion tokens
    entropies: torch.Tensor         # (n, T): pi_old's entropy at each completion position


class PiOldEntropy:
    """``GrpoLabTrainer``'s entropy curve under pi_old, one forward per generation round at most."""

    _capture_old_pass = False
    _captured: CapturedPass | None = None

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        """TRL's forward; inside a generation round's old-log-prob pass (no grad, the policy
        model) it also keeps the entropies, which come from logits computed anyway."""
        if not (self._capture_old_pass and self._captured is None and model is self.model
                and not torch.is_grad_enabled() and not kwargs.get("compute_entropy", False) and not args):
            return super()._get_per_token_logps_and_entropies(model, input_ids, attention_mask, logits_to_keep,
                                                              *args, **kwargs)
        logps, entropies, aux = super()._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, logits_to_keep, **{**kwargs, "compute_entropy": True})
        self._captured = CapturedPass(attention_mask[:, -logits_to_keep:], entropies)
        return TrlForward(logps, None, aux)   # as TRL's own pass: it asked for no entropies

    def _trl_round(self, inputs) -> dict:
        """TRL's generation and scoring of one round, keeping its old-log-prob pass's entropies.
        Only that pass is kept: TRL runs it first in the round, and a LoRA reference pass after it
        also forwards ``self.model`` (adapter off), so the first call is taken and only when TRL
        runs the pass at all (its own condition: generation and optimizer steps out of step, or
        vLLM's importance-sampling correction)."""
        generate_every = self.args.steps_per_generation * self.num_iterations
        self._capture_old_pass = (self.args.gradient_accumulation_steps % generate_every != 0
                                  or (self.use_vllm and self.vllm_importance_sampling_correction))
        self._captured = None
        try:
            return super()._generate_and_score_completions(inputs)
        finally:
            self._capture_old_pass = False

    def _loss_sees_pi_old_on_every_token(self, out: dict) -> bool:
        """Whether the loss forwards of this generation batch see exactly the ``entropy`` curve's
        population under pi_old: every generated row trained (static sampling, no truncation mask,
        no environment tokens) and no optimizer step before the last micro-batch (one pass, one
        optimizer step per generation). Then the loss's own token-weighted entropy is that curve,
        and no forward is needed here."""
        return (SAMPLING_MODES[self.spec.sampling].trains_every_row and not self.args.mask_truncated_completions
                and "tool_mask" not in out and self.num_iterations == 1
                and self.args.steps_per_generation == self.args.gradient_accumulation_steps)

    @torch.no_grad()
    def _entropy_sums(self, out: dict) -> torch.Tensor:
        """(sum of per-token entropy, tokens) of pi_old over every generated completion token of
        this process's rows: the ``entropy`` curve. Its tokens are the loss's: TRL's
        ``completion_mask``, ones over each returned id list (an EOS inside a rollout_func's
        completion does not end it; padding after a vLLM stop string or to ``pad_to_multiple_of``
        is out), before ``mask_truncated_completions`` zeroes truncated rows (lengths:
        ``self._scored``, this round's rows)."""
        ids, T, n = out["completion_ids"], out["completion_ids"].size(1), out["completion_ids"].size(0)
        attend = generated_mask(out, self._scored.rows, self.accelerator.process_index * n, model_only=False)
        valid = attend * out["tool_mask"] if "tool_mask" in out else attend   # multi-turn: the model's own tokens
        captured, self._captured = self._captured, None
        if captured is not None and captured.entropies.shape == ids.shape:
            ent = captured.entropies.clone()
            redo = (captured.completion_mask != attend).any(1).nonzero().squeeze(1)
        else:
            ent, redo = torch.zeros(ids.shape, device=ids.device), torch.arange(n, device=ids.device)
        if redo.numel():
            _, ent[redo], _ = self._get_per_token_logps_and_entropies(
                self.model, torch.cat([out["prompt_ids"][redo], ids[redo]], 1),
                torch.cat([out["prompt_mask"][redo], attend[redo]], 1), T, compute_entropy=True)
        return torch.stack([(ent.double() * valid).sum(), valid.double().sum()]).cpu()
