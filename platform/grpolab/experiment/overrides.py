"""``key.path=value`` overrides: how the command line, study rungs and search points change an
experiment's mapping before it is validated. Values are read as YAML with the safe loader, and a
YAML tag is refused, so an override can only ever be plain data.

What grpolab writes and reads back itself (an override string, a mapping's copy) goes through
libyaml's C emitter and parser: a study's rungs x seeds repeat them hundreds of times per command.
A value a person typed is read by PyYAML's own parser, whose messages the errors quote (libyaml's
differ, and it accepts a tab PyYAML refuses); each distinct text is parsed once per process."""

from __future__ import annotations

import copy
import functools

import yaml

from grpolab.errors import ConfigError

# libyaml's classes; PyYAML built without libyaml has only its own, which write and read the same text
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_NO_FOLDING = 2**31 - 1   # libyaml's widest line: a value of any length stays on one


def override_string(key: str, value) -> str:
    """``key=value`` as the command line writes it, the value in YAML flow style on one line
    (no folding of long values, no document-end marker), so ``parse_override`` reads ``value`` back."""
    text = yaml.dump(value, Dumper=_DUMPER, default_flow_style=True, width=_NO_FOLDING)
    return f"{key}={text.strip().removesuffix(chr(10) + '...')}"


def as_overrides(values: dict) -> list[str]:
    """``{dotted key: value}`` -> override strings (``override_string``)."""
    return [override_string(k, v) for k, v in values.items()]


def parse_override(text: str) -> tuple[list[str], object]:
    if "=" not in text:
        raise ConfigError(f"override {text!r}: expected key.path=value, e.g. train.steps=50")
    key, value = text.split("=", 1)
    return key.strip().split("."), override_value(text, value)


PLAIN_VALUES = "a plain value: a number, text, true/false, null, [a, list] or {a: mapping}"


def override_value(text: str, value: str):
    """The YAML value of one ``key=value`` override, read with the safe loader only; a YAML tag
    (``!!python/object``, ``!!str``, ``!custom``) is refused before anything is constructed, so
    an override can only ever be plain data. A fresh copy each call: the caller may change it."""
    return copy.deepcopy(_parsed_value(text, value))


@functools.lru_cache(maxsize=4096)
def _parsed_value(text: str, value: str):
    try:
        if any(isinstance(token, yaml.TagToken) for token in yaml.scan(value, Loader=yaml.SafeLoader)):
            raise ConfigError(f"override {text!r}: YAML tags (!...) are not accepted; give {PLAIN_VALUES}")
        return yaml.safe_load(value)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"override {text!r}: not a valid YAML value ({problem}); give {PLAIN_VALUES}") from None


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    data = yaml.load(yaml.dump(data, Dumper=_DUMPER), Loader=_LOADER) or {}   # a plain-data copy
    for text in overrides:
        path, value = parse_override(text)
        node = data
        for part in path[:-1]:
            if isinstance(node.get(part), str) and part == "method":
                node[part] = {"base": node[part]}
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {text!r}: {part} is not a mapping")
        node[path[-1]] = value
    return data
