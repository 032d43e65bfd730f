"""scripts/installed.py, which lets `make install` / `make install-test` skip pip: it must answer
"missing" for anything pip would change, and name it."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("installed_check", REPO / "scripts" / "installed.py")
installed = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = installed
spec.loader.exec_module(installed)


def test_a_requirement_is_met_only_by_an_installed_version_inside_its_range():
    import torch
    version = torch.__version__.split("+")[0]
    assert installed.requirement_missing([f"torch=={version}", "pyyaml>=6"]) is None
    assert installed.requirement_missing(["torch==0.0.1"]) == f"torch==0.0.1 (installed: {torch.__version__})"
    assert installed.requirement_missing(["no-such-distribution-grpolab==1.0"]) == "no-such-distribution-grpolab==1.0"
    assert installed.requirement_missing(['no-such-distribution-grpolab==1.0; python_version < "3"']) is None


def test_an_editable_install_of_another_checkout_is_not_this_one(tmp_path):
    message = installed.editable_mismatch(tmp_path)
    assert message is not None and str(tmp_path) in message and "editable install" in message


def test_every_pyproject_requirement_line_is_read(monkeypatch):
    """A requirement added to pyproject.toml that is not installed makes the whole check answer with it."""
    monkeypatch.setattr(installed, "editable_mismatch", lambda repo=None: None)
    assert installed.first_missing(["test"], ["no-such-distribution-grpolab==2.0"]) == "no-such-distribution-grpolab==2.0"
    assert installed.first_missing(["test"], []) is None   # this test runs where `make install-test` installed it all
