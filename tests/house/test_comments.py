"""Comments and docstrings say why the code is as it is now: every ``grpolab.<name>`` and
``<module>.py`` they name exists, and none cites an issue number."""

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "platform" / "grpolab"
EXTERNAL_FILES = {"core_algos"}   # cited reference implementations: verl's verl/trainer/ppo/core_algos.py
FILE_STEMS = {p.stem for p in ROOT.rglob("*.py")} | EXTERNAL_FILES
ISSUE = re.compile(r"\bissues? #?\d+", re.IGNORECASE)


def _texts(path: Path):
    """(line, text) of every comment and docstring of a module."""
    src = path.read_text()
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield node.body[0].lineno, doc


def _string_literals() -> set[str]:
    """Every string constant in the package: ``grpolab.<x>`` there is a tag or logger name."""
    found = set()
    for path in PKG.rglob("*.py"):
        found |= {n.value for n in ast.walk(ast.parse(path.read_text()))
                  if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    return found


def _defines(source: str, name: str) -> bool:
    return re.search(rf"^(?:def |class |from .* import .*\b|\s*)?{re.escape(name)}\b", source, re.MULTILINE) is not None


def resolves(dotted: str, literals: set[str]) -> bool:
    """``grpolab.a.b``: a package/module path, then at most a name that module defines, or a
    tag/logger name the code spells out."""
    if any(dotted == s or s.startswith(dotted + ".") or s.startswith(dotted + ":") for s in literals):
        return True
    here = PKG
    parts = dotted.split(".")[1:]
    for i, part in enumerate(parts):
        if (here / part).is_dir():
            here = here / part
            continue
        if (here / f"{part}.py").is_file():
            return i + 1 == len(parts) or _defines((here / f"{part}.py").read_text(), parts[i + 1])
        init = here / "__init__.py"
        return init.is_file() and _defines(init.read_text(), part)
    return True


def _all_texts():
    for path in sorted(PKG.rglob("*.py")):
        for line, text in _texts(path):
            yield f"{path.relative_to(ROOT)}:{line}", text


def test_named_modules_exist():
    literals = _string_literals()
    missing = []
    for where, text in _all_texts():
        missing += [f"{where}: {m}.py" for m in re.findall(r"(?<![\w/.])([A-Za-z_]\w*)\.py\b", text)
                    if m not in FILE_STEMS]
        missing += [f"{where}: {m}" for m in re.findall(r"\bgrpolab(?:\.\w+)+", text) if not resolves(m, literals)]
    assert not missing, "comments name what does not exist:\n" + "\n".join(missing)


def test_no_issue_numbers_in_comments():
    found = [f"{where}: {m.group(0)}" for where, text in _all_texts() for m in ISSUE.finditer(text)]
    assert not found, "say why, not which issue:\n" + "\n".join(found)


@pytest.mark.parametrize("dotted, ok", [("grpolab.trainer.grpo_trainer", True), ("grpolab.studies.trials", True),
                                        ("grpolab.algorithms.policy_loss", True), ("grpolab.regime", False),
                                        ("grpolab.studies.no_such_room", False)])
def test_resolution_tells_real_from_gone(dotted, ok):
    assert resolves(dotted, set()) is ok
