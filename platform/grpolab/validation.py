"""Values from YAML files and command-line overrides checked against a declared type, one way for
every reader (experiment sections, method axes, Slurm parameters).

An int is never a bool (YAML's ``true`` is not 1), a float field takes an int (``eps: 1``), None
passes only where the type says ``| None``, and inf/NaN are refused unless the field's default is
inf ("no bound"), since they pass every range check after this one. A refusal is one line naming
the key, what is valid and what was given.
"""

from __future__ import annotations

import math

from grpolab.errors import ConfigError

MISMATCH = object()   # what ``as_kind`` returns for a value that is not of the kind
_KINDS = {"str": str, "bool": bool, "int": int, "float": float}


def refusal(key: str, expected: str, value, *, with_type: bool = False) -> ConfigError:
    """``KEY: expected WHAT, got VALUE`` (``got TYPE VALUE`` with ``with_type``)."""
    got = f"{type(value).__name__} {value!r}" if with_type else repr(value)
    return ConfigError(f"{key}: expected {expected}, got {got}")


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def as_kind(value, kind: type):
    """``value`` as ``kind`` (bool, int, float, str, list of names, dict), or MISMATCH."""
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind is list:
        return value if isinstance(value, list) and all(isinstance(v, str) for v in value) else MISMATCH
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        return MISMATCH
    return value


def _numbers(key: str, value, length: int | None) -> tuple[float, ...]:
    """A list of finite numbers as a tuple of floats: any number of them, or a [low, high] pair."""
    shape = "a list of numbers" if length is None else "a [low, high] pair"
    if not isinstance(value, (list, tuple)) or length not in (None, len(value)):
        raise refusal(key, shape, value)
    if not all(is_number(v) and math.isfinite(v) for v in value):
        raise refusal(key, "a list of finite numbers" if length is None else f"{shape} of finite numbers", value)
    return tuple(float(v) for v in value)


def typed(key: str, value, type_text: str, default=None):
    """``value`` as the dataclass field type ``type_text`` (its annotation as written: ``int``,
    ``str | None``, ``dict``, ``list`` of names, ``list[dict]``, ``tuple`` a [low, high] pair,
    ``tuple[float, ...]``), or a ConfigError naming ``key``."""
    if value is None and "None" in type_text:
        return None
    if type_text.startswith("dict"):
        if not isinstance(value, dict):
            raise refusal(key, "a mapping", value, with_type=True)
        return value
    if type_text == "list[dict]":   # checked entry by entry where it is read (tasks/benchmarks.py)
        if not isinstance(value, list):
            raise refusal(key, "a list of mappings", value, with_type=True)
        return value
    if type_text == "list":
        if as_kind(value, list) is MISMATCH:
            raise refusal(key, "a list of names", value)
        return value
    if type_text.startswith("tuple"):
        return _numbers(key, value, 2 if type_text == "tuple" else None)
    kind = _KINDS[type_text.split(" ")[0]]
    coerced = as_kind(value, kind)
    if coerced is MISMATCH:
        raise refusal(key, type_text, value, with_type=True)
    if kind is float and not math.isfinite(coerced) and not (coerced == math.inf and default == math.inf):
        raise refusal(key, "a finite number", value)
    return coerced
