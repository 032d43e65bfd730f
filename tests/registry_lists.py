"""The grep behind each registry's "no second home" test: literal collections naming several of an
axis's values anywhere in the package outside the registry's own two modules."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "platform" / "grpolab"


def hand_written_lists(names: set[str], homes: set[Path]) -> list[str]:
    """'path:line' of every tuple/list/set literal or dict's keys naming two or more of ``names``
    in a module not in ``homes`` (a pair naming one value of this axis and one of another is fine)."""
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
    return found
