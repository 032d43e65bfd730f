"""The registries' shared test helpers: the lint for a hand-written collection naming two or more
values of one axis, and a toy entry added the registry's way."""

from __future__ import annotations

import ast
import contextlib
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "platform" / "grpolab"


def lists_naming(names: set[str], homes: set[Path], extra=None) -> list[str]:
    """``file:line`` of every tuple/list/set literal or dict's keys naming two or more of ``names``
    in the package outside ``homes``; ``extra(node)`` may flag other nodes (returns a reason or None)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path in homes:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            elts = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else (
                node.keys if isinstance(node, ast.Dict) else [])
            strings = {e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
            if len(strings & names) >= 2:
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
            reason = extra(node) if extra is not None else None
            if reason:
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {reason}")
    return found


def compares(attr: str, aliases: tuple[str, ...] = (), values=frozenset()):
    """A check for ``lists_naming``'s extra: ``x.<attr> == "value"`` (or in a literal collection), either
    side; and a local name of ``aliases`` (one that carries the axis's value: ``metric``) compared with
    one of ``values``."""
    def constants(node) -> set:
        elts = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
        return {e.value for e in elts if isinstance(e, ast.Constant)}

    def check(node) -> str | None:
        if not isinstance(node, ast.Compare):
            return None
        operands = [node.left, *node.comparators]
        literal = [o for o in operands if isinstance(o, (ast.Constant, ast.Tuple, ast.List, ast.Set))]
        if literal and any(isinstance(o, ast.Attribute) and o.attr == attr for o in operands):
            return f"compares .{attr}"
        if any(isinstance(o, ast.Name) and o.id in aliases for o in operands) and any(
                constants(o) & set(values) for o in literal):
            return f"compares a value of {attr}"
        return None
    return check


@contextlib.contextmanager
def toy_entry(entries: dict, functions: dict, register, entry, fn):
    """``entry`` in its registry and ``fn`` attached by the registry's own ``register``, as a new
    value would be added; both gone afterwards."""
    entries[entry.name] = entry
    try:
        register(entry.name)(fn)
        yield
    finally:
        functions.pop(entry.name, None)
        entries.pop(entry.name)
