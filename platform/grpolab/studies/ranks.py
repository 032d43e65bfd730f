"""A study row on K processes (``--gpus-per-row K`` with K > 1).

The worker that claimed the row keeps everything a row's bookkeeping needs (the trial, its
heartbeat, the report) and starts K rank processes for the training itself, the way
``torchrun --nproc_per_node K`` does: each gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
MASTER_ADDR and MASTER_PORT, and accelerate (inside TRL) joins them in one process group (gloo on
CPU, NCCL on GPUs; rank r uses device r of its worker's CUDA_VISIBLE_DEVICES). Rank 0 holds the
row's one MLflow run and evaluates (experiment/runner.py: several processes log one run).

Detail: docs/clusters-and-gpus.md, "grpolab.studies.ranks".
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from grpolab.studies.launch_options import deepspeed_config_file
from grpolab.studies.processes import stop
from grpolab.studies.worker_exit import wait_any

PARENT_ENV = "GRPOLAB_RANK_PARENT"      # the worker's pid: a rank dies with it
VIA_LAUNCHER = "launcher"               # PARENT_ENV's value when accelerate's launcher is the rank's parent
PROGRESS, RUN_ID, RESULT, SPEC = "progress", "run_id", "result.json", "spec.json"
STOP_GRACE_S = 5.0                      # SIGTERM -> SIGKILL for ranks being stopped
MIXED_PRECISION = {"fp32": "no", "bf16": "bf16", "fp16": "fp16"}   # train.dtype -> accelerate's --mixed_precision
RESULT_TO_EXIT_S = 10.0                 # rank 0 exits this soon after writing why it stopped (pruned, failed)
AFTER_RANK0_S = 60.0                    # other ranks may take this long to exit after rank 0 finished


class RankProcesses(list):
    """The rank processes of a row, and the rendezvous store they join: served (its port held) for
    as long as this list is referenced."""

    def __init__(self, procs: list[subprocess.Popen], store):
        super().__init__(procs)
        self.store = store

    @property
    def port(self) -> int:
        return self.store.port


class LaunchedRanks(list):
    """The one accelerate launcher that starts a row's ranks: the ranks are its children, so the
    worker learns that rank 0 is done from its result file, not from its exit."""


def rendezvous_store(world: int):
    """A TCPStore hosted by this process on a port the kernel picks as it binds it."""
    from torch.distributed import TCPStore
    return TCPStore("127.0.0.1", 0, world, is_master=True, wait_for_workers=False)


def rank_env(rank: int, world: int, port: int, threads: str) -> dict:
    """What torchrun puts in a rank's environment (single node), plus grpolab's thread share."""
    return {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world),
            "LOCAL_WORLD_SIZE": str(world), "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1", "ROLE_RANK": str(rank),
            "ROLE_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
            "TORCHELASTIC_USE_AGENT_STORE": "True",   # the store on MASTER_PORT is this worker's
            "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "GRPOLAB_WORKER_THREADS": threads,
            PARENT_ENV: str(os.getpid())}


def start_ranks(world: int, row_dir: Path, accelerate_config: str | None = None,
                dtype: str = "fp32") -> list[subprocess.Popen]:
    """Start ``world`` rank processes of the row described by ``row_dir/spec.json``, each with its
    share of this worker's threads (or one accelerate launcher that starts them). They stay in the
    worker's process group (a terminal's Ctrl-C reaches them as it reaches the worker)."""
    cmd = [sys.executable, "-m", "grpolab.cli", "study-rank", str(row_dir / SPEC)]
    if not accelerate_config:
        return start_processes(world, cmd)
    threads = _thread_share(world)
    env = {**os.environ, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads,
           "GRPOLAB_WORKER_THREADS": threads, PARENT_ENV: VIA_LAUNCHER}
    # accelerate's launcher binds its own store on the port it is given: that port is picked free
    return LaunchedRanks([subprocess.Popen(accelerate_command(accelerate_config, world, free_port(), cmd[1:], dtype),
                                           env=env,
                                           preexec_fn=_die_with_parent)])


def start_processes(world: int, cmd: list[str]) -> RankProcesses:
    """``world`` processes running ``cmd`` as the ranks of one process group, around a rendezvous
    store this process hosts."""
    threads, store = _thread_share(world), rendezvous_store(world)
    return RankProcesses([subprocess.Popen(cmd, env=rank_env(rank, world, store.port, threads))
                          for rank in range(world)], store)


def _thread_share(world: int) -> str:
    return str(max(1, int(os.environ.get("GRPOLAB_WORKER_THREADS") or _cpus()) // world))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def accelerate_command(config: str, world: int, port: int, module_args: list[str], dtype: str = "fp32") -> list[str]:
    """``accelerate launch`` of ``python -m <module_args>`` on ``world`` processes on this node;
    the file decides the rest (DeepSpeed ZeRO stage, ...). Flags beat the file: ``--gpu_ids all``
    keeps the worker's CUDA_VISIBLE_DEVICES (accelerate would overwrite it with a file's ids), and
    ``--mixed_precision`` comes from the row's train.dtype (transformers reads accelerate's
    setting over its own bf16/fp16 arguments), and a DeepSpeed JSON the file names is passed by
    its absolute path (the worker is not launched from the study's folder)."""
    return [sys.executable, "-m", "accelerate.commands.launch", "--config_file", config, "--num_processes",
            str(world), "--num_machines", "1", "--machine_rank", "0", "--main_process_ip", "127.0.0.1",
            "--main_process_port", str(port), "--gpu_ids", "all", "--mixed_precision", MIXED_PRECISION[dtype],
            *(["--deepspeed_config_file", ds_file] if (ds_file := deepspeed_config_file(config)) else []), *module_args]


def _die_with_parent() -> None:
    """In a child, before it runs: SIGKILL when its parent dies (Linux; elsewhere nothing)."""
    if sys.platform.startswith("linux"):
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)   # PR_SET_PDEATHSIG


