"""``grpolab study-worker FILE --storage URL`` (internal): one worker process of ``grpolab study``."""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass

from grpolab.commands import shared


@dataclass(frozen=True)
class WorkerOptions:
    path: str
    storage: str
    state: str | None
    wait_for_go: bool
    procs_per_row: int
    accelerate_config: str | None


def add(sub) -> None:
    worker = sub.add_parser("study-worker")   # internal: no help=, so left out of the listing
    worker.add_argument("study")
    shared.storage_flag(worker, required=True)
    worker.add_argument("--wait-for-go", action="store_true", help=argparse.SUPPRESS)
    worker.add_argument("--procs-per-row", type=int, default=1, help=argparse.SUPPRESS)   # --gpus-per-row K
    worker.add_argument("--accelerate-config", default=None, help=argparse.SUPPRESS)     # checked by the coordinator
    worker.set_defaults(parse=parse, execute=execute)


def parse(args) -> WorkerOptions:
    # the study file is read by execute, after the go: a worker started before its coordinator's
    # set-up must not answer a file the coordinator is about to refuse
    return WorkerOptions(args.study, args.storage, args.state, args.wait_for_go, args.procs_per_row,
                         args.accelerate_config)


def execute(options: WorkerOptions) -> int:
    from grpolab.studies.time_limit import TimeLimit
    from grpolab.studies.worker_exit import exit_now
    limit = None
    if options.wait_for_go:   # started by a coordinator before its set-up (studies/processes.py)
        from grpolab.studies.processes import wait_for_go
        try:
            word = wait_for_go(preload=options.procs_per_row == 1)
            if word is None:
                exit_now(0)   # not needed (nothing to run, or the set-up failed): nothing was touched
            limit = TimeLimit.parse(word)   # the coordinator's time limit, for its own workers only
        except KeyboardInterrupt:   # Ctrl-C reached the whole process group during the set-up
            exit_now(130)
    from grpolab.state import state_dir
    from grpolab.studies.coordinator import worker_loop
    from grpolab.studies.definition import load_study
    from grpolab.studies.storage import outlasting_storage_loss, share_storage_loss
    from grpolab.tracking.stores import EX_TEMPFAIL, StoreUnreachable
    state = state_dir(options.state)
    share_storage_loss(options.storage, state)
    try:
        outlasting_storage_loss(options.storage, lambda: worker_loop(
            load_study(options.path), options.storage, state, procs_per_row=options.procs_per_row,
            accelerate_config=options.accelerate_config, limit=limit))
    except StoreUnreachable as exc:   # its coordinator ends the command in the one error line for all its workers
        logging.getLogger(__name__).warning("this worker stops: %s", exc)
        exit_now(EX_TEMPFAIL)
    exit_now(0)   # every row is reported and every run closed: skip ~2 CPU-s of interpreter teardown
    return 0
