"""Optuna driver: ladders (cumulative ablations, every rung x seed exactly once) and searches.

Storage: a journal file in the state folder by default (safe for several local workers;
SQLite ran fixed rows twice under concurrency), or any RDB URL
(PostgreSQL for workers on many machines: same command, same ``--storage``).

Detail: docs/studies.md, "grpolab.studies.coordinator".
"""

from __future__ import annotations

import logging
import time
import warnings
from dataclasses import replace
from typing import NamedTuple
from pathlib import Path

import optuna
from optuna.trial import TrialState

from grpolab.errors import ConfigError
from grpolab.signals import raise_if_signalled, signals_raise
from grpolab.studies.definition import StudyConfig
from grpolab.studies.devices import placement_for
from grpolab.studies.hand_back import reap_logged, reap_stale_trials, watchdog
from grpolab.studies.launch_options import check_rows_fit, row_accelerate_config
from grpolab.studies.processes import release, run_workers, start_workers
from grpolab.studies.registration import (
    definition_hash,  # noqa: F401  (re-exported: tests, check_definition)
    register_ladder,
)
from grpolab.studies.resume import RESUMES_ATTR
from grpolab.studies.results_written import results_pending, write_results
from grpolab.studies.rows import (
    DEFINITION_ATTR,
    PARENT_RUN_ATTR,
    ROW_ATTR,
    RUN_ATTR,
    STUDY_PATH_ATTR,
    deciding_trial,
    format_progress,
    progress,
    row_key,
    row_trials,
    summary,
    trial_row_state,
)
from grpolab.studies.study_run import StudyRun
from grpolab.studies.storage import (create_or_load, default_storage, end_if_gone, outlasting_storage_loss,
                                     seed_param, share_storage_loss, storage_loss_ends_command, with_added_seeds)
from grpolab.studies.trials import worker_loop
from grpolab.tracking.recorder import RunRecorder, client_for
from grpolab.tracking.stores import StoreUnreachable, check_stores, init_tracking_store, setup_lock

log = logging.getLogger(__name__)
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)  # TPE's group=True


def enqueue_missing_rows(study: optuna.Study, cfg: StudyConfig, retry_failed: bool) -> list[str]:
    """Enqueue every ladder row that has no complete, running or waiting trial. A row is decided
    by its latest trial (as in rows.row_states): interrupted (Ctrl-C, SIGTERM, reaped
    after its worker died or hung) is always re-queued, failed with an error only when
    ``retry_failed``; so an interrupted ``--retry-failed`` retry is re-queued like any other
    interruption. Call under the setup lock (stores.setup_lock): two coordinators enqueueing at
    once would queue a row twice. Returns the rows left failed."""
    by_row = row_trials(study)
    left_failed = []
    for rung, seed in cfg.rows():
        key = row_key(rung, seed)
        trials = by_row.get(key, [])
        state = trial_row_state(deciding_trial(trials))
        if state in ("COMPLETE", "RUNNING", "WAITING"):
            continue
        if state == "FAIL" and not retry_failed:
            left_failed.append(key)
            continue
        attrs = {ROW_ATTR: key}
        previous = [t.user_attrs[RUN_ATTR] for t in trials if RUN_ATTR in t.user_attrs]
        if previous:   # the row restarts (or, with a checkpoint, resumes) its latest run
            attrs[RESUMES_ATTR] = previous[-1]
        study.enqueue_trial({"rung": rung, seed_param(cfg, seed): seed}, user_attrs=attrs)
    return left_failed


def check_definition(study: optuna.Study, cfg: StudyConfig, accept_changed: bool) -> None:
    """A study keeps its rows across runs of the command; mixing rows made under another
    definition (budget, rungs, seeds) into one table would be silent, so it is refused."""
    stored, current = study.user_attrs.get(DEFINITION_ATTR), definition_hash(cfg)
    if stored is not None and stored != current and not accept_changed:
        raise ConfigError(f"study {cfg.name!r} already holds rows made from a different definition of {cfg.path}; "
                          "give the study a new name, or pass --accept-changed to keep the old rows and go on")
    study.set_user_attr(DEFINITION_ATTR, current)


