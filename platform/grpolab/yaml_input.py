"""Reading the user's YAML files (experiments, studies): whole-file checks before anything runs.

A file that is missing, a folder, unreadable, not UTF-8 text, empty (or only comments), not valid YAML, not a mapping at the top, or
that repeats a key (plain YAML keeps the last value silently) is refused with one line naming
the file and, where YAML knows it, the line.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path

import yaml

from grpolab.errors import ConfigError


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key repeated in one mapping."""


def _mapping_without_duplicates(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise ConfigError(f"{key}: key given twice (line {key_node.start_mark.line + 1}); keep one")
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)


def check_input_file(path: str | Path, what: str) -> Path:
    """``path`` as an existing regular file this process can read; else one line saying which of
    missing, a folder or unreadable it is."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{what} {str(path)!r} is a folder; give a file")
    if not path.is_file():
        raise ConfigError(f"{what} {str(path)!r} does not exist")
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise ConfigError(f"{what} {str(path)!r} cannot be read ({exc.strerror})") from None
    return path


def read_text_file(path: str | Path, what: str) -> str:
    """The UTF-8 text of an input file, checked as ``check_input_file`` does."""
    path = check_input_file(path, what)
    try:
        return path.read_text()
    except UnicodeDecodeError:
        raise ConfigError(f"{what} {str(path)!r} is not a UTF-8 text file") from None
    except OSError as exc:
        raise ConfigError(f"{what} {str(path)!r} cannot be read ({exc.strerror})") from None


# what a top-level YAML value is, in the words of a YAML file rather than Python's type names
_YAML_KINDS = {"list": "a list", "int": "an integer", "float": "a number", "str": "a string", "bool": "a boolean"}


def read_yaml_mapping(path: str | Path, what: str, hint: str = "") -> dict:
    """The top-level mapping of a YAML file; ``what`` names it in messages ("experiment file").
    A fresh copy each call; the same text is parsed once per process (a study command reads its
    study file once per rung, seed and report)."""
    path = Path(path)
    return copy.deepcopy(_parsed_mapping(str(path), what, hint, read_text_file(path, what)))


@functools.lru_cache(maxsize=256)
def _parsed_mapping(path: str, what: str, hint: str, text: str) -> dict:
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except ConfigError as exc:
        raise ConfigError(f"{what} {path!r}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{what} {path!r} is not valid YAML{where}: {problem}") from None
    if data is None or data == {}:
        raise ConfigError(f"{what} {path!r} is empty{'; ' + hint if hint else ''}")
    if not isinstance(data, dict):
        raise ConfigError(f"{what} {path!r}: expected a mapping of keys at the top level, "
                          f"got {_YAML_KINDS.get(type(data).__name__, type(data).__name__)} {data!r:.60}")
    return data
