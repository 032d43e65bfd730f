"""Benchmark: study throughput with 1 and with 2 worker processes (reported, never enforced).

The same small ladder (``rows`` rows: 2 rungs x rows/2 seeds, one shared warm start trained once
before any timing) is run as two fresh studies in the same state folder, one with 1 worker and
one with 2, alternating the order across repeats so that drift in machine load does not favour
either. Each is timed as the command a user runs, ``grpolab study FILE --workers N`` in a fresh
process: imports, worker start-up and exit, and the study's table included for both (timing the
1-worker case in a process that had already imported torch, as this benchmark first did, left
out ~6 s that only the 2-worker case paid, and read 0.99x). Throughput = rows / wall seconds;
the ratio 2-worker / 1-worker is the figure of merit; on 2 cores the target is 1.7x or better.
CPU seconds (user + sys of the command and its workers) are reported beside the wall time: their
ratio to wall shows how many cores the command kept busy, and unlike wall time they are not
inflated by other processes sharing the cores. The load average before and after says whether
the wall-clock ratio is the machine's.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import yaml

BASE = {"method": {"base": "grpo", "kl_coef": 0.0}, "task": {"name": "addition", "digits": 2},
        "model": {"preset": "tiny"}, "warm_start": {"seed": 0},
        "train": {"group_size": 8, "prompts_per_rollout": 16, "learning_rate": 0.0005},
        "eval": {"prompts": 32, "k": 2}, "tracking": {"experiment": "grpolab-bench"}}


def _study_file(folder: Path, name: str, rows: int, steps: int) -> Path:
    data = {"kind": "ladder", "name": name, "base": BASE, "budget": {"train.steps": steps, "eval.every": 0},
            "seeds": list(range(max(1, rows // 2))), "metric": "final:eval/pass_at_1",
            "rungs": [{"name": "grpo"}, {"name": "+ token-level loss", "changes": {"method.aggregation": "token_mean"}}]}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _timed_study(path: Path, state: Path, workers: int) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the command and its workers) of ``grpolab study``."""
    cmd = [sys.executable, "-m", "grpolab.cli", "--state", str(state), "study", str(path), "--workers", str(workers)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-3:]
        raise RuntimeError(f"benchmark study {path.stem} exited {done.returncode}: {' | '.join(tail)}")
    return wall, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def bench_workers(state: Path, rows: int = 8, steps: int = 20, repeats: int = 1) -> dict:
    from .config import build_config
    from .runner import run_experiment
    folder = Path(tempfile.mkdtemp(prefix="grpolab-bench-workers-"))
    load_before = os.getloadavg()[0]
    # the shared warm start, trained (or found in the cache) outside the timing
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # the clip is inert on-policy; irrelevant to a throughput benchmark
        warm = build_config({**BASE, "name": "bench-warm", "train": {**BASE["train"], "steps": 1},
                             "eval": {"every": 0, "prompts": 4, "k": 1}})
    run_experiment(warm, state)
    seconds: dict[int, list[float]] = {1: [], 2: []}
    cpu: dict[int, list[float]] = {1: [], 2: []}
    stamp = int(time.time())
    for rep in range(repeats):
        for workers in ((1, 2) if rep % 2 == 0 else (2, 1)):
            path = _study_file(folder, f"bench_workers_{stamp}_{rep}_w{workers}", rows, steps)
            wall, cpu_s = _timed_study(path, state, workers)
            seconds[workers].append(wall)
            cpu[workers].append(cpu_s)
    one, two = statistics.median(seconds[1]), statistics.median(seconds[2])
    one_cpu, two_cpu = statistics.median(cpu[1]), statistics.median(cpu[2])
    n_rows = 2 * max(1, rows // 2)
    return {"rows": n_rows, "steps": steps, "repeats": repeats, "cores": os.cpu_count(),
            "one_worker_s": round(one, 1), "two_workers_s": round(two, 1),
            "one_worker_rows_per_min": round(60 * n_rows / one, 2), "two_workers_rows_per_min": round(60 * n_rows / two, 2),
            "ratio_2_over_1": round(one / two, 3), "target": 1.7,
            "one_worker_cpu_s": round(one_cpu, 1), "two_workers_cpu_s": round(two_cpu, 1),
            "one_worker_busy_cores": round(one_cpu / one, 2), "two_workers_busy_cores": round(two_cpu / two, 2),
            "load_avg_before": round(load_before, 2), "load_avg_after": round(os.getloadavg()[0], 2),
            "note": "wall time of `grpolab study --workers N` in a fresh process (imports, worker start-up and "
                    "exit included for both); cpu_s = user+sys of the command and its workers; a load average "
                    "above the core count means other processes shared the cores and the ratio is not the machine's"}
