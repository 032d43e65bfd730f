"""The device guard itself (device_guard.py): it flags every tensor factory grpolab could call
without a device, whatever path the package is imported by, and a host tensor grpolab made that
meets another tensor before it is moved; it is the mode outside_the_guard sets aside, and grpolab
builds no tensor through the legacy constructors it cannot see."""

import os
import re
from pathlib import Path

import pytest
import torch
from torch.overrides import TorchFunctionMode

from device_guard import FactoryGuard, outside_the_guard, package_root

# Legacy constructors and host-memory views: always on the CPU, and not reached by a
# TorchFunctionMode. A line that needs one says why with this marker.
LEGACY = re.compile(r"torch\.(Tensor|LongTensor|FloatTensor|IntTensor|BoolTensor|DoubleTensor|HalfTensor|ByteTensor)\("
                    r"|torch\.from_numpy\b|torch\.frombuffer\b"
                    # a torch.device naming the CPU reads to the guard as the accelerator's (device_guard._is_host)
                    r"|torch\.device\(\s*[\"']cpu")
REASON = "# host tensor on purpose:"


def _flagged(code: str, filename: str, root: str | None = None) -> list[str]:
    with FactoryGuard(root) as guard:
        exec(compile(code, filename, "exec"), {"torch": torch})
    return guard.unguarded


def test_a_deviceless_factory_in_grpolabs_source_is_flagged():
    """The canary: code compiled with a file name under package_root() is grpolab's to the guard."""
    assert _flagged("torch.arange(2)", os.path.join(package_root(), "canary.py")) == [
        "grpolab/canary.py:1 torch.arange(...) names no device"]
    assert _flagged("torch.arange(2, device='cpu')", os.path.join(package_root(), "canary.py")) == []
    assert _flagged("torch.arange(2)", os.path.join(os.path.dirname(package_root()), "elsewhere.py")) == []


@pytest.mark.parametrize("call", ["torch.asarray([1.0])", "torch.scalar_tensor(1.0)", "torch.empty_strided((2,), (1,))",
                                  "torch.normal(0.0, 1.0, (2,))", "torch.tril_indices(3, 3)", "torch.triu_indices(3, 3)",
                                  "torch.hann_window(4)", "torch.kaiser_window(4)", "torch.bartlett_window(4)",
                                  "torch.blackman_window(4)", "torch.hamming_window(4)",
                                  "torch.sparse_coo_tensor([[0], [1]], [1.0], (2, 2))"])
def test_every_factory_is_watched(call):
    name = call.split("(")[0].removeprefix("torch.")
    assert _flagged(call, os.path.join(package_root(), "f.py")) == [f"grpolab/f.py:1 torch.{name}(...) names no device"]


def _mixed(code: str) -> list[str]:
    """What the guard records for ``code`` run as grpolab's source, with ``x`` a device tensor (made
    outside it, as a model's output is)."""
    with FactoryGuard() as guard:
        exec(compile(code, os.path.join(package_root(), "m.py"), "exec"), {"torch": torch, "x": torch.ones(3)})
    return guard.unguarded


