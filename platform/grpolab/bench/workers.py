"""Benchmark: study throughput with 1 and with 2 worker processes (reported, never enforced).

Detail: docs/testing.md, "grpolab.bench.workers".
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

LADDER = Path(__file__).resolve().parents[3] / "studies" / "dapo_table1.yaml"
SEEDS = (0, 1)


def _ladder() -> dict:
    if not LADDER.exists():
        from grpolab.errors import ConfigError
        raise ConfigError(f"bench --what workers times the main job's ladder, {LADDER}, which this install "
                          "does not have: run it from a grpolab checkout (pip install -e .)")
    return yaml.safe_load(LADDER.read_text())


def ladder_rungs() -> int:
    """Rungs of the ladder the benchmark's rows are drawn from (``--rows``: at most twice this)."""
    return len(_ladder()["rungs"])


def _study_file(folder: Path, name: str, rows: int, steps: int) -> Path:
    """The first rows/2 rungs of the DAPO ladder x SEEDS, ``steps`` steps, evals only at the end
    (the main job's held-out eval every 20 steps is kept when ``steps`` is larger)."""
    ladder = _ladder()
    n_rungs = max(1, rows // len(SEEDS))
    if n_rungs > len(ladder["rungs"]):
        from grpolab.errors import ConfigError
        raise ConfigError(f"--rows: at most {len(SEEDS) * len(ladder['rungs'])} (the ladder's "
                          f"{len(ladder['rungs'])} rungs x {len(SEEDS)} seeds), got {rows}")
    data = {"kind": "ladder", "name": name, "base": {**ladder["base"], "tracking": {"experiment": "grpolab-bench"}},
            "budget": {**ladder.get("budget", {}), "train.steps": steps}, "seeds": list(SEEDS),
            "metric": ladder.get("metric", "final:eval/pass_at_1"), "rungs": ladder["rungs"][:n_rungs]}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


CONFIGS = {   # name: (workers, extra environment)
    "one_worker": (1, {}),
    "one_worker_one_thread": (1, {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "GRPOLAB_WORKER_THREADS": "1"}),
    "two_workers": (2, {}),
}


def _timed_study(path: Path, state: Path, workers: int, env: dict | None = None) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the command and its workers) of ``grpolab study``."""
    cmd = [sys.executable, "-m", "grpolab.cli", "--state", str(state), "study", str(path), "--workers", str(workers)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          env={**os.environ, **(env or {})})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-3:]
        raise RuntimeError(f"benchmark study {path.stem} exited {done.returncode}: {' | '.join(tail)}")
    return wall, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def _row_span(path: Path, state: Path) -> float:
    """Seconds from the first row's run start to the last row's run end (MLflow's own times)."""
    from grpolab.studies.definition import load_study
    from grpolab.studies.rows import PARENT_RUN_ATTR
    from grpolab.studies.storage import create_or_load, default_storage
    study = create_or_load(load_study(str(path)), default_storage(state))
    from grpolab.tracking.recorder import client_for
    client = client_for(state)
    parent = client.get_run(study.user_attrs[PARENT_RUN_ATTR])
    rows = client.search_runs([parent.info.experiment_id],
                              filter_string=f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    return (max(r.info.end_time for r in rows) - min(r.info.start_time for r in rows)) / 1000


def bench_workers(state: Path, rows: int = 8, steps: int = 20, repeats: int = 1) -> dict:
    from grpolab.experiment.config import build_config
    from grpolab.experiment.runner import run_experiment
    folder = Path(tempfile.mkdtemp(prefix="grpolab-bench-workers-"))
    load_before = os.getloadavg()[0]
    # the seeds' warm starts, trained (or found in the cache) outside the timing; the shortest run
    # the ladder's settings allow is one rollout's updates
    ladder = _ladder()
    one_rollout = ladder["base"]["train"].get("minibatches", 1) * ladder["base"]["train"].get("num_iterations", 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # the ladder's own regime notes: irrelevant to a throughput benchmark
        for seed in SEEDS:
            warm = build_config({**ladder["base"], "name": "bench-warm", "seed": seed,
                                 "tracking": {"experiment": "grpolab-bench"},
                                 "train": {**ladder["base"]["train"], "steps": one_rollout},
                                 "eval": {**ladder["base"].get("eval", {}), "every": 0, "prompts": 4, "k": 1}})
            run_experiment(warm, state)
    measured: dict[str, dict[str, list[float]]] = {name: {"wall": [], "cpu": [], "span": []} for name in CONFIGS}
    stamp, names = int(time.time()), list(CONFIGS)
    for rep in range(repeats):
        for name in names[rep % len(names):] + names[:rep % len(names)]:
            workers, env = CONFIGS[name]
            path = _study_file(folder, f"bench_workers_{stamp}_{rep}_{name}", rows, steps)
            wall, cpu_s = _timed_study(path, state, workers, env)
            for key, value in (("wall", wall), ("cpu", cpu_s), ("span", _row_span(path, state))):
                measured[name][key].append(value)
    return _summary(measured, len(SEEDS) * max(1, rows // len(SEEDS)), steps, repeats, load_before)


def _summary(measured: dict, n_rows: int, steps: int, repeats: int, load_before: float) -> dict:
    med = {name: {key: statistics.median(values) for key, values in m.items()} for name, m in measured.items()}
    out = {"rows": n_rows, "steps": steps, "rotations": repeats, "cores": os.cpu_count(), "target": 1.7}
    for name, m in med.items():
        out[name] = {"wall_s": round(m["wall"], 1), "rows_per_min": round(60 * n_rows / m["wall"], 2),
                     "steady_rows_per_min": round(60 * n_rows / m["span"], 2), "cpu_s": round(m["cpu"], 1),
                     "busy_cores": round(m["cpu"] / m["wall"], 2)}
    two = med["two_workers"]
    for base in ("one_worker", "one_worker_one_thread"):
        out[f"ratio_2_over_{base}"] = round(med[base]["wall"] / two["wall"], 3)
        out[f"steady_ratio_2_over_{base}"] = round(med[base]["span"] / two["span"], 3)
    out.update({"load_avg_before": round(load_before, 2), "load_avg_after": round(os.getloadavg()[0], 2),
                "note": "rows_per_min: wall time of `grpolab study --workers N` in a fresh process (imports, "
                        "worker start-up and exit included); steady_rows_per_min: first row start to last row "
                        "end; cpu_s = user+sys of the command and its workers; a load average above the core "
                        "count means other processes shared the cores and the ratios are not the machine's"})
    return out
