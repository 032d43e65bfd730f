"""The ``entropy`` curve's values, pi_old's per-token entropy over every generated token, taken
from the forward TRL already runs for the old log-probs where it can. A part of
``GrpoLabTrainer``, whose ``_get_per_token_logps_and_entropies`` override hands it that pass.

Entropy at a completion token depends only on the tokens before it and their attention mask
(a causal model), so TRL's old-log-prob forward gives the curve's values exactly on every row
whose attention over the completion is the curve's own (ones over the generated tokens). Rows
whose mask TRL changed (``mask_truncated_completions`` zeroes a truncated row) are forwarded
again, alone. Where TRL runs no old-log-prob pass (on-policy, one update per generation), the
whole round is forwarded once.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from grpolab.method.sampling_modes import SAMPLING_MODES
from grpolab.trainer.rollouts import RolloutRow, generated_mask


class TrlForward(NamedTuple):
    """What TRL's ``_get_per_token_logps_and_entropies`` returns (its callers unpack three values)."""
    logps: torch.Tensor
    entropies: torch.Tensor | None
    aux_loss: torch.Tensor | None


class CapturedPass(NamedTuple):
    completion_mask: torch.Tensor   # (n, T): the attention TRL's forward gave the completion tokens
    entropies: torch.Tensor         # (n, T): pi_old's entropy at each completion position


class PiOldEntropy:
    """A trainer's entropy curve under pi_old, one forward per generation round at most: ``capturing``
    while a round runs TRL's generation (``begin_round``), ``captured`` its old-log-prob pass."""

    def __init__(self):
        self.capturing = False
        self.captured: CapturedPass | None = None

    def begin_round(self, args, num_iterations: int, vllm_correction: bool) -> None:
        """Before TRL's generation and scoring of one round. Only its old-log-prob pass is kept: TRL
        runs it first in the round, and a LoRA reference pass after it also forwards the policy model
        (adapter off), so the first call is taken and only when TRL runs the pass at all (its own
        condition: generation and optimizer steps out of step, or vLLM's importance-sampling
        correction, ``vllm_correction``)."""
        generate_every = args.steps_per_generation * num_iterations
        self.capturing = args.gradient_accumulation_steps % generate_every != 0 or vllm_correction
        self.captured = None

    def wants(self, on_policy_model: bool, extra_args: tuple, kwargs: dict) -> bool:
        """Whether this call of TRL's forward is the round's old-log-prob pass (no grad, the policy
        model, no entropies asked for), whose entropies are to be kept."""
        return (self.capturing and self.captured is None and on_policy_model and not torch.is_grad_enabled()
                and not kwargs.get("compute_entropy", False) and not extra_args)

    def keep(self, completion_mask: torch.Tensor, forward: TrlForward) -> TrlForward:
        """Keeps the pass's entropies; returns what TRL's own pass returns (it asked for none)."""
        self.captured = CapturedPass(completion_mask, forward.entropies)
        return TrlForward(forward.logps, None, forward.aux_loss)

    @torch.no_grad()
    def entropy_sums(self, out: dict, rows: list[RolloutRow], start: int, forward, model) -> torch.Tensor:
        """(sum of per-token entropy, tokens) of pi_old over every generated completion token of
        this process's rows (from ``start`` in ``rows``, the round's): the ``entropy`` curve. Its
        tokens are the loss's: TRL's ``completion_mask``, ones over each returned id list (an EOS
        inside a rollout_func's completion does not end it; padding after a vLLM stop string or to
        ``pad_to_multiple_of`` is out), before ``mask_truncated_completions`` zeroes truncated rows.
        ``forward``: TRL's ``_get_per_token_logps_and_entropies`` for the rows the captured pass
        does not cover, on ``model``."""
        ids, T, n = out["completion_ids"], out["completion_ids"].size(1), out["completion_ids"].size(0)
        attend = generated_mask(out, rows, start, model_only=False)
        valid = attend * out["tool_mask"] if "tool_mask" in out else attend   # multi-turn: the model's own tokens
        captured, self.captured = self.captured, None
        if captured is not None and captured.entropies.shape == ids.shape:
            ent = captured.entropies.clone()
            redo = (captured.completion_mask != attend).any(1).nonzero().squeeze(1)
        else:
            ent, redo = torch.zeros(ids.shape, device=ids.device), torch.arange(n, device=ids.device)
        if redo.numel():
            _, ent[redo], _ = forward(model, torch.cat([out["prompt_ids"][redo], ids[redo]], 1),
                                      torch.cat([out["prompt_mask"][redo], attend[redo]], 1), T, compute_entropy=True)
        return torch.stack([(ent.double() * valid).sum(), valid.double().sum()]).cpu()


def loss_sees_pi_old_on_every_token(spec, args, num_iterations: int, out: dict) -> bool:
    """Whether the loss forwards of this generation batch see exactly the ``entropy`` curve's
    population under pi_old: every generated row trained (static sampling, no truncation mask,
    no environment tokens) and no optimizer step before the last micro-batch (one pass, one
    optimizer step per generation). Then the loss's own token-weighted entropy is that curve,
    and no forward is needed here."""
    return (SAMPLING_MODES[spec.sampling].trains_every_row and not args.mask_truncated_completions
            and "tool_mask" not in out and num_iterations == 1
            and args.steps_per_generation == args.gradient_accumulation_steps)
