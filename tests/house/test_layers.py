"""The house's floors as a contract: imports run one way (tests/import_graph.py FLOORS), no
module imports itself back through others, a lazy import of grpolab's own code defers a
measured-heavy library, and validating a file loads none of them."""

import shutil
import subprocess
import sys

import pytest

from conftest import REPO
from import_graph import FLOORS, cycles, floor_of, load_graph, unneeded_lazy_imports, upward_imports


@pytest.fixture(scope="module")
def graph():
    return load_graph()


def test_every_module_sits_on_a_floor(graph):
    assert len(graph) > 60
    for name in graph:
        floor_of(name)   # raises naming the module that sits nowhere


def test_no_import_runs_upward(graph):
    assert upward_imports(graph) == []


def test_no_import_cycle(graph):
    assert cycles(graph) == []


def test_lazy_internal_imports_defer_something_heavy(graph):
    assert unneeded_lazy_imports(graph) == []


def test_the_contract_catches_an_upward_import_inside_a_function(tmp_path):
    """The same checks on a copy of the package with one upward import added inside a function."""
    from import_graph import PACKAGE
    copy = tmp_path / "grpolab"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / "method" / "spec.py"
    target.write_text(target.read_text() + "\n\ndef _peek():\n    from grpolab.report.tables import render\n"
                      "    return render\n")
    found = upward_imports(load_graph(copy))
    assert len(found) == 1 and "grpolab.method.spec (floor 1) imports grpolab.report.tables (floor 11)" in found[0]
    dynamic = copy / "method" / "registry.py"
    dynamic.write_text(dynamic.read_text() + "\n\ndef _late():\n    import importlib\n"
                       "    return importlib.import_module('grpolab.report.page')\n")
    public = copy / "tracking" / "naming.py"
    public.write_text(public.read_text() + "\n\ndef _trainer():\n    from grpolab import GrpoLabTrainer\n"
                      "    return GrpoLabTrainer\n")
    found = upward_imports(load_graph(copy))
    assert any("grpolab.method.registry (floor 1) imports grpolab.report.page (floor 11)" in f for f in found), found
    assert any("grpolab.tracking.naming (floor 6) imports grpolab.trainer.grpo_trainer (floor 7)" in f for f in found)
    cyclic = copy / "errors.py"
    cyclic.write_text(cyclic.read_text() + "\nfrom grpolab.state import state_dir  # noqa\n")
    (copy / "state.py").write_text((copy / "state.py").read_text() + "\nfrom grpolab.errors import ConfigError  # noqa\n")
    assert ["grpolab.errors", "grpolab.state"] in cycles(load_graph(copy))


def test_floors_match_the_package_layout(graph):
    rooms = {r for floor in FLOORS for r in floor}
    packages = {name for name, mod in graph.items() if mod.path.name == "__init__.py"}
    top = {name for name in packages if name.count(".") == 1}   # a package inside one (studies.kinds) is in its room
    assert top <= rooms, "a sub-package is missing from FLOORS"
    assert all(floor_of(name)[1] in top for name in packages - top - {"grpolab"})


HEAVY_PROBE = """
import os, sys
os.chdir(sys.argv[1])
from grpolab.experiment.config import load_experiment
from grpolab.studies.definition import load_study
load_experiment("experiments/smoke.yaml", ["train.steps=4"])
load_study("studies/dapo_table1.yaml")
heavy = sorted(m for m in ("torch", "transformers", "peft", "mlflow", "trl", "optuna", "accelerate") if m in sys.modules)
print(",".join(heavy) or "none")
"""


def test_validating_files_imports_no_heavy_library():
    out = subprocess.run([sys.executable, "-c", HEAVY_PROBE, str(REPO)], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "none", out.stdout + out.stderr


def test_a_config_typo_is_answered_without_heavy_imports():
    probe = ("import sys, runpy\nsys.argv = ['grpolab', 'run', 'experiments/smoke.yaml', 'train.stepz=3']\n"
             "from grpolab.cli import main\ncode = main()\n"
             "print(code, sorted(m for m in ('torch', 'transformers', 'mlflow', 'peft') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO)
    assert out.stdout.strip() == "2 []", out.stdout + out.stderr
    assert "train.stepz: unknown key" in out.stderr


def test_no_sub_package_shadows_a_public_name(graph):
    """``import grpolab.run.x`` would replace the function ``grpolab.run`` with a package."""
    from import_graph import _exports
    rooms = {name.split(".")[1] for name in graph if name.count(".") >= 1}
    assert rooms & set(_exports()) == set()
