"""Values that cross function boundaries in the trainer are named records: no tuple of three or
more values is built to be returned, and no rollout row is read by position."""

import ast
from pathlib import Path

TRAINER = Path(__file__).resolve().parents[2] / "platform" / "grpolab" / "trainer"


def _modules():
    for path in sorted(TRAINER.glob("*.py")):
        yield path.name, ast.parse(path.read_text())


def test_no_function_in_the_trainer_returns_a_bare_tuple_of_three_or_more():
    found = [f"{name}:{node.lineno}: {ast.unparse(node)}" for name, tree in _modules() for node in ast.walk(tree)
             if isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple) and len(node.value.elts) >= 3]
    assert not found, "return a NamedTuple/dataclass instead:\n" + "\n".join(found)


def _row_names(tree) -> set[str]:
    """Names bound by iterating over something whose source mentions rows."""
    names = set()
    for node in ast.walk(tree):
        loops = node.generators if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)) else (
            [node] if isinstance(node, ast.For) else [])
        for loop in loops:
            if "rows" in ast.unparse(loop.iter):
                names |= {n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)}
    return names


def test_no_rollout_row_is_read_by_position():
    found = []
    for name, tree in _modules():
        rows = _row_names(tree)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in rows
                    and isinstance(node.slice, (ast.Constant, ast.Slice))):
                found.append(f"{name}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "read RolloutRow fields by name:\n" + "\n".join(found)


def test_the_checks_see_positional_reads():
    """The two checks above catch the shapes they forbid."""
    tree = ast.parse("def f(rows):\n    x = [r[3] for r in rows]\n    return 1, 2, 3\n")
    assert any(isinstance(n, ast.Subscript) and n.value.id in _row_names(tree) for n in ast.walk(tree)
               if isinstance(n, ast.Subscript))
    assert any(isinstance(n, ast.Return) and len(n.value.elts) == 3 for n in ast.walk(tree) if isinstance(n, ast.Return))


def test_the_trainer_module_stays_small():
    """About 400 lines at most (the house's module size): what does not touch TRL lives in its rooms."""
    assert len((TRAINER / "grpo_trainer.py").read_text().splitlines()) <= 410