def ensure_parent_run(study: optuna.Study, cfg: StudyConfig, state: Path, reopen: bool = True) -> str:
    parent = study.user_attrs.get(PARENT_RUN_ATTR)
    if parent:  # resuming: the parent is live again until the rows are done
        if reopen:
            client_for(state).update_run(parent, status="RUNNING")
        return parent
    experiment = (cfg.base.get("tracking") or {}).get("experiment", "grpolab")
    recorder = RunRecorder(state, experiment, cfg.name, {"grpolab.study": cfg.name, "grpolab.study_kind": cfg.kind},
                           {"study": {"path": cfg.path, "kind": cfg.kind, "seeds": list(cfg.seeds)}})
    recorder.log_text(Path(cfg.path).read_text(), "study.yaml")
    study.set_user_attr(PARENT_RUN_ATTR, recorder.run_id)
    study.set_user_attr(STUDY_PATH_ATTR, cfg.path)
    return recorder.run_id


class Workers(NamedTuple):
    """Where a run's rows run: ``count`` workers; ``in_process``: this process runs them (one
    worker, no devices, no launcher); else ``procs``, the released worker processes (none when
    nothing is pending or a launcher runs them)."""
    count: int
    in_process: bool
    procs: list


def run_study(run: StudyRun) -> int:
    """Coordinator: validate, check the stores, then (under the setup lock, so that several
    coordinators starting together do it once) create the stores, the study and its parent run,
    hand back the rows of dead workers and queue the missing rows; run workers, show live
    progress, wait for rows other coordinators still run. Returns the exit code: 0 when every
    row is done, 1 when a row failed or did not complete.

    ``run.gpus_per_row`` K (devices.py): every worker is a process owning K devices of the pool
    (``run.devices``, else the study file's ``devices:``, else CUDA_VISIBLE_DEVICES or every CUDA
    device), ``run.workers`` of them (default: pool // K); a row runs as K processes when K > 1,
    through ``accelerate launch`` with ``run.accelerate_config`` (else the study file's
    launcher.accelerate_config) when one is given. ``run.launcher`` (slurm.SlurmLauncher): the
    workers run as cluster jobs submitted once the rows are queued, instead of processes on this
    machine."""
    cfg, state, echo, launcher = run.study, run.state, run.echo, run.launcher
    placement, workers, accelerate = _where_rows_run(run)
    cfg.study_kind.check(cfg, echo)   # before anything runs
    storage_url = run.storage_url or default_storage(state)
    tracking = check_stores(state, storage_url)          # fail fast: nothing is written before this
    Path(state).mkdir(parents=True, exist_ok=True)
    share_storage_loss(storage_url, state, fresh=True)   # it answered: a loss an earlier command recorded is over
    in_process = workers <= 1 and placement is None and launcher is None
    procs = [] if in_process or launcher else start_workers(   # they import meanwhile
        cfg.path, storage_url, state, workers, placement and placement.device_sets,
        placement.per_row if placement else 1, accelerate)
    run = replace(run, storage_url=storage_url, workers=workers)
    try:
        with signals_raise():
            with setup_lock(state, tracking, storage_url):
                init_tracking_store(state)
                study = create_or_load(cfg, storage_url)
                check_definition(study, cfg, run.accept_changed)
                if cfg.study_kind.paired_rungs:   # before any row of this run: the file's verdict fields as they stand
                    register_ladder(state, cfg, study)
                cfg = with_added_seeds(cfg, study)
                for reason in reap_stale_trials(study, state, row_timeout=cfg.row_timeout_s).values():
                    echo(reason)
                if cfg.study_kind.queued_rows:
                    enqueue_missing_rows(study, cfg, run.retry_failed)
                pending = has_pending_rows(study, cfg)
                parent = ensure_parent_run(study, cfg, state, reopen=pending)
            raise_if_signalled()   # deferred inside the set-up's store calls: no worker is told to go
            release(procs, go=pending, limit=run.time_limit)   # the limit rides on the go word
            return _coordinate(study, cfg, run, Workers(workers, in_process, procs if pending else []), parent,
                               pending, lambda: setup_lock(state, tracking, storage_url))
    finally:
        release(procs, go=False)   # set-up failed or was interrupted: workers never told to go are killed


