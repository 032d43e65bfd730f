"""Every third-party package that platform/ imports is declared in pyproject.toml: a package
imported at module level in [project] dependencies, one imported only where it is needed (inside
a function, behind ``except ImportError``, or looked up with ``importlib.util.find_spec``) there or
in a named extra. Read from the source (AST), nothing imported; import names map to distributions
through ``importlib.metadata.packages_distributions()``."""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from conftest import REPO

PLATFORM = REPO / "platform"
FIRST_PARTY = {"grpolab"}
NOT_AN_EXTRA_OF_THE_PLATFORM = {"test"}   # the test extra installs pytest; the platform cannot rely on it
LOOKUPS = {"find_spec", "import_module"}  # importlib calls whose literal argument is an optional import


@dataclass(frozen=True)
class ThirdPartyImport:
    module: str     # top-level import name
    where: str      # path:line of one place that imports it
    eager: bool     # at module level: importing grpolab's module needs it


@dataclass(frozen=True)
class Declared:
    base: frozenset[str]              # canonical distribution names in [project] dependencies
    extras: dict[str, frozenset[str]]  # extra -> canonical distribution names


def _catches_import_error(node: ast.Try) -> bool:
    names = {n.id for h in node.handlers for n in ast.walk(h.type) if isinstance(n, ast.Name)} if node.handlers else set()
    return bool(names & {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})


def _imported_names(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return [node.module]
    if (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) in LOOKUPS
            and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
        return [node.args[0].value]
    return []


def _walk(node: ast.AST, path: str, eager: bool, found: list[ThirdPartyImport]) -> None:
    for name in _imported_names(node):
        top = name.split(".")[0]
        if top not in sys.stdlib_module_names and top not in FIRST_PARTY:
            found.append(ThirdPartyImport(top, f"{path}:{node.lineno}", eager and not isinstance(node, ast.Call)))
    lazy_scope = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) or (
        isinstance(node, ast.Try) and _catches_import_error(node)) or (
        isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test))
    for child in ast.iter_child_nodes(node):
        _walk(child, path, eager and not lazy_scope, found)


def third_party_imports(root: Path) -> list[ThirdPartyImport]:
    found: list[ThirdPartyImport] = []
    for path in sorted(root.rglob("*.py")):
        _walk(ast.parse(path.read_text(), str(path)), str(path.relative_to(root.parent)), True, found)
    return found


def declared(pyproject: str) -> Declared:
    project = tomllib.loads(pyproject)["project"]
    names = lambda requirements: frozenset(canonicalize_name(Requirement(r).name) for r in requirements)  # noqa: E731
    return Declared(names(project.get("dependencies", [])),
                    {extra: names(reqs) for extra, reqs in project.get("optional-dependencies", {}).items()
                     if extra not in NOT_AN_EXTRA_OF_THE_PLATFORM})


@functools.cache
def _installed_providers() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def _distributions(module: str) -> tuple[list[str], str]:
    """Distributions providing an import name, and the installed version ('' if not installed here:
    then the distribution is assumed to be named like the module)."""
    providers = _installed_providers().get(module)
    if not providers:
        return [module], ""
    return providers, importlib.metadata.version(providers[0])


def _advice(imp: ThirdPartyImport, dist: str, version: str, in_extras: list[str], extras: list[str]) -> str:
    pin = f'"{dist}>={version}"' if version else f'"{dist}" (not installed here; pin what you test with)'
    if imp.eager and in_extras:
        return (f"{imp.where} imports {imp.module!r} at module level, but {dist} is only in the extra(s) "
                f"{', '.join(in_extras)}: move {pin} to [project] dependencies in pyproject.toml, or import it "
                "inside the function that needs it")
    where = "[project] dependencies in pyproject.toml"
    if not imp.eager:
        where += (f" (or, if grpolab runs without it, to an extra in [project.optional-dependencies]: "
                  f"one of {', '.join(extras)} or a new one)")
    return f"{imp.where} imports {imp.module!r} (distribution {dist}): add {pin} to {where}"


def undeclared(root: Path, pyproject: str) -> list[str]:
    """One line per imported package that pyproject.toml does not declare where it must."""
    spec = declared(pyproject)
    problems, seen = [], set()
    for imp in third_party_imports(root):
        if (imp.module, imp.eager) in seen:
            continue
        seen.add((imp.module, imp.eager))
        providers, version = _distributions(imp.module)
        names = {canonicalize_name(p) for p in providers}
        in_extras = sorted(e for e, dists in spec.extras.items() if names & dists)
        if names & spec.base or (in_extras and not imp.eager):
            continue
        problems.append(_advice(imp, providers[0], version, in_extras, sorted(spec.extras)))
    return problems


def test_every_imported_package_is_declared():
    assert undeclared(PLATFORM / "grpolab", (REPO / "pyproject.toml").read_text()) == []


def test_the_packages_that_were_undeclared_are_found_and_named():
    imports = {i.module: i for i in third_party_imports(PLATFORM / "grpolab")}
    assert {"tqdm", "huggingface_hub", "numpy", "sqlalchemy", "submitit", "reasoning_gym", "vllm"} <= set(imports)
    assert not imports["submitit"].eager and not imports["vllm"].eager
    text = (REPO / "pyproject.toml").read_text()
    without = "\n".join(line for line in text.splitlines() if not line.strip().startswith(('"numpy', '"tqdm')))
    found = undeclared(PLATFORM / "grpolab", without)
    assert len(found) == 2, found
    numpy = next(f for f in found if "'numpy'" in f)
    assert f'add "numpy>={importlib.metadata.version("numpy")}" to [project] dependencies' in numpy


def test_module_level_needs_the_base_and_an_extra_serves_only_a_lazy_import(tmp_path):
    package = tmp_path / "grpolab"
    package.mkdir()
    (package / "eager.py").write_text("import submitit\n")
    (package / "lazy.py").write_text("import importlib.util\n\ndef f():\n    import vllm\n    import deepspeed\n"
                                     "    return importlib.util.find_spec('tensorboard')\n"
                                     "try:\n    import psutil\nexcept ImportError:\n    psutil = None\n")
    pyproject = ('[project]\nname = "x"\ndependencies = []\n[project.optional-dependencies]\n'
                 'gpu = ["vllm"]\ncluster = ["submitit==1.5.4"]\ntest = ["deepspeed"]\n')
    found = undeclared(package, pyproject)
    assert len(found) == 4, found
    assert found[0].startswith("grpolab/eager.py:1 imports 'submitit' at module level, but submitit is only in the "
                               "extra(s) cluster: move")
    assert found[1].startswith("grpolab/lazy.py:5 imports 'deepspeed' (distribution deepspeed): add \"deepspeed\" "
                               "(not installed here")
    assert "or a new one" in found[1] and "one of cluster, gpu" in found[1]
    assert found[2].startswith("grpolab/lazy.py:6 imports 'tensorboard'")
    assert found[3].startswith("grpolab/lazy.py:8 imports 'psutil' (distribution psutil): add \"psutil>=")