def _cpus() -> int:
    """The cores this process may use (a Slurm job's allocation, not the whole node)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def stop_ranks(procs: list[subprocess.Popen], wait_first: float = 0.0, grace: float = STOP_GRACE_S) -> None:
    """Let running ranks exit on their own for ``wait_first`` s (a terminal's Ctrl-C reached them
    already), then SIGTERM (each ends its run KILLED), then SIGKILL after ``grace`` s: the workers'
    own stop (processes.stop)."""
    stop(procs, grace=wait_first, patience=grace)


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


def watch_ranks(procs: list[subprocess.Popen], row_dir: Path, check, progressed, poll: float = 0.2) -> list[int]:
    """Wait for every rank, calling ``check()`` (it raises to stop the row: reaped, signalled) and
    ``progressed()`` when rank 0 touched its progress file. A rank that fails, or rank 0 done with
    a pruned or failed row, stops the others; whatever ends the watch early stops every rank
    first. Returns the exit codes."""
    seen, rank0_done = None, None
    try:
        while any(p.poll() is None for p in procs):
            check()
            mtime = _mtime(row_dir / PROGRESS)
            if mtime is not None and mtime != seen:
                seen = mtime
                progressed()
            if any(p.returncode not in (None, 0) for p in procs):
                break   # a rank failed: the others would wait in a collective for ever
            result = _rank0_result(procs, row_dir)
            if result is not None:
                rank0_done = rank0_done or time.monotonic()
                waited = time.monotonic() - rank0_done
                if ("values" not in result and (not isinstance(procs, LaunchedRanks) or waited > RESULT_TO_EXIT_S)
                        or waited > AFTER_RANK0_S):
                    break   # pruned or failed (the others are stuck in the next step), or they hang in teardown
            wait_any(procs, poll)
        progressed()
    except BaseException as exc:
        stop_ranks(procs, wait_first=3.0 if isinstance(exc, KeyboardInterrupt) else 0.0)
        raise
    stop_ranks(procs)
    return [p.returncode for p in procs]


def _rank0_result(procs: list[subprocess.Popen], row_dir: Path) -> dict | None:
    """Rank 0's result once it is done, else None: its exit when the worker started it, its result
    file when accelerate's launcher did (procs[0] is then the launcher, which waits for every rank)."""
    if isinstance(procs, LaunchedRanks):
        return read_result(row_dir) or None
    return read_result(row_dir) if procs[0].returncode is not None else None


def read_result(row_dir: Path) -> dict:
    try:
        return json.loads((row_dir / RESULT).read_text())
    except (OSError, ValueError):
        return {}


def write_atomic(path: Path, text: str) -> None:
    scratch = path.with_name(f".{path.name}.tmp")
    scratch.write_text(text)
    os.replace(scratch, path)


def die_with_worker() -> None:
    """Rank side, first thing: be killed (SIGKILL) when the worker that started this rank dies;
    exit at once if it is already gone (it died before the request was made)."""
    parent = os.environ.get(PARENT_ENV)
    if not parent or not sys.platform.startswith("linux"):
        return
    if parent == VIA_LAUNCHER:   # accelerate's launcher, which dies with the worker, is this rank's parent
        parent = str(os.getppid())
    _die_with_parent()
    if os.getppid() != int(parent):
        os._exit(1)


class RankBeat:
    """A rank's stand-in for the worker's Heartbeat (heartbeat.py): rank 0 tells its progress to
    the worker through the progress file; the worker holds the trial's heartbeat and stops the
    ranks when the row is reaped, so ``lost`` is never set here."""

    def __init__(self, row_dir: Path | None):
        self.trial = None
        self.lost = threading.Event()
        self._path, self._last = (row_dir / PROGRESS if row_dir else None), 0.0

    def progressed(self) -> None:
        if self._path is not None and time.monotonic() - self._last > 0.5:
            self._last = time.monotonic()
            with contextlib.suppress(OSError):
                self._path.touch()
