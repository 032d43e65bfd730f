"""The ``rollout_func`` of TRL's multi-turn path for an ``EpisodeTask``.

TRL 1.16 calls ``rollout_func(prompts, trainer)`` for each generation batch and expects
``prompt_ids``, ``completion_ids`` and ``logprobs`` per row; ``env_mask`` (1 = model token, 0 =
environment token) becomes TRL's ``tool_mask``, which grpolab multiplies into the loss mask; every
other key (here ``episode_return``) reaches the reward functions. After TRL has scored the batch,
``GrpoLabTrainer`` asks ``advantage_inputs`` for the episodes as ``compute_advantages`` reads them
(GiGPO's episode population and step-level term: algorithms/gigpo.py) and the episode curves.
"""

from __future__ import annotations

import torch

from grpolab.algorithms import gigpo
from grpolab.envs.rollout import Play, run_episodes


class EpisodeRollout:
    def __init__(self, task, examples):
        self.task = task
        self.by_prompt = {e.prompt: e for e in examples}
        self.episodes: list = []
        self.group_size = 0

    def __call__(self, prompts: list, trainer) -> dict:
        if trainer.accelerator.num_processes > 1:
            raise NotImplementedError("multi-turn environment tasks run in one process for now (episodes and anchor "
                                      "groups are not gathered across processes)")
        missing = [p for p in prompts if p not in self.by_prompt]
        if missing:
            raise ValueError(f"task {self.task.name}: prompt {missing[0]!r} is not an initial state of the training set")
        tokenizer = trainer.processing_class
        model = trainer.accelerator.unwrap_model(trainer.model)
        seeds = [self.by_prompt[p].meta["env_seed"] for p in prompts]
        play = Play(self.task.max_turns, self.task.params["action_tokens"], trainer.args.temperature)
        self.episodes = run_episodes(model, tokenizer, self.task.make_env, list(prompts), seeds, play)
        self.group_size = trainer.num_generations
        self.task.record(self.episodes, tokenizer)
        return {
            "prompt_ids": [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts],
            "completion_ids": [e.completion_ids for e in self.episodes],
            "logprobs": None,   # sampled by the trained model itself: TRL needs no sampler correction
            "env_mask": [e.env_mask for e in self.episodes],
            "episode_return": [e.total_reward for e in self.episodes],
        }

    def advantage_inputs(self, spec, width: int, record_curve) -> dict:
        """``AdvantageInputs``'s ``episodes`` for the batch just scored (each episode's step rewards, its
        steps' anchor groups by ``spec.anchor_similarity`` and, for the step term only (``spec.step_omega``
        > 0), the turn of each of its ``width`` completion tokens), and the episode curves (the task's and
        the anchor groups') through ``record_curve(key, value)``."""
        episodes = self.episodes
        anchor_ids = gigpo.anchor_groups([e.state_keys for e in episodes], self.group_size, spec.anchor_similarity)
        for key, value in {**self.task.metrics(episodes), **gigpo.anchor_metrics(anchor_ids)}.items():
            record_curve(key, value)
        turn_index = _turn_index(episodes, width) if spec.step_omega > 0 else None   # only the step term reads it
        return {"episodes": gigpo.Episodes([list(e.rewards) for e in episodes], anchor_ids, turn_index)}


def _turn_index(episodes: list, width: int) -> torch.Tensor:
    """(N, width): the turn of each completion token, -1 on environment and padding tokens."""
    turn_index = torch.full((len(episodes), width), -1, dtype=torch.long, device="cpu")   # the step term is built on the CPU
    for i, e in enumerate(episodes):
        turn_index[i, :len(e.turn_index)] = torch.tensor(e.turn_index, dtype=torch.long, device="cpu")
    return turn_index
