"""Episodes with a local model: batched turn by turn, one completion sequence per episode.

Each turn the model continues its episode's text (prompt + every earlier turn) until EOS or
``action_tokens`` tokens; the decoded text (EOS dropped) is the action. The environment's next
observation is appended as environment tokens (``env_mask`` 0) unless the episode ended. The
sequence ends with the model's last action, so every trained token is the model's own.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from grpolab.envs.base import Episode, checked_reset, checked_step, initial_state_key


class Play(NamedTuple):
    """How episodes are played: at most ``max_turns`` turns of at most ``action_tokens`` tokens
    each, sampled at ``temperature`` or greedy."""
    max_turns: int
    action_tokens: int
    temperature: float = 1.0
    greedy: bool = False


@torch.no_grad()
def run_episodes(model, tokenizer, make_env, prompts: list[str], seeds: list[int], play: Play) -> list[Episode]:
    """Run one episode per (prompt, seed) pair, all in lockstep, as ``play`` says; returns them in order."""
    max_turns = play.max_turns
    envs = [make_env() for _ in prompts]
    episodes = []
    for env, prompt, seed in zip(envs, prompts, seeds):
        observation = checked_reset(env, seed)
        episode = Episode(prompt=prompt, seed=seed)
        episode.state_keys.append(initial_state_key(env, observation))
        episodes.append(episode)
    prompt_ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    was_training = model.training
    model.eval()
    try:
        for _ in range(max_turns):
            active = [i for i, e in enumerate(episodes) if not e.done]
            if not active:
                break
            actions = _generate_turn(model, tokenizer, [prompt_ids[i] + episodes[i].completion_ids for i in active],
                                     play.action_tokens, play.temperature, play.greedy)
            for i, action_ids in zip(active, actions):
                _advance(episodes[i], envs[i], tokenizer, action_ids, max_turns)
    finally:
        model.train(was_training)
    return episodes


def _advance(episode: Episode, env, tokenizer, action_ids: list[int], max_turns: int) -> None:
    """Append the model's action, step the environment, and append its observation if the
    episode goes on."""
    turn = episode.turns
    episode.completion_ids += action_ids
    episode.env_mask += [1] * len(action_ids)
    episode.turn_index += [turn] * len(action_ids)
    action = tokenizer.decode(action_ids, skip_special_tokens=True)
    observation, reward, done, key = checked_step(env, action)
    episode.actions.append(action)
    episode.rewards.append(reward)
    episode.done = done
    episode.success = done and reward > 0
    if done or episode.turns >= max_turns:
        return
    episode.state_keys.append(key)
    obs_ids = tokenizer(observation, add_special_tokens=False)["input_ids"]
    episode.completion_ids += obs_ids
    episode.env_mask += [0] * len(obs_ids)
    episode.turn_index += [-1] * len(obs_ids)


def _generate_turn(model, tokenizer, contexts: list[list[int]], max_new: int, temperature: float,
                   greedy: bool) -> list[list[int]]:
    """One action per context: sampled tokens up to and including the first EOS."""
    width = max(len(c) for c in contexts)
    pad = tokenizer.pad_token_id
    ids = torch.tensor([[pad] * (width - len(c)) + c for c in contexts], device=model.device)
    attention = torch.tensor([[0] * (width - len(c)) + [1] * len(c) for c in contexts], device=model.device)
    out = model.generate(input_ids=ids, attention_mask=attention, do_sample=not greedy,
                         temperature=None if greedy else temperature, top_k=None if greedy else 0,
                         max_new_tokens=max_new, pad_token_id=pad, eos_token_id=tokenizer.eos_token_id)
    actions = []
    for row in out[:, width:].tolist():
        if tokenizer.eos_token_id in row:
            row = row[:row.index(tokenizer.eos_token_id) + 1]
        actions.append(row)
    return actions


def episode_metrics(episodes: list[Episode]) -> dict[str, float]:
    """Curves of one generation batch of episodes (every episode generated for it)."""
    n = max(len(episodes), 1)
    return {
        "episode/turns": sum(e.turns for e in episodes) / n,
        "episode/success_rate": sum(e.success for e in episodes) / n,
        "episode/truncated": float(sum(e.truncated for e in episodes)),
        "episode/return": sum(e.total_reward for e in episodes) / n,
        "episode/model_tokens": sum(e.model_tokens for e in episodes) / n,
    }
