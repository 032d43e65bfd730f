"""Benchmark: study throughput with 1 and with 2 worker processes (reported, never enforced).

The same small ladder (``rows`` rows: 2 rungs x rows/2 seeds, one shared warm start trained once
before any timing) is run as two fresh studies in the same state folder, one with 1 worker and
one with 2, alternating the order across repeats so that drift in machine load does not favour
either. Throughput = rows / wall seconds of ``run_study`` (worker start-up included: it is part
of what a user waits for). The ratio 2-worker / 1-worker is the figure of merit; on 2 cores the
target is 1.7x or better. Timings taken while other processes load the machine are not
comparable: the report includes the load average before and after.
"""

from __future__ import annotations

import os
import statistics
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


def _timed_study(path: Path, state: Path, workers: int) -> float:
    from .studies import run_study
    start = time.perf_counter()
    code = run_study(str(path), state, None, workers, False, echo=lambda line: None)
    if code != 0:
        raise RuntimeError(f"benchmark study {path.stem} had failed rows (exit {code})")
    return time.perf_counter() - start


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
    stamp = int(time.time())
    for rep in range(repeats):
        for workers in ((1, 2) if rep % 2 == 0 else (2, 1)):
            path = _study_file(folder, f"bench_workers_{stamp}_{rep}_w{workers}", rows, steps)
            seconds[workers].append(_timed_study(path, state, workers))
    one, two = statistics.median(seconds[1]), statistics.median(seconds[2])
    n_rows = 2 * max(1, rows // 2)
    return {"rows": n_rows, "steps": steps, "repeats": repeats, "cores": os.cpu_count(),
            "one_worker_s": round(one, 1), "two_workers_s": round(two, 1),
            "one_worker_rows_per_min": round(60 * n_rows / one, 2), "two_workers_rows_per_min": round(60 * n_rows / two, 2),
            "ratio_2_over_1": round(one / two, 3), "target": 1.7,
            "load_avg_before": round(load_before, 2), "load_avg_after": round(os.getloadavg()[0], 2),
            "note": "wall time of run_study, worker process start-up included; a load average above the core "
                    "count means other processes shared the cores and the ratio is not the machine's"}
