"""Named, weighted reward components of a task (``task.rewards``), one TRL reward function each.

Detail: docs/runs.md, "grpolab.tasks.rewards".
"""

from __future__ import annotations

import importlib
import inspect
import math
import numbers
from dataclasses import dataclass, field

from grpolab.errors import ConfigError
from grpolab.tasks.deadline import RewardTimeout, deadline  # noqa: F401 - RewardTimeout: what call_user raises

BUILTINS = ("correctness", "format", "length")
ARGUMENTS = ("prompt", "completion", "answer", "extracted", "meta", "completion_length")
_ENTRY_KEYS = ("name", "weight", "label", "on_error", "timeout_s", "params")


class RewardFailedError(RuntimeError):
    """A reward failed on every completion of a rollout: training on it would be meaningless."""


@dataclass
class Reward:
    name: str                        # builtin name or module:function
    label: str                       # metric and reward-function name
    weight: float = 1.0
    on_error: float = 0.0
    timeout_s: float = 5.0
    params: dict = field(default_factory=dict)
    function: object = None          # the user callable (None for builtins)
    accepted: tuple | None = None    # argument names the user callable takes (None: all, it has **kwargs)
    failures: int = 0                # completions whose reward failed, over the whole run
    calls: int = 0


def _load_user_function(spec: str, key: str):
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"{key}: {spec!r} is neither a built-in reward ({', '.join(BUILTINS)}) nor module:function")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is a configuration error here
        raise ConfigError(f"{key}: cannot import module {module_name!r} ({type(exc).__name__}: {exc})") from None
    function = getattr(module, attr, None)
    if not callable(function):
        raise ConfigError(f"{key}: module {module_name!r} has no callable {attr!r}")
    return function


def _accepted_arguments(function, params: dict, key: str) -> tuple | None:
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values()):
        return None
    names = tuple(signature.parameters)
    unknown = [n for n in names if n not in ARGUMENTS and n not in params
               and signature.parameters[n].default is inspect.Parameter.empty]
    if unknown:
        raise ConfigError(f"{key}: the reward function takes {unknown[0]!r}, which is neither a documented argument "
                          f"({', '.join(ARGUMENTS)}) nor one of its params")
    return names


def parse_reward(entry, index: int) -> Reward:
    key = f"task.rewards[{index}]"
    if isinstance(entry, str):
        entry = {"name": entry}
    if not isinstance(entry, dict) or "name" not in entry:
        raise ConfigError(f"{key}: expected a reward name or a mapping with a name, got {entry!r}")
    unknown = set(entry) - set(_ENTRY_KEYS)
    if unknown:
        raise ConfigError(f"{key}.{sorted(unknown)[0]}: unknown key; valid: {', '.join(_ENTRY_KEYS)}")
    name, params = entry["name"], entry.get("params") or {}
    if not isinstance(params, dict):
        raise ConfigError(f"{key}.params: expected a mapping, got {params!r}")
    for field_name in ("weight", "on_error", "timeout_s"):
        value = entry.get(field_name, 0.0)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ConfigError(f"{key}.{field_name}: expected a finite number, got {value!r}")
    reward = Reward(name=str(name), label=str(entry.get("label") or name.rpartition(":")[2]),
                    weight=float(entry.get("weight", 1.0)), on_error=float(entry.get("on_error", 0.0)),
                    timeout_s=float(entry.get("timeout_s", 5.0)), params=dict(params))
    if name in BUILTINS:
        allowed = {"length": {"buffer", "penalty"}}.get(name, set())
        if set(params) - allowed:
            raise ConfigError(f"{key}.params: reward {name!r} takes {sorted(allowed) or 'no params'}, got {sorted(params)}")
    else:
        reward.function = _load_user_function(str(name), key)
        reward.accepted = _accepted_arguments(reward.function, params, key)
    return reward


def parse_rewards(entries) -> list[Reward]:
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"task.rewards: expected a non-empty list of rewards, got {entries!r}")
    rewards = [parse_reward(e, i) for i, e in enumerate(entries)]
    labels = [r.label for r in rewards]
    if len(set(labels)) != len(labels):
        raise ConfigError(f"task.rewards: labels must be distinct, got {labels}; set label: on duplicates")
    return rewards


def call_user(reward: Reward, arguments: dict) -> float:
    """One user reward value; raises on any failure (the caller scores ``on_error``)."""
    merged = {**arguments, **reward.params}
    if reward.accepted is not None:
        merged = {k: v for k, v in merged.items() if k in reward.accepted}
    with deadline(reward.timeout_s, f"reward {reward.label!r}"):
        value = reward.function(**merged)
    if not isinstance(value, numbers.Real) or not math.isfinite(value):   # bools count as 0 / 1
        raise TypeError(f"returned {value!r}, expected a finite number")
    return float(value)
