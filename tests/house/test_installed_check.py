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
    monkeypatch.setattr(installed, "metadata_mismatch", lambda project: None)
    assert installed.first_missing(["test"], ["no-such-distribution-grpolab==2.0"]) == (
        "no-such-distribution-grpolab==2.0", False)                     # pip resolves: a requirement is missing
    assert installed.first_missing(["test"], []) == (None, False)   # this test runs where `make install-test` installed it all


def test_a_stale_editable_install_with_every_requirement_met_reinstalls_grpolab_alone(monkeypatch, tmp_path, capsys):
    """A new clone (CI's case): every requirement met, the editable install points elsewhere, so
    `pip install --no-deps -e .` is enough (exit 3); a requirement missing as well needs pip's resolver (exit 1)."""
    monkeypatch.setattr(installed, "editable_mismatch", lambda repo=None: f"grpolab as an editable install of {tmp_path}")
    monkeypatch.setattr(installed, "metadata_mismatch", lambda project: None)
    assert installed.first_missing(["test"], []) == (f"grpolab as an editable install of {tmp_path}", True)
    assert installed.main(["--extra", "test"]) == 3 and "pip --no-deps" in capsys.readouterr().out
    assert installed.main(["--extra", "test", "no-such-distribution-grpolab==2.0"]) == 1
    assert "no-such-distribution-grpolab==2.0; installing" in capsys.readouterr().out
    monkeypatch.setattr(installed, "editable_mismatch", lambda repo=None: None)   # this checkout, metadata stale
    monkeypatch.setattr(installed, "metadata_mismatch", lambda project: "grpolab 0.2.0 (installed metadata: 0.1.0)")
    assert installed.main(["--extra", "test"]) == 3 and "installed metadata: 0.1.0" in capsys.readouterr().out


class _FakeDist:
    def __init__(self, direct_url: str = "{}", version="0.1.0", scripts=None, requires=None):
        from importlib.metadata import EntryPoint
        self.direct_url, self.version, self.requires = direct_url, version, requires or []
        self.entry_points = [EntryPoint(n, v, "console_scripts") for n, v in (scripts or {}).items()]

    def read_text(self, name):
        return self.direct_url if name == "direct_url.json" else None


def test_an_editable_install_of_this_checkout_is_this_one_and_a_copy_is_not(monkeypatch):
    here = f'{{"dir_info": {{"editable": true}}, "url": "{REPO.as_uri()}"}}'
    monkeypatch.setattr(installed.metadata, "distribution", lambda name: _FakeDist(here))
    assert installed.editable_mismatch(REPO) is None
    copied = here.replace("true", "false")
    monkeypatch.setattr(installed.metadata, "distribution", lambda name: _FakeDist(copied))
    assert "editable install" in installed.editable_mismatch(REPO)


def test_metadata_written_by_an_older_pyproject_sends_it_to_pip(monkeypatch):
    project = {"version": "0.1.0", "scripts": {"grpolab": "grpolab.cli:main"}, "dependencies": ["torch==2.13.0"],
               "optional-dependencies": {"test": ["pytest>=8"]}}
    current = dict(scripts={"grpolab": "grpolab.cli:main"}, requires=["torch==2.13.0", 'pytest>=8; extra == "test"'])
    for dist, answer in [(_FakeDist(**current), None),
                         (_FakeDist(**{**current, "scripts": {}}), "console scripts"),
                         (_FakeDist(**{**current, "version": "0.0.9"}), "installed metadata: 0.0.9"),
                         (_FakeDist(**{**current, "requires": ["torch==2.12.0", 'pytest>=8; extra == "test"']}),
                          "requirements as pyproject.toml declares them")]:
        monkeypatch.setattr(installed.metadata, "distribution", lambda name, d=dist: d)
        found = installed.metadata_mismatch(project)
        assert found is None if answer is None else answer in found, (answer, found)


def test_a_requirement_with_extras_is_left_to_pip():
    assert installed.requirement_missing(["torch[opt]==2.13.0"]) == "torch[opt]==2.13.0 (a requirement with extras)"
