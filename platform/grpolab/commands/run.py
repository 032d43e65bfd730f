"""``grpolab run EXPERIMENT [key=value ...]``: train one experiment and record it in MLflow."""

from __future__ import annotations

import json
import os
import sys
import warnings
from dataclasses import dataclass


@dataclass(frozen=True)
class RunOptions:
    experiment: str
    config: object                  # the validated RunConfig
    notes: tuple[str, ...]          # the configuration's warnings, shown before anything is opened
    state: str | None
    resume: bool
    resume_run: str | None


def add(sub) -> None:
    run = sub.add_parser("run", help="train one experiment YAML and record it in MLflow")
    run.add_argument("experiment", help="path to experiments/<name>.yaml")
    run.add_argument("overrides", nargs="*", help="key.path=value overrides, e.g. train.steps=50 method.eps_high=0.28")
    run.add_argument("--resume", action="store_true", help="continue the newest unfinished run of this experiment "
                     "(same name and seed) from its last checkpoint, in the same MLflow run")
    run.add_argument("--resume-run", metavar="RUN_ID", help="continue this MLflow run from its last checkpoint")
    run.set_defaults(parse=parse, execute=execute)


def parse(args) -> RunOptions:
    from grpolab.experiment.config import load_experiment
    with warnings.catch_warnings(record=True) as caught:   # validated first: a typo's answer waits on nothing
        warnings.simplefilter("always")
        cfg = load_experiment(args.experiment, args.overrides)
    return RunOptions(args.experiment, cfg, tuple(str(w.message) for w in caught), args.state, args.resume,
                      args.resume_run)


def execute(options: RunOptions) -> int:
    from grpolab.state import state_dir, state_path
    from grpolab.tracking.stores import check_stores, prepare_stores
    for note in options.notes:
        print(f"warning: {note}", file=sys.stderr)
    cfg = options.config
    check_stores(state_path(options.state))   # fail fast (seconds, nothing written) on an unreachable store
    state = state_dir(options.state)
    prepare_stores(state)   # a fresh MLflow database is created once, under the setup lock
    # a refused resume (no run, no usable checkpoint, a changed configuration) is answered before torch loads
    resume = _resume_target(options, state) if options.resume or options.resume_run else None
    from grpolab.experiment.progress import TrainProgress
    from grpolab.experiment.run_identity import RunIdentity
    from grpolab.experiment.runner import run_experiment

    def announce(run_id: str) -> None:
        print(f"run {cfg.name}: method {cfg.method_name}, {cfg.train.steps} steps; MLflow run {run_id}; "
              f"state {state.resolve()}\npreparing the model (the warm start runs once per preset, task and "
              "seed, then is cached in the state folder) ...", file=sys.stderr, flush=True)
    bar = TrainProgress()
    result = run_experiment(cfg, state, RunIdentity(resume_run_id=resume), callbacks=[bar], eval_hook=bar.on_eval,
                            on_run=announce)
    if int(os.environ.get("RANK", "0")) != 0:
        return 0   # several processes: one run, one summary (rank 0 holds the MLflow run and the evals)
    print(json.dumps(_summary(result, state), indent=2))
    return 0


def _resume_target(options: RunOptions, state) -> str:
    """The MLflow run to continue from its newest checkpoint, refused here, before the run opens."""
    from grpolab.experiment.checkpoint_files import check_resume, resume_note, resume_target
    from grpolab.tracking.recorder import client_for
    cfg = options.config
    resume = resume_target(client_for(state), cfg.tracking.experiment, f"{cfg.name}-s{cfg.seed}", state,
                           options.resume_run)
    note = resume_note(check_resume(state, resume, cfg.resolved()))
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"run {resume}: {note}", file=sys.stderr, flush=True)
    return resume


def _summary(result, state) -> dict:
    from grpolab.tracking.location import where
    return {
        "run_id": result.run_id, "status": result.status, "steps": result.steps,
        "state": str(state.resolve()), "mlflow": where(result.run_id, state) if result.run_id else None,
        "wall_seconds": round(result.wall_seconds, 1),
        "eval_start": {k: round(v, 4) for k, v in result.start_eval.items()},
        "eval_final": {k: round(v, 4) for k, v in result.final_eval.items()},
        "warm_start_cache_hit": result.warm_start.get("cache_hit"),
    }
