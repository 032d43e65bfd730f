"""Devices per worker (``grpolab study --gpus-per-row K``): each worker process of a study owns a
disjoint set of K devices, given to it as ``CUDA_VISIBLE_DEVICES``; a row whose K is above 1 runs
as K processes (ranks.py), each rank on one device of its worker's set.

The pool of devices, first found of: ``--devices 0,1,2,3``, the study file's ``devices:`` list,
``CUDA_VISIBLE_DEVICES``, else every CUDA device torch sees (torch is imported only then). Every
check here runs before the coordinator writes anything.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from grpolab.errors import ConfigError


@dataclass(frozen=True)
class Placement:
    """Which devices each worker process owns, and how many processes a row runs as."""
    device_sets: tuple[tuple[str, ...], ...]   # one per worker, disjoint
    per_row: int
    source: str                                # where the pool came from, for the start line

    @property
    def workers(self) -> int:
        return len(self.device_sets)

    def describe(self) -> str:
        sets = " ".join("[" + ",".join(s) + "]" for s in self.device_sets)
        return (f"devices: {self.workers} worker(s) x {self.per_row} device(s) per row from {self.source}: {sets}"
                + (f"; each row runs as {self.per_row} processes (torch.distributed)" if self.per_row > 1 else ""))


def parse_device_list(text: str, where: str) -> tuple[str, ...]:
    """'0,1,2,3' -> ('0', '1', '2', '3'): device indices or GPU UUIDs, as CUDA_VISIBLE_DEVICES takes them."""
    return check_devices([d.strip() for d in str(text).split(",") if d.strip()], where)


def check_devices(items, where: str) -> tuple[str, ...]:
    if not isinstance(items, (list, tuple)) or not items:
        raise ConfigError(f"{where}: expected a non-empty list of devices (indices like 0,1 or GPU UUIDs), got {items!r}")
    out = []
    for item in items:
        if isinstance(item, bool) or not isinstance(item, (int, str)) or (isinstance(item, int) and item < 0) \
                or not str(item).strip() or "," in str(item):
            raise ConfigError(f"{where}: {item!r} is not a device (a non-negative index or a GPU UUID)")
        out.append(str(item).strip())
    if len(set(out)) != len(out):
        raise ConfigError(f"{where}: a device is listed twice in {out}; each worker must own its devices alone")
    return tuple(out)


def device_pool(flag: str | None, study_devices: tuple[str, ...] = (), environ=None) -> tuple[tuple[str, ...], str]:
    """(pool, where it came from)."""
    environ = os.environ if environ is None else environ
    if flag is not None:
        return parse_device_list(flag, "--devices"), "--devices"
    if study_devices:
        return tuple(study_devices), "the study file's devices:"
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        if not visible.strip():
            raise ConfigError("--gpus-per-row: CUDA_VISIBLE_DEVICES is set but empty (no devices); "
                              "give --devices 0,1,... or a devices: list in the study file")
        return parse_device_list(visible, "CUDA_VISIBLE_DEVICES"), "CUDA_VISIBLE_DEVICES"
    import torch
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if not count:
        raise ConfigError("--gpus-per-row: no CUDA device here and no pool given; give --devices 0,1,... "
                          "(or a devices: list in the study file, or CUDA_VISIBLE_DEVICES)")
    return tuple(str(i) for i in range(count)), "torch.cuda.device_count()"


def place(pool: tuple[str, ...], per_row: int, workers: int | None, source: str = "--devices") -> Placement:
    """Split ``pool`` into disjoint sets of ``per_row`` devices, one per worker (pool // per_row
    workers unless ``workers`` asks for fewer)."""
    if isinstance(per_row, bool) or not isinstance(per_row, int) or per_row < 1:
        raise ConfigError(f"--gpus-per-row: must be an integer >= 1, got {per_row!r}")
    size = len(pool)
    if per_row > size:
        raise ConfigError(f"--gpus-per-row {per_row}: the device pool has only {size} device(s) ({','.join(pool)}, "
                          f"from {source})")
    if size % per_row:
        raise ConfigError(f"--gpus-per-row {per_row}: the pool of {size} devices ({','.join(pool)}, from {source}) "
                          f"does not split into sets of {per_row}; give a pool whose size is a multiple of {per_row}")
    most = size // per_row
    if workers is not None and workers > most:
        raise ConfigError(f"--workers {workers}: a pool of {size} devices with --gpus-per-row {per_row} gives at most "
                          f"{most} worker(s)")
    count = most if workers is None else workers
    sets = tuple(tuple(pool[i * per_row:(i + 1) * per_row]) for i in range(count))
    return Placement(sets, per_row, source)


def placement_for(study_devices: tuple[str, ...], per_row: int | None, devices_flag: str | None,
                  workers: int | None, environ=None) -> Placement | None:
    """The placement asked for on the command line, or None (no --gpus-per-row: today's workers)."""
    if per_row is None:
        if devices_flag is not None:
            raise ConfigError("--devices: only with --gpus-per-row K (which sets how many devices each row gets)")
        return None
    if isinstance(per_row, bool) or not isinstance(per_row, int) or per_row < 1:   # before the pool is looked up
        raise ConfigError(f"--gpus-per-row: must be an integer >= 1, got {per_row!r}")
    pool, source = device_pool(devices_flag, study_devices, environ)
    return place(pool, per_row, workers, source)
