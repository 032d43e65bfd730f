"""A CPU-side guard for code that would mix devices on a GPU.

On a CPU machine every tensor lands on the CPU, so ``torch.arange(n) + x`` works whatever device
``x`` would have had on a GPU. ``FactoryGuard`` is a ``TorchFunctionMode`` that records each tensor
factory called directly from grpolab's own source without a ``device=`` argument: such a tensor is
on the CPU even when its operands are on CUDA. A tensor meant for the CPU says ``device="cpu"``.

It also follows those host tensors: one grpolab makes with ``device="cpu"`` (or ``.cpu()``, or
``.to("cpu")``, or with the ``.device`` of a host tensor), and what is computed from host tensors
alone, stays a host tensor until it is moved to another tensor's device (``.to(device=x.device)``;
every tensor not followed counts as on the accelerator, as a model's are). An operation that
meets a host tensor of one or more dimensions beside any other tensor is recorded, as CUDA would
raise there (a 0-dim host tensor is a scalar CUDA accepts; a host index, a copy into a tensor and
a move are allowed, as on CUDA).
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import weakref
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode, _pop_mode_temporarily

FACTORIES = frozenset({torch.arange, torch.zeros, torch.ones, torch.full, torch.empty, torch.tensor,
                       torch.as_tensor, torch.asarray, torch.scalar_tensor, torch.empty_strided,
                       torch.rand, torch.randn, torch.randint, torch.randperm, torch.normal,
                       torch.linspace, torch.logspace, torch.eye, torch.tril_indices, torch.triu_indices,
                       torch.bartlett_window, torch.blackman_window, torch.hamming_window, torch.hann_window,
                       torch.kaiser_window, torch.sparse_coo_tensor})


_TORCH = os.path.join(os.path.dirname(os.path.realpath(torch.__file__)), "")   # torch's own frames (overrides)


@functools.lru_cache(maxsize=4096)   # once per source file: a factory call costs a dict lookup, not a realpath
def normalised(path: str) -> str:
    """``path`` with symlinks resolved: the package root and a frame's file name compare alike."""
    return os.path.realpath(path)


def package_root() -> str:
    """grpolab's source folder as imported (so the guard also watches an older checkout's code)."""
    import grpolab
    return normalised(os.path.dirname(grpolab.__file__))


# operations where a host tensor beside a device tensor is fine on CUDA too: a copy into a tensor
# (slice assignment is one); indexing has its own rule (_index_mixes)
MIXING_ALLOWED = frozenset({torch.Tensor.copy_})
INDEXING = frozenset({torch.Tensor.__getitem__, torch.Tensor.__setitem__})
# made on the device of the tensor they are called on (or given): host exactly when that one is
ON_ITS_DEVICE = frozenset({torch.Tensor.new_tensor, torch.Tensor.new_zeros, torch.Tensor.new_ones,
                           torch.Tensor.new_full, torch.Tensor.new_empty})
HOST_MAKERS = frozenset({torch.Tensor.cpu})
# operations that take no 0-dim host tensor beside device ones (CUDA's scalar rule is for elementwise
# operands): joins, and indices given as tensors
NO_HOST_SCALAR = frozenset({torch.cat, torch.concat, torch.concatenate, torch.stack, torch.hstack, torch.vstack,
                            torch.dstack, torch.index_select, torch.Tensor.index_select, torch.gather,
                            torch.Tensor.gather, torch.take, torch.Tensor.take, torch.Tensor.index_fill_,
                            torch.Tensor.index_add_, torch.Tensor.index_copy_, torch.Tensor.index_put_,
                            torch.Tensor.scatter_, torch.Tensor.scatter_add_, torch.scatter, torch.Tensor.scatter})


class HostDevice(str):
    """What ``.device`` of a host tensor reads under the guard: "cpu" as a string, so that a factory
    or ``.to`` given it (``device=turn_index.device``) is seen to name the host too. It equals the
    string "cpu" and no torch.device, which the guard reads as the accelerator's (``_is_host``)."""
    type = "cpu"
    index = None

    def __eq__(self, other):
        return isinstance(other, str) and str.__eq__(self, other)

    def __ne__(self, other):
        return not self.__eq__(other)

    __hash__ = str.__hash__


