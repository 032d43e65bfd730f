"""The trainer is one TRL subclass calling parts over named records: ``GrpoLabTrainer`` inherits
from TRL's GRPOTrainer alone, no module of the trainer package but grpo_trainer.py reads another
object's private attribute (``x._name``: TRL's or a sibling part's state), and no function takes
more than 7 parameters (a record carries more), in the trainer or anywhere in the package outside
the documented math API (docs/api.md)."""

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "platform" / "grpolab"
TRAINER = PACKAGE / "trainer"
MAX_PARAMS = 7


def foreign_private_reads(source: str) -> list[str]:
    """'line: expr' for each private attribute (``x._name``, ``getattr(x, "_name")``, dunders aside)
    read or written on anything but ``self`` / ``cls``, ``super()`` included."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute):
            name, owner = node.attr, node.value
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "setattr", "hasattr", "delattr") and len(node.args) >= 2
              and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
            name, owner = node.args[1].value, node.args[0]
        else:
            continue
        if name.startswith("_") and not name.startswith("__") and not (
                isinstance(owner, ast.Name) and owner.id in ("self", "cls")):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def too_many_params(source: str) -> list[str]:
    """'line: name (n)' for each function taking more than MAX_PARAMS parameters, self/cls aside
    (``*args`` and ``**kwargs`` count one each)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = node.args
            names = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]
            names += [p.arg for p in (a.vararg, a.kwarg) if p is not None]
            if names[:1] in (["self"], ["cls"]):
                names = names[1:]
            if len(names) > MAX_PARAMS:
                found.append(f"{node.lineno}: {getattr(node, 'name', 'lambda')} ({len(names)})")
    return found


def test_the_trainer_inherits_from_trls_grpo_trainer_alone():
    from trl import GRPOTrainer

    from grpolab import GrpoLabTrainer
    assert GrpoLabTrainer.__bases__ == (GRPOTrainer,)


def test_no_trainer_part_reads_another_objects_private_attributes():
    found = [f"{path.name}:{hit}" for path in sorted(TRAINER.glob("*.py")) if path.name != "grpo_trainer.py"
             for hit in foreign_private_reads(path.read_text())]
    assert not found, ("pass what a part needs as an argument or a record, or make it public:\n" + "\n".join(found))


def test_no_trainer_function_takes_more_than_seven_parameters():
    found = [f"{path.name}:{hit}" for path in sorted(TRAINER.glob("*.py")) for hit in too_many_params(path.read_text())]
    assert not found, "pass a NamedTuple/dataclass record instead:\n" + "\n".join(found)


def math_api() -> set[str]:
    """'module.function' (module relative to grpolab) of each function docs/api.md lists under "The math API"."""
    import re
    section = (REPO / "docs" / "api.md").read_text().split("## The math API", 1)[1].split("\n## ", 1)[0]
    return {f"{module}.{name}" for module, name in re.findall(r"`grpolab\.([\w.]+)\.(\w+)\(", section)}


def test_no_function_in_the_package_takes_more_than_seven_parameters_outside_the_math_api():
    """The documented math API (docs/api.md) keeps a formula's inputs apart; everything else passes a record."""
    allowed, found = math_api(), []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(PACKAGE).with_suffix("").parts).removesuffix(".__init__")
        for hit in too_many_params(path.read_text()):
            name = hit.split(": ", 1)[1].split(" (", 1)[0]
            if f"{module}.{name}" not in allowed:
                found.append(f"{module}:{hit}")
    assert allowed >= {"algorithms.compute_advantages", "algorithms.policy_loss"}, allowed
    assert not found, "pass a NamedTuple/dataclass record instead:\n" + "\n".join(found)


def test_the_checks_see_what_they_forbid():
    planted = ("class Part:\n    def f(self, trainer, a, b, c, d, e, g, h):\n        x = trainer._scored\n"
               "        y = getattr(trainer, '_metrics')\n        return self._own, super()._generate(x), y\n")
    assert foreign_private_reads(planted) == ["3: trainer._scored", "4: getattr(trainer, '_metrics')",
                                              "5: super()._generate"]
    assert too_many_params(planted) == ["2: f (8)"]