def _where_rows_run(run: StudyRun) -> tuple:
    """(device placement or None, worker count, accelerate config or None), every refusal (storage,
    flags, rows that do not fit) made before anything is written or submitted."""
    cfg, launcher, placement = run.study, run.launcher, None
    if launcher is not None:
        launcher.check(cfg, run.storage_url, run.workers, run.devices)
    else:
        placement = placement_for(cfg.devices, run.gpus_per_row, run.devices, run.workers)
    per_row = placement.per_row if placement else launcher.gpus_per_row if launcher else run.gpus_per_row
    accelerate = row_accelerate_config(run.accelerate_config, cfg.launcher, per_row)
    if accelerate:
        check_rows_fit(accelerate, cfg,
                       "--accelerate-config" if run.accelerate_config else "launcher.accelerate_config")
    if launcher is not None:
        launcher.accelerate_config = accelerate
    workers = placement.workers if placement else launcher.jobs if launcher else (run.workers or 1)
    if placement is not None:
        run.echo(placement.describe() + (f"; launched by accelerate with {accelerate}" if accelerate else ""))
    if launcher is None and cfg.launcher.slurm:
        run.echo("launcher.slurm: not used (the workers run on this machine; --launcher slurm submits them with it)")
    return placement, workers, accelerate


TICK_FAILURES = 5   # consecutive unreadable-store ticks (2 s apart) before the coordinator gives up


def _ticker(study, cfg: StudyConfig, state: Path, workers: int, echo, storage_url: str):
    """The coordinator's periodic check: end the command at once when a worker gave the storage up
    (storage.share_storage_loss: waiting for it too would only add the reconnect patience), hand
    back rows of dead or hung workers, print progress when rows change state (not every poll), and
    raise a pending Ctrl-C/SIGTERM that a library swallowed or turned into another error while the
    check waited on the store (reap_logged logs store errors and goes on; a failed progress read is
    reported and raised only at TICK_FAILURES in a row). A storage found gone is given up before
    the tick raises, so workers stopped on the way out learn it at once. Called between rows and
    every 2 s while workers run, always in the main thread."""
    started, last = time.time(), {"failures": 0}

    def tick():
        with storage_loss_ends_command(storage_url):
            check()

    def check():
        end_if_gone(storage_url)
        try:
            reap_logged(study, state, cfg.row_timeout_s, echo)
            p = progress(study, cfg, started, workers)
        except Exception as exc:   # Optuna's journal lock re-raises an interrupted wait as RuntimeError
            raise_if_signalled(exc)
            end_if_gone(storage_url)
            # a store hiccup (a PostgreSQL restart) must not stop every worker mid-row: the watch
            # gives up, stopping them, only when the store stays unreadable for TICK_FAILURES ticks
            last["failures"] += 1
            if last["failures"] >= TICK_FAILURES:
                raise
            echo(f"progress: store read failed ({type(exc).__name__}: {exc}); "
                 f"workers go on ({last['failures']}/{TICK_FAILURES} failures in a row)")
            return
        last["failures"] = 0
        key = (p["done"], p["running"], p["failed"], p["interrupted"])
        if last.get("key") != key and p["done"] < p["total"]:   # the finished study's line is printed once, at the end
            last["key"] = key
            echo(format_progress(p))
        raise_if_signalled()
    return tick