def _is_host(device) -> bool:
    """A device named as the CPU: in the source ("cpu"), or read off a host tensor (``HostDevice``).
    A torch.device is read off any other tensor: the accelerator, on a GPU (grpolab writes no
    torch.device("cpu") without its marked reason: tests/house/test_device_guard.py)."""
    return isinstance(device, str) and device.split(":")[0] == "cpu"


def _names_a_device(value) -> bool:
    """A ``.to`` argument that moves: a device other than the host (a torch.device, "cuda", 0)."""
    return isinstance(value, (torch.device, int)) and not isinstance(value, bool) or (
        isinstance(value, str) and not _is_host(value) and value.split(":")[0] in ("cuda", "meta", "xpu", "mps"))


def _tensors(args, kwargs) -> list:
    out = []
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            out.extend(t for t in a if isinstance(t, torch.Tensor))
    return out


class FactoryGuard(TorchFunctionMode):
    """Records ``path:line torch.<factory>`` for each factory called from a frame under ``root``
    with no ``device=`` (or ``device=None``), and each operation that mixes a host tensor grpolab
    made with another tensor (module docstring). Costs a few dict lookups per torch call."""

    def __init__(self, root: str | None = None):
        super().__init__()
        self.root = os.path.join(normalised(root) if root else package_root(), "")   # grpolab/, not grpolab_x/
        self.unguarded: list[str] = []
        self.host: dict[int, tuple] = {}   # id -> (weakref, where it was made): host tensors, alive

    def _caller(self, through_torch: bool = False) -> str | None:
        """``grpolab/path.py:line`` of the frame calling torch when it is grpolab's, or None; with
        ``through_torch``, of the innermost grpolab frame above torch's own (torch.nn.functional's
        operations are grpolab's when grpolab called them; a factory inside nn.Linear is not)."""
        frame = sys._getframe(2)
        while frame is not None:
            filename = normalised(frame.f_code.co_filename)
            if filename.startswith(self.root):
                return f"{Path(self.root).name}/{Path(filename).relative_to(self.root).as_posix()}:{frame.f_lineno}"
            if frame.f_code.co_name != "__torch_function__" and not (through_torch and filename.startswith(_TORCH)):
                return None   # called from outside grpolab (TRL, transformers, a test)
            frame = frame.f_back
        return None

    def follow(self, t: torch.Tensor, origin: str) -> None:
        """Follow ``t`` as a host tensor made at ``origin``: a test's stand-in for a host input."""
        self._mark(t, origin)

    def host_origin(self, t) -> str | None:
        """Where grpolab made ``t`` as a host tensor, or None for a tensor the guard takes as the
        accelerator's."""
        entry = self.host.get(id(t))
        if entry is None:
            return None
        if entry[0]() is not t:   # a dead tensor's id, reused
            del self.host[id(t)]
            return None
        return entry[1]

    def _mark(self, out, origin: str) -> None:
        for t in (out if isinstance(out, (list, tuple)) else (out,)):
            if isinstance(t, torch.Tensor):
                self.host[id(t)] = (weakref.ref(t, functools.partial(self._forget, id(t))), origin)

    def _forget(self, key: int, ref) -> None:
        """A host tensor died: its entry goes (unless its id already holds a newer one)."""
        if self.host.get(key, (None,))[0] is ref:
            del self.host[key]

    def _record(self, line: str) -> None:
        if line not in self.unguarded:
            self.unguarded.append(line)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in FACTORIES:
            device = kwargs.get("device")
            if device is None or _is_host(device):
                caller = self._caller()
                if caller and device is None:
                    self._record(f"{caller} torch.{func.__name__}(...) names no device")
                out = func(*args, **kwargs)
                if caller:
                    self._mark(out, f"{caller} ({func.__name__}, device=\"cpu\")")
                return out
            return func(*args, **kwargs)
        if func in HOST_MAKERS or (func is torch.Tensor.to and any(_is_host(d) for d in (*args[1:], kwargs.get("device")))):
            out = func(*args, **kwargs)
            caller = self._caller()
            if caller:
                if out is args[0]:
                    out = out.view_as(out)   # on a GPU a new host tensor, while the device one stays
                self._mark(out, f"{caller} (moved to the host)")
            return out
        if _is_host(kwargs.get("device")) and (caller := self._caller()):   # zeros_like(x, device="cpu")
            out = func(*args, **kwargs)
            self._mark(out, f"{caller} (device=\"cpu\")")
            return out
        if not self.host:
            return func(*args, **kwargs)
        if getattr(func, "__self__", None) is torch.Tensor.device:   # reading .device
            return HostDevice("cpu") if self.host_origin(args[0]) is not None else func(*args, **kwargs)
        if func in (torch.Tensor.to, torch.Tensor.type_as) or func in ON_ITS_DEVICE:
            return self._placed(func, args, kwargs)
        tensors = _tensors(args, kwargs)
        origins = [self.host_origin(t) for t in tensors]
        hosts = [o for o in origins if o is not None]
        out = func(*args, **kwargs)
        if not hosts:
            return out
        others = [t for o, t in zip(origins, tensors) if o is None]
        # CUDA takes a 0-dim host tensor as a scalar operand, but not as a part to join nor as an index
        wide = [o for o, t in zip(origins, tensors) if o is not None and (t.dim() > 0 or func in NO_HOST_SCALAR)]
        mixes = self._index_mixes(func, args) if func in INDEXING else (others and wide and func not in MIXING_ALLOWED)
        if mixes:
            name = getattr(func, "__qualname__", getattr(func, "__name__", repr(func)))
            name = name.replace("_VariableFunctionsClass.", "torch.")
            self._record(f"{self._caller(through_torch=True) or 'outside grpolab'} {name} mixes a host tensor (made at "
                         f"{mixes if isinstance(mixes, str) else wide[0]}) with another tensor; on a GPU it raises: "
                         "move it with .to(device=<operand>.device)")
        elif not others and not (kwargs.get("device") is not None and not _is_host(kwargs["device"])):
            self._mark(out, hosts[0])   # computed from host tensors only (zeros_like(h)): still on the host
        return out

    def _placed(self, func, args, kwargs):
        """``.to``, ``type_as`` and ``new_*``: the result is on the device they name or are given:
        a host tensor's (followed), another device (not followed), or, for ``.to(dtype)``, where
        the tensor was."""
        out = func(*args, **kwargs)
        given = [a for a in (*args[1:], kwargs.get("device"), kwargs.get("other")) if isinstance(a, torch.Tensor)]
        source = args[0] if func in ON_ITS_DEVICE and kwargs.get("device") is None else (given[0] if given else None)
        if source is not None:
            origin = self.host_origin(source)
        elif any(_names_a_device(a) for a in (*args[1:], kwargs.get("device"))):
            origin = None
        else:   # .to(dtype): the tensor stays where it is
            origin = self.host_origin(args[0])
        if out is args[0] and (origin is None) != (self.host_origin(out) is None):
            out = out.view_as(out)   # moved: on a GPU a new tensor, while the one it came from stays
        if origin is not None:
            self._mark(out, origin)
        return out

    def _index_mixes(self, func, args) -> str | None:
        """Where indexing raises on CUDA (the origin of the host tensor at fault), else None: a host
        tensor indexed by a device index, or a host value of 1+ dims put through a tensor index
        into a device tensor. A host index into a device tensor is fine, and so is a slice
        assignment (a copy)."""
        target, index = args[0], args[1]
        indices = [t for t in (index if isinstance(index, (tuple, list)) else (index,)) if isinstance(t, torch.Tensor)
                   and not (t.dim() == 0 and not t.is_floating_point() and t.dtype != torch.bool)]  # 0-dim int: .item()
        target_host = self.host_origin(target)
        if target_host is not None and any(self.host_origin(i) is None for i in indices):
            return target_host
        value = args[2] if func is torch.Tensor.__setitem__ else None
        if not isinstance(value, torch.Tensor) or not indices:
            return None
        value_host = self.host_origin(value)
        if target_host is None and value_host is not None and value.dim() > 0:
            return value_host      # a wide host value into a device tensor through a tensor index
        if target_host is not None and value_host is None and value.dim() > 0:
            return target_host     # a wide device value into a host tensor
        return None

    def message(self) -> str:
        return ("tensor factories in grpolab without device=, or host tensors mixed with others (on a GPU these "
                "tensors stay on the CPU; pass the operands' device, or device=\"cpu\" for a CPU tensor on "
                "purpose and move it before it meets a device tensor):\n  " + "\n  ".join(self.unguarded))


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
