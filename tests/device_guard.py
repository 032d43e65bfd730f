"""A CPU-side guard for code that would mix devices on a GPU.

On a CPU machine every tensor lands on the CPU, so ``torch.arange(n) + x`` works whatever device
``x`` would have had on a GPU. ``FactoryGuard`` is a ``TorchFunctionMode`` that records each tensor
factory called directly from grpolab's own source without a ``device=`` argument: such a tensor is
on the CPU even when its operands are on CUDA. A tensor meant for the CPU says ``device="cpu"``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode, _pop_mode_temporarily

FACTORIES = frozenset({torch.arange, torch.zeros, torch.ones, torch.full, torch.empty, torch.tensor,
                       torch.as_tensor, torch.asarray, torch.scalar_tensor, torch.empty_strided,
                       torch.rand, torch.randn, torch.randint, torch.randperm, torch.normal,
                       torch.linspace, torch.logspace, torch.eye, torch.tril_indices, torch.triu_indices,
                       torch.bartlett_window, torch.blackman_window, torch.hamming_window, torch.hann_window,
                       torch.kaiser_window, torch.sparse_coo_tensor})


@functools.lru_cache(maxsize=4096)   # once per source file: a factory call costs a dict lookup, not a realpath
def normalised(path: str) -> str:
    """``path`` with symlinks resolved: the package root and a frame's file name compare alike."""
    return os.path.realpath(path)


def package_root() -> str:
    """grpolab's source folder as imported (so the guard also watches an older checkout's code)."""
    import grpolab
    return normalised(os.path.dirname(grpolab.__file__))


class FactoryGuard(TorchFunctionMode):
    """Records ``path:line torch.<factory>`` for each factory called from a frame under ``root``
    with no ``device=`` (or ``device=None``). Costs one set lookup per torch call otherwise."""

    def __init__(self, root: str | None = None):
        super().__init__()
        self.root = os.path.join(normalised(root) if root else package_root(), "")   # grpolab/, not grpolab_x/
        self.unguarded: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in FACTORIES and kwargs.get("device") is None:
            frame = sys._getframe(1)
            while frame is not None and frame.f_code.co_name == "__torch_function__":   # another mode above
                frame = frame.f_back
            filename = frame and normalised(frame.f_code.co_filename)
            if filename and filename.startswith(self.root):
                where = f"{Path(filename).relative_to(self.root).as_posix()}:{frame.f_lineno}"
                call = f"{Path(self.root).name}/{where} torch.{func.__name__}(...) names no device"
                if call not in self.unguarded:
                    self.unguarded.append(call)
        return func(*args, **kwargs)

    def message(self) -> str:
        return ("tensor factories in grpolab without device= (on a GPU these tensors stay on the CPU; "
                "pass the operands' device, or device=\"cpu\" for a CPU tensor on purpose):\n  "
                + "\n  ".join(self.unguarded))


def outside_the_guard(fn):
    """``fn`` run with the innermost torch-function mode (the guard) set aside, at full speed: for
    work that stays on the CPU by design, such as the warm start's SFT (world/warmstart.py)."""
    def run(*args, **kwargs):
        from torch.overrides import _get_current_function_mode
        current = _get_current_function_mode()
        assert isinstance(current, FactoryGuard), f"outside_the_guard: the innermost torch-function mode is {current!r}"
        with _pop_mode_temporarily():
            return fn(*args, **kwargs)
    return run


@contextlib.contextmanager
def factories_name_their_device(root: str | None = None):
    """Run the block under ``FactoryGuard`` and fail if grpolab made a tensor without naming its device."""
    with FactoryGuard(root) as guard:
        yield guard
    assert not guard.unguarded, guard.message()