def _coordinate(study, cfg: StudyConfig, run: StudyRun, workers: Workers, parent: str, pending: bool,
                locked) -> int:
    """Run the rows (in this process when ``workers.in_process``; else in the released worker
    processes ``workers.procs``, or in ``run.launcher``'s cluster jobs), wait for other
    coordinators' rows, then close the parent run. ``locked()`` is the setup lock: the parent's
    tables, tags and status are written under it, because coordinators that finish together would
    otherwise insert the same new tag at once (a duplicate key: the PostgreSQL round of the
    three-coordinator test lost a coordinator to it)."""
    state, storage_url, echo, launcher, publish = run.state, run.storage_url, run.echo, run.launcher, run.publish
    started, tick = time.time(), _ticker(study, cfg, state, workers.count, echo, storage_url)
    worker_failed = False   # a worker that exited non-zero: rows it left are no time-limit pause
    try:
        with storage_loss_ends_command(storage_url):
            if launcher is not None:
                if pending:   # rows handed back by a job Slurm ended are queued again (once: under the lock) meanwhile
                    launcher.run(study, cfg, storage_url, state, tick, echo,
                                 requeue=lambda: _requeue(study, cfg, locked))
            elif workers.in_process:
                # the inner one ends first: a storage found gone stops the watchdog's wait for it before the join
                with watchdog(study, state, cfg.row_timeout_s, echo):
                    # the file's definition, as a worker process reads it (it adds the storage's seeds itself)
                    outlasting_storage_loss(storage_url, lambda: worker_loop(run.study, storage_url, state, tick,
                                                                                      limit=run.time_limit))
            else:
                for line in run_workers(workers.procs, tick):
                    echo(line)
                    worker_failed = True
            while study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
                tick()   # rows run by other coordinators' workers: wait until they end or are handed back
                time.sleep(2)
    except BaseException as exc:
        if pending:
            try:   # not under the lock: an interrupted coordinator must never wait on it
                final = None if isinstance(exc, StoreUnreachable) else progress(study, cfg, started, workers.count)
                _close_parent(state, parent, final, interrupted=True)
            except Exception as error:  # noqa: BLE001 - the interruption is what is reported
                log.warning("could not close the study's parent run: %s", error)
        raise
    with locked():
        final = progress(study, cfg, started, workers.count)
        written = True
        # a finished study run again keeps its parent run (and its end time) as it was, and writes
        # its end results again only when their last write did not finish
        if publish is not None and (pending or results_pending(state, parent)):
            written = write_results(publish, state, parent, cfg.path, storage_url, echo)
        if pending:
            _close_parent(state, parent, final)
    echo(format_progress(final))
    code = summary(study, cfg, final, echo, None if worker_failed else run.time_limit)
    return code if written else max(code, 1)


def _requeue(study, cfg: StudyConfig, locked) -> None:
    """Queue again the ladder rows handed back while the study runs (a cluster job ended under
    them): under the setup lock, and only rows with no complete, running or waiting trial, so a
    row is queued once however many coordinators do this."""
    if cfg.study_kind.queued_rows:
        with locked():
            enqueue_missing_rows(study, cfg, retry_failed=False)


def has_pending_rows(study: optuna.Study, cfg: StudyConfig) -> bool:
    """Whether a worker would run anything: a waiting ladder row, or a search short of n_trials."""
    return cfg.study_kind.pending(study, cfg)


def _close_parent(state: Path, parent_run_id: str, final: dict | None, interrupted: bool = False) -> None:
    """End the study's parent run; ``final``: the rows' progress, None when the study storage
    went away (the parent is still ended KILLED, without its rows count)."""
    client = client_for(state)
    status = "KILLED" if interrupted or final is None else ("FAILED" if final["failed"] else (
        "FINISHED" if final["done"] >= final["total"] else "KILLED"))
    if final is not None:
        client.set_tag(parent_run_id, "grpolab.rows_done", f"{final['done']}/{final['total']}")
    client.set_terminated(parent_run_id, status=status)
