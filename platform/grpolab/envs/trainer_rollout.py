"""The ``rollout_func`` of TRL's multi-turn path for an ``EpisodeTask``.

TRL 1.16 calls ``rollout_func(prompts, trainer)`` for each generation batch and expects
``prompt_ids``, ``completion_ids`` and ``logprobs`` per row; ``env_mask`` (1 = model token, 0 =
environment token) becomes TRL's ``tool_mask``, which grpolab multiplies into the loss mask; every
other key (here ``episode_return``) reaches the reward functions. After TRL has scored the batch,
``GrpoLabTrainer`` calls ``finish`` for the episode curves and, with ``method.step_omega`` > 0,
GiGPO's per-token advantages (algorithms/gigpo.py).
"""

from __future__ import annotations

import torch

from grpolab.algorithms import gigpo
from grpolab.method.advantages import ADVANTAGES
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

    def finish(self, spec, episode_adv: torch.Tensor, width: int) -> tuple[torch.Tensor, dict]:
        """(advantages, episode curves) for the batch just scored. ``episode_adv`` (N,) is the
        method's episode-level advantage of the episode returns; with ``spec.step_omega`` > 0 the
        result is (N, width) per token, A^E + omega * A^S by turn (Eq. 8), else ``episode_adv``. A per-token
        estimator's (N, width) advantages (the tool-turn optimal token baseline) pass through as they are:
        its entry has no step-level term, so neither GiGPO's term nor step-row normalisation applies."""
        episodes = self.episodes
        if episode_adv.dim() not in (1, 2) or episode_adv.shape[0] != len(episodes):
            raise ValueError(f"{episode_adv.shape[0]} advantages for {len(episodes)} episodes")
        # the population of A^E's mean and std (check_episode_config guards the reward a per-turn one recomputes)
        episode_adv = gigpo.EPISODE_NORM_FUNCTIONS[spec.episode_norm](episode_adv, gigpo.EpisodeBatch(
            [e.total_reward for e in episodes], [e.turns for e in episodes], self.group_size,
            std_norm=ADVANTAGES[spec.advantage].step_norm == "std", eps=spec.adv_eps, unbiased=spec.std_unbiased))
        group_ids = gigpo.anchor_groups([e.state_keys for e in episodes], self.group_size, spec.anchor_similarity)
        stats = {**self.task.metrics(episodes), **gigpo.anchor_metrics(group_ids)}
        if spec.step_omega == 0 or episode_adv.dim() == 2:   # a per-token estimator has no step term (spec.py)
            return episode_adv, stats
        returns = [gigpo.discounted_returns(e.rewards, spec.step_gamma) for e in episodes]
        step_adv = gigpo.step_advantages(returns, group_ids, std_norm=ADVANTAGES[spec.advantage].step_norm == "std",
                                         eps=spec.adv_eps, unbiased=spec.std_unbiased)
        turn_index = torch.full((len(episodes), width), -1, dtype=torch.long, device="cpu")   # the step term is built on the CPU
        for i, e in enumerate(episodes):
            turn_index[i, :len(e.turn_index)] = torch.tensor(e.turn_index, dtype=torch.long, device="cpu")
        per_token = gigpo.token_advantages(episode_adv.cpu(), step_adv, turn_index, spec.step_omega)
        return per_token.to(episode_adv.device), stats
