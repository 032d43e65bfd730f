"""scripts/wheelhouse.py: this machine's wheelhouse installs with pip's index off into an empty
folder, and grpolab imports from there beside the installed torch and nothing else of this
environment (a venv without site-packages; torch's own files linked in through a .pth). torch's
pure-Python requirements (sympy, filelock, ...) come from the wheelhouse, as on a GPU machine.

The wheelhouse is kept between runs in ~/.cache/grpolab-tests (GRPOLAB_WHEELHOUSE_CACHE): a
rebuild fetches only the wheels whose pins changed (a cold build downloads about 230 MiB through
pip's cache), and rebuilds grpolab's own wheel every time."""

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from conftest import REPO

SCRIPT = REPO / "scripts" / "wheelhouse.py"


@pytest.fixture(scope="module")
def wheelhouse() -> tuple[Path, dict]:
    default = Path.home() / ".cache" / "grpolab-tests" / "wheelhouse-cp{}{}".format(*sys.version_info[:2])
    folder = Path(os.environ.get("GRPOLAB_WHEELHOUSE_CACHE", default))
    done = subprocess.run([sys.executable, str(SCRIPT), "-o", str(folder)], capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stderr[-3000:]
    return folder, json.loads(done.stdout)


def _torch_only(folder: Path) -> Path:
    """Links to torch's own top-level files (torch/, torchgen/, its dist-info, ...), none of its requirements."""
    dist = metadata.distribution("torch")
    tops = {Path(str(f)).parts[0] for f in dist.files if not str(f).startswith("..")}
    site = Path(dist.locate_file(""))
    folder.mkdir()
    for top in tops:
        (folder / top).symlink_to(site / top)
    return folder


def _offline_env(**extra) -> dict:
    """No pip configuration (this machine's adds local indexes and a folder holding a torch wheel)."""
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR", "SSL_CERT_FILE")}
    return {**keep, "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1", **extra}


def test_this_machines_wheelhouse_installs_offline_beside_torch_and_grpolab_imports(wheelhouse, tmp_path):
    folder, summary = wheelhouse
    pins = (folder / "requirements.txt").read_text().split()
    names = {p.split("==")[0] for p in pins}
    assert summary["left_out"] == ["torch"] and "torch" not in names and summary["wheels"] == len(pins)
    assert not any(n.startswith(("nvidia-", "triton", "cuda-")) for n in names)
    assert {"grpolab", "trl", "transformers", "mlflow", "optuna", "sympy", "filelock"} <= names
    assert f"trl=={metadata.version('trl')}" in pins and f"transformers=={metadata.version('transformers')}" in pins
    site = tmp_path / "target"   # --no-compile: byte-compiling 800 MB of packages takes minutes on 2 cores
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--find-links", str(folder), "--no-deps",
                           "--no-compile", "--quiet", "--target", str(site), "-r", str(folder / "requirements.txt")],
                          capture_output=True, text=True, env=_offline_env(), timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not (site / "torch").exists() and (site / "grpolab" / "cli.py").exists()

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    venv_site = next((venv / "lib").glob("python3*/site-packages"))
    (venv_site / "torch_only.pth").write_text(str(_torch_only(tmp_path / "torch-only")) + "\n")
    code = ("import json, grpolab.cli, grpolab.trainer.grpo_trainer, sympy, torch, trl; "
            "print(json.dumps({m.__name__: m.__file__ for m in (grpolab.cli, grpolab.trainer.grpo_trainer, sympy, torch, trl)}))")
    done = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, cwd=tmp_path,
                          env=_offline_env(PYTHONPATH=str(site), HF_HUB_OFFLINE="1"), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    where = json.loads(done.stdout.strip().splitlines()[-1])
    for name in ("grpolab.cli", "grpolab.trainer.grpo_trainer", "sympy", "trl"):
        assert where[name].startswith(str(site)), where
    assert where["torch"].startswith(str(tmp_path / "torch-only")), where


def test_another_target_asks_pip_for_its_tags(tmp_path):
    """--python-version / --platform become pip's target flags, older manylinux tags included; bad ones exit."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("wheelhouse", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    flags = script.target_flags("3.12", ["manylinux_2_28_x86_64"])
    assert flags[:10] == ["--python-version", "3.12", "--implementation", "cp", "--abi", "cp312", "--abi", "abi3",
                          "--abi", "none"]
    platforms = flags[11::2]
    assert platforms[0] == "manylinux_2_28_x86_64" and platforms[-4:] == ["manylinux_2_5_x86_64", "manylinux2014_x86_64",
                                                                          "manylinux2010_x86_64", "manylinux1_x86_64"]
    assert len(platforms) == 24 + 3 and script.target_flags(None, []) == []
    with pytest.raises(SystemExit, match="--python-version and --platform go together"):
        script.target_flags("3.12", [])
    with pytest.raises(SystemExit, match="want MAJOR.MINOR"):
        script.target_flags("312", ["manylinux_2_28_x86_64"])
    (tmp_path / "stray.txt").write_text("x")
    with pytest.raises(SystemExit, match="neither empty nor a wheelhouse"):
        script.build(tmp_path, None, [], [], False)