@pytest.mark.parametrize("code, flagged", [
    # a host tensor made on purpose meets a device tensor: CUDA raises there
    ("h = torch.ones(3, device='cpu')\nx - h", "grpolab/m.py:2 TensorBase.sub mixes a host tensor (made at grpolab/m.py:1"),
    ("h = torch.ones(3, device='cpu').to(x.dtype)\nx - h", "grpolab/m.py:2 TensorBase.sub"),   # .to(dtype) moves nothing
    ("h = torch.ones(3, device='cpu') * 2\ntorch.cat([x, h])", "grpolab/m.py:2 torch.cat mixes"),      # host math stays host
    ("h = x.cpu()\nx + h", "grpolab/m.py:2 TensorBase.add mixes a host tensor (made at grpolab/m.py:1 (moved to the host))"),
    ("h = x.to('cpu')\nx + h", "grpolab/m.py:2 TensorBase.add"),
    # a tensor made on a host tensor's device is on the host too
    ("h = torch.ones(3, device='cpu')\nz = torch.zeros(3, device=h.device)\nx + z",
     "grpolab/m.py:3 TensorBase.add mixes a host tensor (made at grpolab/m.py:2"),
    ("h = torch.ones(3, device='cpu')\nx + torch.ones(3, device=x.device).to(h.device)", "grpolab/m.py:2 TensorBase.add"),
    # moved to a host tensor's device, or made on it
    ("h = torch.ones(3, device='cpu')\nx + x.to(h)", "grpolab/m.py:2 TensorBase.add"),
    ("h = torch.ones(3, device='cpu')\nx + x.type_as(h)", "grpolab/m.py:2 TensorBase.add"),
    ("h = torch.ones(3, device='cpu')\nx + h.new_tensor([1.0, 2.0, 3.0])", "grpolab/m.py:2 TensorBase.add"),
    # in place either way, a 0-dim device tensor (CUDA refuses a wide host operand beside it), a host mask
    ("h = torch.ones(3, device='cpu')\nx.add_(h)", "grpolab/m.py:2 TensorBase.add_"),
    ("h = torch.ones(3, device='cpu')\nh.add_(x)", "grpolab/m.py:2 TensorBase.add_"),
    ("h = torch.ones(3, device='cpu')\nh + x.sum()", "grpolab/m.py:2 TensorBase.add"),
    ("h = torch.ones(3, device='cpu') > 0\ntorch.where(h, x, x)", "grpolab/m.py:2 torch.where"),
    # indexing: a host tensor by a device index, a wide host value through a device tensor's index
    ("h = torch.ones(3, device='cpu')\nh[x.long()]", "grpolab/m.py:2 TensorBase.__getitem__"),
    ("h = torch.ones(3, device='cpu')\nh[x.long()] = 1.0", "grpolab/m.py:2 TensorBase.__setitem__"),
    ("h = torch.ones(2, device='cpu')\nx[torch.tensor([0, 1], device='cpu')] = h", "grpolab/m.py:2 TensorBase.__setitem__"),
    ("torch.stack([x.sum(), torch.tensor(1.0, device='cpu')])", "grpolab/m.py:1 torch.stack mixes"),   # no scalar joins
    ("torch.index_select(x, 0, torch.tensor(0, device='cpu'))", "grpolab/m.py:1 torch.index_select mixes"),
    # made on the host by name, from a device tensor
    ("z = x.new_zeros(3, device='cpu')\nx + z", "grpolab/m.py:2 TensorBase.add mixes a host tensor (made at grpolab/m.py:1"),
    ("h = torch.ones(3, device='cpu')\nz = torch.zeros_like(x, device=h.device)\nx + z", "grpolab/m.py:3 TensorBase.add"),
    # a list index, and a wide device value into a host tensor
    ("h = torch.ones(3, device='cpu')\nh[[x.long()]]", "grpolab/m.py:2 TensorBase.__getitem__"),
    ("h = torch.ones(3, device='cpu')\nh[torch.tensor([0, 1], device='cpu')] = x[:2]", "grpolab/m.py:2 TensorBase.__setitem__"),
    # moved with the operands' device, a scalar, an index, a copy into: fine on CUDA too
    ("h = torch.ones(3, device='cpu')\nx + torch.zeros_like(h, device=x.device) + h.new_zeros(3, device=x.device)", None),
    ("h = torch.ones(3, device='cpu')\nx[0:3] = h", None),
    ("h = torch.ones(3, device='cpu')\nx[torch.tensor([0, 1], device='cpu')] = torch.tensor(2.0, device='cpu')", None),
    ("torch.where(x > 0, torch.tensor(1.0, device='cpu'), x)", None),
    ("h = torch.ones(3, device='cpu')\nx + h.to(x.device, non_blocking=True)", None),
    ("h = torch.ones(3, device='cpu')\nassert h.device == 'cpu' and h.device.type == 'cpu' and h.device != x.device", None),
    ("h = torch.ones(3, device='cpu')\nx[x.sum().long() % 3] + h[x.sum().long() % 3]", None),   # 0-dim int: .item()
    ("h = torch.ones(3, device='cpu')\nx - h.to(device=x.device, dtype=x.dtype)", None),
    ("h = torch.ones(3, device='cpu')\nx - h.to(x)", None),
    ("x * torch.tensor(2.0, device='cpu')", None),
    ("x[torch.tensor([0, 2], device='cpu')]", None),
    ("x.copy_(torch.zeros(3, device='cpu'))", None),
    ("h = torch.ones(3, device='cpu')\nh.sum().item() + float(h[0])", None),
])
def test_host_tensors_are_followed_until_they_are_moved(code, flagged):
    found = _mixed(code)
    assert (found == []) if flagged is None else (len(found) == 1 and found[0].startswith(flagged)), found


def test_the_root_and_the_frames_file_compare_with_symlinks_resolved(tmp_path):
    real = tmp_path / "real" / "grpolab"
    real.mkdir(parents=True)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "real")
    assert _flagged("torch.zeros(1)", str(real / "m.py"), root=str(link / "grpolab")) == [
        "grpolab/m.py:1 torch.zeros(...) names no device"]
    assert _flagged("torch.zeros(1)", str(link / "grpolab" / "m.py"), root=str(real)) == [
        "grpolab/m.py:1 torch.zeros(...) names no device"]


def test_outside_the_guard_sets_aside_only_the_guard():
    seen = []
    unguarded = outside_the_guard(lambda: seen.append(torch.arange(1)))
    with FactoryGuard():
        unguarded()
        with TorchFunctionMode():   # another mode innermost: popping it would leave the guard running
            with pytest.raises(AssertionError, match="outside_the_guard: the innermost torch-function mode is"):
                unguarded()
    with pytest.raises(AssertionError, match="innermost torch-function mode is None"):
        unguarded()
    assert len(seen) == 1


def test_grpolab_builds_no_tensor_through_legacy_constructors():
    """torch.Tensor(...), torch.LongTensor(...), torch.from_numpy, torch.frombuffer make CPU tensors
    the guard cannot see; a line that needs one gives its reason after the marker."""
    found = []
    for path in sorted(Path(package_root()).rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if LEGACY.search(line.split("#")[0]) and REASON not in line:
                found.append(f"{path.relative_to(package_root())}:{number}: {line.strip()}")
    assert not found, f"legacy tensor constructors (CPU only, unseen by the device guard; add '{REASON} <why>'):\n" + \
        "\n".join(found)


def test_the_legacy_pattern_matches_what_it_must():
    for line in ("x = torch.Tensor([1])", "torch.LongTensor(ids)", "torch.from_numpy(a)", "torch.frombuffer(b)"):
        assert LEGACY.search(line), line
    assert not LEGACY.search("x: torch.Tensor = y") and not LEGACY.search("isinstance(t, torch.Tensor)")
