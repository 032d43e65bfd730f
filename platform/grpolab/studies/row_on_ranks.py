"""A study row on several processes, both sides: the worker starts and watches the ranks
(``run_on_ranks``), each rank trains its share of the row's one run (``run_rank``). The process
mechanics (environment, start, watch, files) are ``ranks.py``."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import optuna

from grpolab.experiment.run_identity import RunIdentity
from grpolab.signals import signals_raise
from grpolab.studies import ranks
from grpolab.studies.definition import load_study, quiet_build
from grpolab.studies.heartbeat import abort_if_lost
from grpolab.studies.processes import pin_worker_threads
from grpolab.studies.row_run import PrunedRun, run_row
from grpolab.studies.storage import create_or_load
from grpolab.tracking.held_out import RunHistory


def run_on_ranks(world: int, spec: dict, heartbeat, on_run, accelerate_config: str | None = None,
                 dtype: str = "fp32") -> RunHistory:
    """The worker's side of a row on ``world`` processes (ranks.py): start them, watch them with
    the heartbeat (a reaped row or a signal stops them), record rank 0's run on the trial."""
    row_dir = Path(tempfile.mkdtemp(prefix="grpolab-row-"))
    told: list[str] = []

    def progressed() -> None:
        heartbeat.progressed()
        run_id = (row_dir / ranks.RUN_ID).read_text().strip() if (row_dir / ranks.RUN_ID).exists() else ""
        if run_id and not told:
            told.append(run_id)
            on_run(run_id)
    try:
        ranks.write_atomic(row_dir / ranks.SPEC, json.dumps({**spec, "row_dir": str(row_dir)}))
        procs = ranks.start_ranks(world, row_dir, accelerate_config, dtype)
        codes = ranks.watch_ranks(procs, row_dir, lambda: abort_if_lost(heartbeat), progressed)
        result = ranks.read_result(row_dir)
    finally:
        if not told and (row_dir / ranks.RUN_ID).exists():   # stopped early: the trial still names its run
            with contextlib.suppress(Exception):
                progressed()
        shutil.rmtree(row_dir, ignore_errors=True)
    if "pruned" in result:
        raise PrunedRun(result["pruned"])
    if "values" not in result or any(codes):
        why = result.get("error") or "no result"
        who = (lambda r: "the accelerate launcher") if accelerate_config else (lambda r: f"rank {r}")
        failed = ", ".join(f"{who(r)} " + (f"killed by signal {-c}" if c < 0 else f"exit code {c}")
                           for r, c in enumerate(codes) if c)
        raise RuntimeError(f"the row's {world} processes did not finish ({failed or 'all exited 0'}): {why}")
    evals = {int(step): metrics for step, metrics in result["values"]["evals"].items()}
    return RunHistory(evals, {k: [tuple(p) for p in v] for k, v in result["values"]["curves"].items()})


def run_rank(spec_path: str) -> None:
    """One process of a row run on several (``grpolab study-rank``, started by run_on_ranks)."""
    ranks.die_with_worker()
    pin_worker_threads()
    spec = json.loads(Path(spec_path).read_text())
    row_dir, rank = Path(spec["row_dir"]), int(os.environ.get("RANK", "0"))
    exp = quiet_build(spec["experiment"])
    prune_trial = None
    if rank == 0 and spec.get("prune"):   # rank 0 evaluates, so it reports to Optuna's pruner
        prune = spec["prune"]
        prune_trial = optuna.Trial(create_or_load(load_study(prune["study"]), prune["storage"]), prune["trial_id"])

    def on_run(run_id: str) -> None:
        ranks.write_atomic(row_dir / ranks.RUN_ID, run_id)
        beat.progressed()
    beat = ranks.RankBeat(row_dir if rank == 0 else None)
    with signals_raise():
        try:
            identity = RunIdentity(spec["parent_run_id"], spec["tags"], spec["run_name"], spec["resume_run_id"])
            result = run_row(exp, Path(spec["state"]), identity, beat, on_run, prune_trial, spec["metric"])
        except PrunedRun as exc:
            if rank == 0:
                ranks.write_atomic(row_dir / ranks.RESULT, json.dumps({"pruned": str(exc)}))
            return
        except Exception as exc:
            if rank == 0:
                ranks.write_atomic(row_dir / ranks.RESULT, json.dumps({"error": f"{type(exc).__name__}: {exc}"[:2000]}))
            raise
    if rank == 0:
        import torch.distributed as dist
        grouped = dist.is_available() and dist.is_initialized()
        world = dist.get_world_size() if grouped else 1
        if result.run_id:   # measured: the process group the run trained in
            from grpolab.tracking.recorder import client_for
            client = client_for(Path(spec["state"]))
            client.set_tag(result.run_id, "grpolab.world_size", world)
            client.set_tag(result.run_id, "grpolab.dist_backend", dist.get_backend() if grouped else "none")
        values = {"evals": result.evals, "curves": result.train_curves, "world_size": world}
        ranks.write_atomic(row_dir / ranks.RESULT, json.dumps({"values": values}))
