"""The `gpu` extra installs a working set: its vLLM pin lies inside the installed TRL's declared
vLLM range, and that vLLM's own requirements (recorded from the real wheel in
tests/data/vllm-0.30.0-requires.txt) accept grpolab's torch and transformers pins."""

from __future__ import annotations

import tomllib
from importlib.metadata import requires
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "tests" / "data"


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _exact_pins(lines) -> dict[str, Version]:
    pins = {}
    for line in lines:
        req = Requirement(line)
        exact = [s.version for s in req.specifier if s.operator == "=="]
        if exact:
            pins[req.name.lower()] = Version(exact[0])
    return pins


def _recorded_requirements(name: str, version: Version) -> list[Requirement]:
    path = RECORDED / f"{name}-{version}-requires.txt"
    assert path.exists(), f"no recorded metadata for {name}=={version}: record its wheel's Requires-Dist in {path}"
    lines = [ln.removeprefix("Requires-Dist:").strip() for ln in path.read_text().splitlines()
             if ln.startswith("Requires-Dist:")]
    return [Requirement(ln) for ln in lines]


def test_gpu_extra_pins_vllm_inside_trls_declared_range():
    gpu = _exact_pins(_pyproject()["optional-dependencies"]["gpu"])
    assert "vllm" in gpu, "the gpu extra must pin vllm exactly (pip would otherwise backtrack through 300 MB wheels)"
    trl_vllm = [Requirement(r) for r in requires("trl") if r.startswith("vllm") and 'extra == "vllm"' in r]
    assert len(trl_vllm) == 1, trl_vllm
    assert gpu["vllm"] in trl_vllm[0].specifier, f"vllm=={gpu['vllm']} is outside TRL's {trl_vllm[0].specifier}"


def test_pinned_vllm_requirements_agree_with_grpolab_pins():
    project = _pyproject()
    core = _exact_pins(project["dependencies"])
    gpu = _exact_pins(project["optional-dependencies"]["gpu"])
    vllm_reqs = {r.name.lower(): r for r in _recorded_requirements("vllm", gpu["vllm"]) if r.marker is None}
    for name in ("torch", "transformers"):
        assert name in vllm_reqs, f"vllm=={gpu['vllm']} declares no {name} requirement (recorded metadata changed?)"
        assert core[name] in vllm_reqs[name].specifier, (
            f"vllm=={gpu['vllm']} requires {vllm_reqs[name]}, grpolab pins {name}=={core[name]}")
    # every package both vLLM and grpolab pin exactly (torchvision, torchaudio, ...) names one version
    for name, version in {**core, **gpu}.items():
        if name in vllm_reqs and name != "vllm":
            assert version in vllm_reqs[name].specifier, f"{name}=={version} vs vllm's {vllm_reqs[name]}"
