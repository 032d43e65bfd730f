"""The environment interface of multi-turn tasks, and the checks every step goes through.

An environment is any object with

    reset(seed: int) -> observation: str
    step(action: str) -> (observation: str, reward: float, done: bool, state_key: hashable)

Detail: docs/runs.md, "grpolab.envs.base".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Hashable, Protocol


class EnvContractError(ValueError):
    """An environment broke its contract (malformed step, unhashable state): one line naming it."""


class Environment(Protocol):
    def reset(self, seed: int) -> str: ...

    def step(self, action: str) -> tuple[str, float, bool, Hashable]: ...


@dataclass
class Episode:
    """One episode as one completion: the model's turns and the environment's observations,
    concatenated. ``completion_ids`` holds every token after the prompt; ``env_mask`` is 1 on the
    model's tokens and 0 on the environment's; ``turn_index`` gives the turn of each model token
    (-1 on environment tokens)."""

    prompt: str
    seed: int
    completion_ids: list[int] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    turn_index: list[int] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    state_keys: list = field(default_factory=list)     # the state each action was taken in
    done: bool = False
    success: bool = False

    @property
    def turns(self) -> int:
        return len(self.actions)

    @property
    def truncated(self) -> bool:
        return not self.done

    @property
    def total_reward(self) -> float:
        return float(sum(self.rewards))

    @property
    def model_tokens(self) -> int:
        return int(sum(self.env_mask))


def initial_state_key(env, observation: str):
    key = env.state_key() if callable(getattr(env, "state_key", None)) else ("reset", observation)
    return checked_key(env, key, "reset")


def checked_key(env, key, where: str):
    try:
        hash(key)
    except TypeError:
        raise EnvContractError(f"environment {type(env).__name__}: state_key after {where} is not hashable "
                                f"({type(key).__name__} {key!r}); return a str, number or tuple") from None
    return key


def checked_reset(env, seed: int) -> str:
    observation = env.reset(seed)
    if not isinstance(observation, str):
        raise EnvContractError(f"environment {type(env).__name__}: reset() must return the observation as str, "
                                f"got {type(observation).__name__} {observation!r}")
    return observation


def checked_step(env, action: str) -> tuple[str, float, bool, Hashable]:
    """env.step(action), validated: a malformed return raises one line naming what is wrong."""
    result = env.step(action)
    name = type(env).__name__
    if not isinstance(result, (tuple, list)) or len(result) != 4:
        raise EnvContractError(f"environment {name}: step() must return (observation: str, reward: float, "
                                f"done: bool, state_key: hashable), got {result!r}")
    observation, reward, done, key = result
    if not isinstance(observation, str):
        raise EnvContractError(f"environment {name}: step() observation must be str, got {type(observation).__name__}")
    if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
        raise EnvContractError(f"environment {name}: step() reward must be a finite number, got {reward!r}")
    if not isinstance(done, bool):
        raise EnvContractError(f"environment {name}: step() done must be a bool, got {done!r}")
    return observation, float(reward), done, checked_key(env, key, f"step({action!r})")
