"""Search spaces: dotted experiment keys -> Optuna distributions, with conditional parameters.

    space:
      train.learning_rate: {type: float, low: 1.0e-4, high: 2.0e-3, log: true}
      method.surrogate: {type: categorical, choices: [clip, dual_clip]}
      method.dual_clip_c: {type: float, low: 2, high: 10, when: {method.surrogate: dual_clip}}

A parameter with ``when`` is sampled only if every parameter it names (sampled first) took the
given value, so the space is conditional, as Optuna's define-by-run API expects.
"""

from __future__ import annotations

from grpolab.errors import ConfigError

_TYPES = {"float": {"low", "high", "log", "step"}, "int": {"low", "high", "log", "step"}, "categorical": {"choices"}}


def check_space(space: dict) -> dict:
    if not isinstance(space, dict) or not space:
        raise ConfigError("space: expected a non-empty mapping of dotted keys to {type, ...}")
    seen = []
    for key, dist in space.items():
        if not isinstance(dist, dict) or dist.get("type") not in _TYPES:
            raise ConfigError(f"space.{key}: expected {{type: float|int|categorical, ...}}, got {dist!r}")
        allowed = _TYPES[dist["type"]] | {"type", "when"}
        unknown = set(dist) - allowed
        if unknown:
            raise ConfigError(f"space.{key}.{sorted(unknown)[0]}: unknown; valid: {', '.join(sorted(allowed))}")
        if dist["type"] == "categorical":
            if not isinstance(dist.get("choices"), list) or not dist["choices"]:
                raise ConfigError(f"space.{key}.choices: expected a non-empty list")
            if len(_distinct(dist["choices"])) < 2:   # one value is a setting, not a search
                raise ConfigError(f"space.{key}.choices: {dist['choices']!r} holds fewer than 2 distinct values; "
                                  f"a searched parameter needs at least 2 (set a single value in base instead)")
        elif not (isinstance(dist.get("low"), (int, float)) and isinstance(dist.get("high"), (int, float))
                  and dist["low"] < dist["high"]):
            raise ConfigError(f"space.{key}: needs numbers low < high, got low={dist.get('low')!r} high={dist.get('high')!r}")
        for parent in (dist.get("when") or {}):
            if parent not in space or parent == key:
                raise ConfigError(f"space.{key}.when: {parent!r} is not another parameter of the space")
        seen.append(key)
    return {key: space[key] for key in _parents_first(space)}


def _distinct(choices: list) -> list:
    """Choices without repeats, where 1, 1.0 and True count as different values (YAML gave them
    different types, and the experiment keys check types)."""
    out = []
    for choice in choices:
        if not any(type(choice) is type(seen) and choice == seen for seen in out):
            out.append(choice)
    return out


def _parents_first(space: dict) -> list[str]:
    """Keys ordered so every parameter comes after those its ``when`` names (YAML order kept otherwise)."""
    ordered, visiting = [], set()

    def visit(key):
        if key in ordered:
            return
        if key in visiting:
            raise ConfigError(f"space.{key}.when: conditions form a cycle")
        visiting.add(key)
        for parent in (space[key].get("when") or {}):
            visit(parent)
        visiting.discard(key)
        ordered.append(key)
    for key in space:
        visit(key)
    return ordered


def suggest(trial, space: dict) -> dict:
    """Sample one point: {dotted key: value} for the active parameters only."""
    values = {}
    for key, dist in space.items():
        if any(values.get(parent) != want for parent, want in (dist.get("when") or {}).items()):
            continue
        if dist["type"] == "categorical":
            values[key] = trial.suggest_categorical(key, dist["choices"])
        elif dist["type"] == "float":
            values[key] = trial.suggest_float(key, dist["low"], dist["high"], log=dist.get("log", False), step=dist.get("step"))
        else:
            values[key] = trial.suggest_int(key, dist["low"], dist["high"], log=dist.get("log", False), step=dist.get("step", 1))
    return values
