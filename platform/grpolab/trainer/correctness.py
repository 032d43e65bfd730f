"""Which completions count as correct (the drop-in's ``correctness=``: a reward function, a
dataset column, a callable, or none: above the group mean), and TRL's "all reward functions
returned None" warning over the user's reward functions only. A part of ``GrpoLabTrainer``.
"""

from __future__ import annotations

import logging

import torch

from grpolab import algorithms
from grpolab.trainer import dropin


class Correctness:
    """The trainer's correctness source: ``kind`` ("reward", "column", "callable" or "none") and
    ``key`` (a reward column, a dataset column or the callable), as ``dropin.prepare`` decided them;
    ``reward_weights``: the method's, for the stand-in's total reward."""

    def __init__(self, kind: str, key, reward_weights):
        self.kind, self.key, self.reward_weights = kind, key, reward_weights

    def local(self, inputs, prompts, completions, completion_ids_list, trainer_state) -> list[bool]:
        """This process's rows; "reward" and "none" are decided later on the gathered rewards
        (``from_rewards``), so they are False here."""
        kind, key = self.kind, self.key
        if kind == "column":
            return dropin.correct_from_column(completions, [x[key] for x in inputs])
        if kind == "callable":
            columns = {k: [x[k] for x in inputs] for k in inputs[0] if k not in ("prompt", "completion", "completion_ids")}
            out = key(prompts=prompts, completions=completions, completion_ids=completion_ids_list,
                      trainer_state=trainer_state, **columns)
            return [bool(v) for v in out]
        return [False] * len(inputs)

    def from_rewards(self, rewards: torch.Tensor, G: int) -> list[bool]:
        """``correctness=<reward name>``: that reward > 0. None: the stand-in, total reward above
        its group's mean (curves renamed, ``dropin.PROXY_NAMES``); ``G``: the group size."""
        if self.kind == "reward":
            return dropin.correct_from_reward(rewards[:, self.key].tolist())
        total = algorithms.combine_rewards(rewards, self.reward_weights).float()
        if total.numel() % G:
            return (total > total.nanmean()).tolist()
        grouped = total.view(-1, G)   # unscorable (NaN) rows: never above, and out of the mean
        return (grouped > grouped.nanmean(1, keepdim=True)).view(-1).tolist()


def warn_unscorable(rewards: torch.Tensor, own_columns: list[int], process_index: int, prompts, completions) -> None:
    """TRL's "All reward functions returned None" warning, over the user's reward functions only:
    grpolab's own (DAPO's ``overlong``, the columns ``own_columns``) always returns a number, so
    TRL's check never fires."""
    if not own_columns:
        return   # TRL's own check saw every column
    user = [i for i in range(rewards.shape[1]) if i not in own_columns]
    n = len(prompts)
    local = rewards[process_index * n:(process_index + 1) * n, user]
    if not user or not torch.isnan(local).all(dim=1).any():
        return
    row = int(torch.isnan(local).all(dim=1).nonzero(as_tuple=True)[0][0])
    logging.getLogger("trl.trainer.grpo_trainer").warning(
        f"All reward functions returned None for the following kwargs:\n"
        f"{{'prompt': {prompts[row]!r}, 'completion': {completions[row]!r}}}\n"
        "Please ensure that at least one reward function returns a valid reward.")
