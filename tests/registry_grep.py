"""The registries' shared lint: where a hand-written collection names two or more values of one axis."""

from __future__ import annotations

import ast
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


def compares(attr: str):
    """A check for ``lists_naming``'s extra: ``x.<attr> == "value"`` (or in a literal collection)."""
    def check(node) -> str | None:
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Attribute) and node.left.attr == attr:
            if any(isinstance(c, (ast.Constant, ast.Tuple, ast.List, ast.Set)) for c in node.comparators):
                return f"compares .{attr}"
        return None
    return check
