"""Which completions count as correct (the drop-in's ``correctness=``: a reward function, a
dataset column, a callable, or none: above the group mean), and TRL's "all reward functions
returned None" warning over the user's reward functions only. A mixin of ``GrpoLabTrainer``.
"""

from __future__ import annotations

import logging

import torch

from grpolab import algorithms
from grpolab.trainer import dropin


class CorrectnessRules:
    """Per-row correctness of ``GrpoLabTrainer`` (``correctness=``)."""

    def _warn_unscorable(self, rewards: torch.Tensor, prompts, completions) -> None:
        """TRL's "All reward functions returned None" warning, over the user's reward functions only:
        grpolab's own (DAPO's ``overlong``) always returns a number, so TRL's check never fires."""
        if not self._own_reward_columns:
            return   # TRL's own check saw every column
        user = [i for i in range(rewards.shape[1]) if i not in self._own_reward_columns]
        n = len(prompts)
        local = rewards[self.accelerator.process_index * n:(self.accelerator.process_index + 1) * n, user]
        if not user or not torch.isnan(local).all(dim=1).any():
            return
        row = int(torch.isnan(local).all(dim=1).nonzero(as_tuple=True)[0][0])
        logging.getLogger("trl.trainer.grpo_trainer").warning(
            f"All reward functions returned None for the following kwargs:\n"
            f"{{'prompt': {prompts[row]!r}, 'completion': {completions[row]!r}}}\n"
            "Please ensure that at least one reward function returns a valid reward.")

    def _local_correctness(self, inputs, prompts, completions, completion_ids_list) -> list[bool]:
        kind, key = self._correct_kind, self._correct_key
        if kind == "column":
            return dropin.correct_from_column(completions, [x[key] for x in inputs])
        if kind == "callable":
            columns = {k: [x[k] for x in inputs] for k in inputs[0] if k not in ("prompt", "completion", "completion_ids")}
            out = key(prompts=prompts, completions=completions, completion_ids=completion_ids_list,
                      trainer_state=self.state, **columns)
            return [bool(v) for v in out]
        return [False] * len(inputs)   # filled in from the gathered rewards

    def _correct_from_rewards(self, rewards: torch.Tensor) -> list[bool]:
        """``correctness=<reward name>``: that reward > 0. None: the stand-in, total reward above
        its group's mean (curves renamed, ``dropin.PROXY_NAMES``)."""
        if self._correct_kind == "reward":
            return dropin.correct_from_reward(rewards[:, self._correct_key].tolist())
        total = algorithms.combine_rewards(rewards, self.spec.reward_weights).float()
        G = self.num_generations if self.model.training else self.num_generations_eval
        if total.numel() % G:
            return (total > total.nanmean()).tolist()
        grouped = total.view(-1, G)   # unscorable (NaN) rows: never above, and out of the mean
        return (grouped > grouped.nanmean(1, keepdim=True)).view(-1).tolist()

