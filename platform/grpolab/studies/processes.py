"""The worker processes of a multi-worker study: started before the coordinator's set-up,
released once the rows are queued, watched until they exit.

Why they start early: a worker spends ~5 s importing torch, transformers and TRL before it can
claim a row, and the coordinator's own start (imports, store checks, the setup lock, queueing
the rows, the parent run) took another ~5 s before the workers were even started (measured on
2 cores: first row at +10.6 s with 2 workers, +5.7 s with one in-process worker).
Started first, a worker imports while the coordinator sets up, then blocks on its stdin until
the coordinator writes ``go`` (the rows exist, the parent run is open). A worker that reads
anything else, or end of file (the coordinator failed in its set-up, had nothing to run, or
died), exits without touching any store. The coordinator's validation never imports torch
(config checks are torch-free), so it does not compete with the workers' imports.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from grpolab.studies.time_limit import TimeLimit
from grpolab.studies.worker_exit import wait_any

GO = "go"


def start_workers(path: str, storage_url: str, state: Path, workers: int, device_sets=None,
                  procs_per_row: int = 1, accelerate_config: str | None = None) -> list[subprocess.Popen]:
    """Start ``workers`` processes, each with its share of the cores (torch's intra-op pool and
    OpenMP/MKL sized to cores // workers: two 2-thread workers on 2 cores oversubscribe them,
    1.16x the time of 1-thread workers); they wait for ``release(procs, go=True)``.
    ``device_sets`` (devices.py): worker i sees only ``device_sets[i]`` (its CUDA_VISIBLE_DEVICES),
    and runs each row as ``procs_per_row`` processes, one per device."""
    threads = str(max(1, (os.cpu_count() or 2) // workers))
    env = {**os.environ, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "GRPOLAB_WORKER_THREADS": threads}
    cmd = [sys.executable, "-m", "grpolab.cli", "--state", str(state), "study-worker", path, "--storage", storage_url,
           "--wait-for-go"] + row_flags(procs_per_row, accelerate_config)
    devices = [{"CUDA_VISIBLE_DEVICES": ",".join(device_sets[i])} if device_sets else {} for i in range(workers)]
    return [subprocess.Popen(cmd, env={**env, **devices[i]}, stdin=subprocess.PIPE, text=True) for i in range(workers)]


def row_flags(procs_per_row: int, accelerate_config: str | None) -> list[str]:
    """The study-worker flags that make each row run as several processes (ranks.py)."""
    return (["--procs-per-row", str(procs_per_row)] if procs_per_row > 1 else []) + (
        ["--accelerate-config", accelerate_config] if accelerate_config else [])


def release(procs: list[subprocess.Popen], go: bool, limit: TimeLimit | None = None) -> None:
    """Tell each waiting worker to claim rows (``go``) or to exit. A worker already released keeps
    its order, unless ``go`` is False and it still runs: then it is stopped (``stop``), so that no
    path out of the coordinator leaves workers training. A worker never released is killed
    outright: it is still importing or waiting, and has written nothing anywhere. ``limit``: the
    command's time limit, written after ``go`` on the same line, so only these workers read it."""
    released = [p for p in procs if p.stdin is None or p.stdin.closed]
    for p in procs:
        if p in released:
            continue
        try:
            if go:
                p.stdin.write(f"{GO} {limit.word() if limit else ''}".strip() + "\n")
            p.stdin.close()
        except (BrokenPipeError, OSError):   # it already exited (an import error): run_workers reports it
            pass
        if not go and p.poll() is None:
            p.send_signal(signal.SIGKILL)
            p.wait()
    if not go:
        stop([p for p in released if p.poll() is None])


def stop(procs: list[subprocess.Popen], grace: float = 3.0, patience: float = 60.0) -> None:
    """Stop released workers: each records its row interrupted and exits. A Ctrl-C at a terminal
    already reached every worker (one process group), so they get ``grace`` seconds to finish that
    on their own (a second signal could cut a row's report short); the rest are sent SIGTERM,
    and killed after ``patience`` seconds (stuck, e.g. in a hung row: the next run hands it back)."""
    wait_any(procs, grace, until_all=True)
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=patience)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def wait_for_go(preload: bool = True) -> str | None:
    """Worker side: import what a row needs, then wait for the coordinator's word on stdin: what
    follows ``go`` (its time limit, time_limit.TimeLimit.word; '' for none), or None (exit without
    touching a store) on anything else, end of file included. ``preload`` False: rows run as
    several processes (ranks.py), which import it themselves."""
    if preload:
        from grpolab.experiment import runner  # noqa: F401 - the ~5 s of imports overlap the coordinator's set-up
    word, _, rest = sys.stdin.readline().strip().partition(" ")
    return rest if word == GO else None


def run_workers(procs: list[subprocess.Popen], tick) -> list[str]:
    """Watch released workers until all exit, calling ``tick`` (progress, reaping; it raises a
    pending signal) every 2 s and as soon as one exits; returns a line for each that did not exit
    cleanly. Whatever ends the watch early (Ctrl-C, SIGTERM, a store error) stops the workers first."""
    try:
        while any(p.poll() is None for p in procs):
            tick()
            wait_any(procs, 2.0)   # a worker's exit is seen within 0.1 s, not at the next 2 s poll
        tick()   # a worker that died last: its row is handed back before the summary
    except BaseException as exc:
        # the grace is for a terminal Ctrl-C, which already reached every worker; a SIGTERM to the
        # coordinator alone or a store error reached none of them: waiting would be wasted
        stop(procs, grace=3.0 if isinstance(exc, KeyboardInterrupt) else 0.0)
        raise
    return [f"worker {p.pid} " + (f"was killed by signal {-p.returncode}" if p.returncode < 0 else
                                  f"exited with code {p.returncode}") for p in procs if p.returncode != 0]


def pin_worker_threads() -> None:
    """A worker process of a multi-worker study uses only its share of the cores: torch's
    intra-op pool from GRPOLAB_WORKER_THREADS (set by the coordinator) and a single inter-op
    thread; N workers with a full pool each would oversubscribe the machine (2 workers of 2 threads
    on 2 cores take 1.16x the time of 1-thread workers). A single in-process worker keeps torch's default."""
    threads = os.environ.get("GRPOLAB_WORKER_THREADS")
    if threads:
        import torch
        torch.set_num_threads(int(threads))
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:  # already set in this process (inter-op work started): keep it
            pass
