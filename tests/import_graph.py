"""grpolab's import graph read from the source (AST, nothing imported), for the layer contract.

Every ``import``/``from ... import`` counts, at module level or inside a function: an import
inside a function runs upward just the same when it is called.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "platform" / "grpolab"

# Floors, bottom to top. A module may import its own floor's modules and any floor below.
# The ground floor is the package's loose modules; each floor above is one sub-package (or
# the front-door modules). Rooms on one floor never import each other. The Python API sits above
# the commands, whose execute functions it calls; the benchmarks sit below them (`grpolab bench`).
FLOORS = [
    {"grpolab", "grpolab.errors", "grpolab.state", "grpolab.signals", "grpolab.yaml_input", "grpolab.validation",
     "grpolab.hub", "grpolab.planning", "grpolab.startup"},
    {"grpolab.method"},
    {"grpolab.algorithms"},
    {"grpolab.world"},
    {"grpolab.envs"},
    {"grpolab.tasks"},
    {"grpolab.tracking"},
    {"grpolab.trainer"},
    {"grpolab.experiment"},
    {"grpolab.studies"},
    {"grpolab.analysis"},
    {"grpolab.report"},
    {"grpolab.bench"},
    {"grpolab.commands"},
    {"grpolab.api"},
    {"grpolab.cli"},
]

# The front door: what a user calls first. Its imports of grpolab's own code may all wait inside
# functions, so that building the parser or importing the API loads nothing a command does not use.
FRONT_DOOR = {"grpolab.bench", "grpolab.commands", "grpolab.api", "grpolab.cli"}

# Third-party packages whose import costs about 0.4 s or more on the 2-core test machine
# (measured: torch 3.6 s, peft 9 s, accelerate 4.2 s, mlflow 3.1 s, transformers 1.9 s, datasets
# 1.8 s, scipy.stats 1.6 s, pandas 1.0 s, optuna 0.45 s, trl 0.4 s, numpy 0.4 s). An import of
# grpolab's own modules inside a function is allowed only where it defers one of these.
HEAVY = {"torch", "transformers", "trl", "peft", "mlflow", "optuna", "datasets", "accelerate", "vllm", "scipy",
         "pandas", "numpy", "plotly", "math_verify", "reasoning_gym", "gguf", "sqlalchemy", "tokenizers",
         "safetensors", "huggingface_hub", "submitit", "psycopg2"}


@dataclass
class Import:
    source: str          # importing module
    target: str          # grpolab module imported
    line: int
    lazy: bool           # inside a function


@dataclass
class Module:
    name: str
    path: Path
    imports: list[Import] = field(default_factory=list)
    third_party: set[str] = field(default_factory=set)   # top-level packages imported at module level


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(mod: Module, node: ast.ImportFrom, known: set[str]) -> list[str]:
    package = mod.name if mod.path.name == "__init__.py" else mod.name.rpartition(".")[0]
    if node.level:
        base = package.split(".")[: len(package.split(".")) - node.level + 1]
        origin = ".".join(base + ([node.module] if node.module else []))
    else:
        origin = node.module or ""
    # ``from grpolab.trainer import sampling`` imports the module grpolab.trainer.sampling; ``from
    # grpolab import GrpoLabTrainer`` the module grpolab/__init__.py loads it from (its _EXPORTS)
    exports = _exports() if origin == "grpolab" else {}
    return [f"{origin}.{a.name}" if f"{origin}.{a.name}" in known else exports.get(a.name, origin) for a in node.names]


def _scan(mod: Module, known: set[str]) -> None:
    tree = ast.parse(mod.path.read_text())
    top_level = {id(n) for n in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _dynamic_target(node):   # import_module("grpolab.x"), __import__
            mod.imports.append(Import(mod.name, _known_prefix(_dynamic_target(node), known), node.lineno, True))
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            targets = _resolve(mod, node, known) if (node.level or (node.module or "").startswith("grpolab")) \
                else [node.module or ""]
        else:
            continue
        for target in targets:
            root = target.split(".")[0]
            if root == "grpolab":
                while target not in known and "." in target:
                    target = target.rpartition(".")[0]
                if target != mod.name:
                    mod.imports.append(Import(mod.name, target, node.lineno, id(node) not in top_level))
            elif id(node) in top_level:
                mod.third_party.add(root)


def _dynamic_target(node: ast.Call) -> str | None:
    """The module a call imports by name, when it names one of grpolab's as a string constant."""
    name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
    if name in ("import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant):
        value = node.args[0].value
        if isinstance(value, str) and (value == "grpolab" or value.startswith("grpolab.")):
            return value
    return None


def _known_prefix(target: str, known: set[str]) -> str:
    while target not in known and "." in target:
        target = target.rpartition(".")[0]
    return target


def _exports() -> dict[str, str]:
    """grpolab/__init__.py's lazy public names -> the module that defines each."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "_EXPORTS" for t in node.targets):
            return {k: f"grpolab.{v}" for k, v in ast.literal_eval(node.value).items()}
    return {}


def load_graph(package: Path = PACKAGE) -> dict[str, Module]:
    paths = sorted(package.rglob("*.py"))
    modules = {module_name(p, package): Module(module_name(p, package), p) for p in paths}
    for mod in modules.values():
        _scan(mod, set(modules))
    return modules


def floor_of(name: str) -> tuple[int, str]:
    """(floor index, room) of a module: its sub-package, or itself on the ground floor."""
    for index, rooms in enumerate(FLOORS):
        for room in rooms:
            if name == room or (room != "grpolab" and name.startswith(room + ".")):
                return index, room
    raise KeyError(f"{name} sits on no floor: add it to a sub-package or the ground floor in FLOORS")


def upward_imports(modules: dict[str, Module]) -> list[str]:
    found = []
    for mod in modules.values():
        here, room = floor_of(mod.name)
        for imp in mod.imports:
            there, other = floor_of(imp.target)
            if there > here or (there == here and room != other and here != 0):
                found.append(f"{mod.path.name}:{imp.line}: {mod.name} (floor {here}) "
                             f"imports {imp.target} (floor {there})")
    return found


def cycles(modules: dict[str, Module]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    edges = {m: sorted({i.target for i in mod.imports}) for m, mod in modules.items()}

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in edges:
        if v not in index:
            visit(v)
    return out


def heavy_closure(modules: dict[str, Module], name: str, seen: set[str] | None = None) -> set[str]:
    """Heavy third-party packages loaded by importing ``name`` (module-level imports, transitively)."""
    seen = set() if seen is None else seen
    if name in seen:
        return set()
    seen.add(name)
    mod = modules[name]
    heavy = mod.third_party & HEAVY
    parts = name.split(".")
    parents = [".".join(parts[:i]) for i in range(1, len(parts))]   # importing a.b.c runs a/__init__, a.b/__init__
    for target in [*parents, *(i.target for i in mod.imports if not i.lazy)]:
        heavy |= heavy_closure(modules, target, seen)
    return heavy


def unneeded_lazy_imports(modules: dict[str, Module]) -> list[str]:
    """Imports of grpolab modules inside functions that defer nothing heavy (front door exempt)."""
    found = []
    for mod in modules.values():
        if floor_of(mod.name)[1] in FRONT_DOOR:
            continue
        mine = heavy_closure(modules, mod.name)
        for imp in mod.imports:
            if imp.lazy and not (heavy_closure(modules, imp.target) - mine):
                found.append(f"{mod.path.name}:{imp.line}: {mod.name} imports "
                             f"{imp.target} inside a function, deferring nothing heavy")
    return found
