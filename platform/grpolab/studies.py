"""Optuna driver: ladders (cumulative ablations, every rung x seed exactly once) and searches.

Storage: a journal file in the state folder by default (safe for several local workers;
SQLite ran fixed rows twice under concurrency, TRACKING_NOTES.md), or any RDB URL
(PostgreSQL for workers on many machines: same command, same ``--storage``).

Exactly-once ladder rows: the coordinator enqueues each missing (rung, seed) row once; workers
pop enqueued trials through ``study.ask()``, which claims a WAITING trial atomically in the
storage. A worker that finds no waiting row stops. Interrupted rows (Ctrl-C, SIGTERM, or a
worker that died: its trial is reaped, lifecycle.py) are re-queued when the command is run
again; rows that failed with an error only with ``--retry-failed``; a failed or unfinished row
is never skipped silently (the command exits 1 and lists it).

Several coordinators (on one machine or many) may run the same study at once: store creation,
the parent run and enqueueing happen under the setup lock (stores.py), and each coordinator
waits for the rows the others still run before it reports.

MLflow: one parent run per study; each trial's run is its child, with the trial number as a
tag, and the run id stored on the trial (``mlflow_run_id``): linked both ways.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
import warnings
from pathlib import Path

import optuna
from optuna.trial import TrialState

from .errors import ConfigError
from .lifecycle import RESUMES_ATTR, reap_logged, reap_stale_trials, signals_raise, watchdog
from .preregistration import definition_hash  # noqa: F401  (re-exported: tests, check_definition)
from .study_config import StudyConfig, load_study
from .study_progress import (OUTCOME_ATTR, ROW_ATTR, RUN_ATTR, format_progress, progress, row_key,  # noqa: F401
                             row_states, summary)
from .tracking import RunRecorder
from .study_trials import worker_loop
from .tracking_signals import raise_if_signalled

log = logging.getLogger(__name__)
optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)  # TPE's group=True


def default_storage(state: Path) -> str:
    return f"journal:{Path(state).resolve() / 'optuna.journal'}"


def open_storage(url: str):
    """An Optuna storage from a URL: ``journal:/path`` or any SQLAlchemy URL."""
    if url.startswith("journal:"):
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend
        path = url[len("journal:"):]
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        return JournalStorage(JournalFileBackend(path))
    return optuna.storages.RDBStorage(url)


def _sampler(cfg: StudyConfig):
    name, seed = cfg.sampler.get("name", "tpe"), cfg.sampler.get("seed", 0)
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed)
    raise ConfigError(f"sampler.name: unknown sampler {name!r}; valid: tpe, random, nsga2")


def _pruner(cfg: StudyConfig):
    if not cfg.pruner:
        return optuna.pruners.NopPruner()
    kw = {k: v for k, v in cfg.pruner.items() if k != "name"}
    if cfg.pruner.get("name", "median") != "median":
        raise ConfigError(f"pruner.name: unknown pruner {cfg.pruner.get('name')!r}; valid: median")
    return optuna.pruners.MedianPruner(**kw)


def create_or_load(cfg: StudyConfig, storage_url: str) -> optuna.Study:
    directions = [o.direction for o in cfg.objectives]
    return optuna.create_study(study_name=cfg.name, storage=open_storage(storage_url), load_if_exists=True,
                               directions=directions, sampler=_sampler(cfg) if cfg.kind == "search" else None,
                               pruner=_pruner(cfg) if cfg.kind == "search" else None)


SEEDS_ADDED_ATTR = "grpolab_seeds_added"


def with_added_seeds(cfg: StudyConfig, study: optuna.Study) -> StudyConfig:
    """The study's seeds: the file's, then those added on demand (``verdicts --until-decided``),
    which the Optuna study keeps, so every worker, table and verdict sees the same rows."""
    added = tuple(s for s in study.user_attrs.get(SEEDS_ADDED_ATTR, []) if s not in cfg.seeds)
    return dataclasses.replace(cfg, seeds=cfg.seeds + added, added_seeds=cfg.added_seeds + added) if added else cfg


def add_seeds(cfg: StudyConfig, storage_url: str, count: int) -> StudyConfig:
    """Make the study's paired seeds at least ``count``: new seeds are max(seed) + 1, + 2, ... (a
    seed's rows, warm start and eval set depend on the seed only, so earlier rows stay valid)."""
    study = create_or_load(cfg, storage_url)
    cfg = with_added_seeds(cfg, study)
    if len(cfg.seeds) >= count:
        return cfg
    new = tuple(range(max(cfg.seeds) + 1, max(cfg.seeds) + 1 + count - len(cfg.seeds)))
    study.set_user_attr(SEEDS_ADDED_ATTR, [*study.user_attrs.get(SEEDS_ADDED_ATTR, []), *new])
    return dataclasses.replace(cfg, seeds=cfg.seeds + new, added_seeds=cfg.added_seeds + new)


SEQUENTIAL_ATTR = "grpolab_sequential"


def record_sequential(cfg: StudyConfig, storage_url: str, looks: list[int], level: float) -> None:
    """Keep a study's sequential plan (planned looks, per-look level, rows complete before it) with
    the study, so every later table, dashboard and verdict states the same level. A plan is fixed:
    another plan on the same study would restart the looks and spend the error rate twice."""
    study = create_or_load(cfg, storage_url)
    plan = study.user_attrs.get(SEQUENTIAL_ATTR)
    if plan is not None and plan["looks"] != list(looks):
        raise ConfigError(f"study {cfg.name!r} already follows the sequential plan of looks at {plan['looks']} seeds "
                          f"(level {100 * plan['level']:.4g} % each): continue it with the same --max-seeds and "
                          "--batch (a second plan on the same seeds would spend the error rate twice)")
    if plan is None:
        done = sum(t.state == TrialState.COMPLETE for t in study.get_trials(deepcopy=False))
        study.set_user_attr(SEQUENTIAL_ATTR, {"looks": list(looks), "level": level, "rows_before": done})


def verdict_plan(study: optuna.Study) -> tuple[float, int, int]:
    """(level, planned looks, rows complete before the plan) of a study's verdicts: (0.95, 1, 0)
    without a sequential plan."""
    plan = study.user_attrs.get(SEQUENTIAL_ATTR) or {}
    return float(plan.get("level", 0.95)), len(plan.get("looks", [0])), int(plan.get("rows_before", 0))


def sequential_note(study: optuna.Study) -> str:
    """What every verdict of a sequential study says about its plan."""
    plan = study.user_attrs.get(SEQUENTIAL_ATTR)
    if not plan:
        return ""
    note = (f"seeds added until decided: looks planned at {plan['looks']} seeds, each at "
            f"{100 * plan['level']:.4g} % (Bonferroni over the looks)")
    if plan.get("rows_before"):
        note += (f"; the plan began after {plan['rows_before']} rows were complete, so an earlier look at them "
                 "is not covered by its error bound")
    return note


def seed_param(cfg: StudyConfig, seed: int) -> str:
    """Optuna's categorical ``seed`` cannot grow its choices within a study, so a seed added on
    demand is the integer parameter ``added_seed`` (the row key carries the seed either way)."""
    return "added_seed" if seed in cfg.added_seeds else "seed"


def enqueue_missing_rows(study: optuna.Study, cfg: StudyConfig, retry_failed: bool) -> list[str]:
    """Enqueue every ladder row that has no complete, running or waiting trial. A row is decided
    by its latest trial (as in study_progress.row_states): interrupted (Ctrl-C, SIGTERM, reaped
    after its worker died or hung) is always re-queued, failed with an error only when
    ``retry_failed``; so an interrupted ``--retry-failed`` retry is re-queued like any other
    interruption. Call under the setup lock (stores.setup_lock): two coordinators enqueueing at
    once would queue a row twice. Returns the rows left failed."""
    by_row: dict[str, list] = {}
    for t in study.get_trials(deepcopy=False):
        if ROW_ATTR in t.user_attrs:
            by_row.setdefault(t.user_attrs[ROW_ATTR], []).append(t)
    left_failed = []
    for rung, seed in cfg.rows():
        key = row_key(rung, seed)
        trials = by_row.get(key, [])
        if any(t.state in (TrialState.COMPLETE, TrialState.RUNNING, TrialState.WAITING) for t in trials):
            continue
        # a FAIL without an outcome was reaped (its worker died or hung): interrupted, like Ctrl-C
        latest = max(trials, key=lambda t: t.number) if trials else None
        failed = (latest is not None and latest.state == TrialState.FAIL
                  and latest.user_attrs.get(OUTCOME_ATTR) == "error")
        if failed and not retry_failed:
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
    stored, current = study.user_attrs.get("definition_hash"), definition_hash(cfg)
    if stored is not None and stored != current and not accept_changed:
        raise ConfigError(f"study {cfg.name!r} already holds rows made from a different definition of {cfg.path}; "
                          "give the study a new name, or pass --accept-changed to keep the old rows and go on")
    study.set_user_attr("definition_hash", current)


def ensure_parent_run(study: optuna.Study, cfg: StudyConfig, state: Path, reopen: bool = True) -> str:
    parent = study.user_attrs.get("mlflow_parent_run_id")
    if parent:  # resuming: the parent is live again until the rows are done
        if reopen:
            from .tracking import client_for
            client_for(state).update_run(parent, status="RUNNING")
        return parent
    experiment = (cfg.base.get("tracking") or {}).get("experiment", "grpolab")
    recorder = RunRecorder(state, experiment, cfg.name, {"grpolab.study": cfg.name, "grpolab.study_kind": cfg.kind},
                           {"study": {"path": cfg.path, "kind": cfg.kind, "seeds": list(cfg.seeds)}})
    recorder.log_text(Path(cfg.path).read_text(), "study.yaml")
    study.set_user_attr("mlflow_parent_run_id", recorder.run_id)
    study.set_user_attr("study_path", cfg.path)
    return recorder.run_id


def run_study(path: str, state: Path, storage_url: str | None, workers: int, retry_failed: bool,
              echo=print, accept_changed: bool = False) -> int:
    """Coordinator: validate, check the stores, then (under the setup lock, so that several
    coordinators starting together do it once) create the stores, the study and its parent run,
    hand back the rows of dead workers and queue the missing rows; run workers, show live
    progress, wait for rows other coordinators still run. Returns the exit code: 0 when every
    row is done, 1 when a row failed or did not complete."""
    from .stores import check_stores, init_tracking_store, setup_lock
    cfg = load_study(path)
    if cfg.kind == "ladder":   # before anything runs: rungs that cannot act, rungs that repeat another
        from .regime import ladder_notes
        notes = ladder_notes(cfg)
        echo("ladder check: " + ("every rung's change can act in its regime and no two rungs are identical"
                                 if not notes else f"{len(notes)} finding(s)"))
        for note in notes:
            echo(f"  ! {note}")
    storage_url = storage_url or default_storage(state)
    tracking = check_stores(state, storage_url)          # fail fast: nothing is written before this
    Path(state).mkdir(parents=True, exist_ok=True)
    from .worker_procs import release, start_workers
    procs = start_workers(path, storage_url, state, workers) if workers > 1 else []   # they import meanwhile
    try:
        with signals_raise():
            with setup_lock(state, tracking, storage_url):
                init_tracking_store(state)
                study = create_or_load(cfg, storage_url)
                check_definition(study, cfg, accept_changed)
                cfg = with_added_seeds(cfg, study)
                if cfg.kind == "ladder":   # before any row of this run: the file's verdict fields as they stand
                    from .preregistration import register_ladder
                    register_ladder(state, load_study(path), study)
                for reason in reap_stale_trials(study, state, row_timeout=cfg.row_timeout_s).values():
                    echo(reason)
                if cfg.kind == "ladder":
                    enqueue_missing_rows(study, cfg, retry_failed)
                pending = has_pending_rows(study, cfg)
                parent = ensure_parent_run(study, cfg, state, reopen=pending)
            release(procs, go=pending)
            return _coordinate(study, cfg, state, storage_url, procs if pending else [], workers, parent, pending,
                               echo, lambda: setup_lock(state, tracking, storage_url))
    finally:
        release(procs, go=False)   # set-up failed or was interrupted: workers never told to go are killed


TICK_FAILURES = 5   # consecutive unreadable-store ticks (2 s apart) before the coordinator gives up


def _ticker(study, cfg: StudyConfig, state: Path, workers: int, echo):
    """The coordinator's periodic check: hand back rows of dead or hung workers, print progress when
    rows change state (not every poll), and raise a pending Ctrl-C/SIGTERM that a library swallowed
    or turned into another error while the check waited on the store (reap_logged logs store errors
    and goes on; a failed progress read is reported and raised only at TICK_FAILURES in a row).
    Called between rows and every 2 s while workers run, always in the main thread."""
    started, last = time.time(), {"failures": 0}

    def tick():
        try:
            reap_logged(study, state, cfg.row_timeout_s, echo)
            p = progress(study, cfg, started, workers)
        except Exception as exc:   # Optuna's journal lock re-raises an interrupted wait as RuntimeError
            raise_if_signalled(exc)
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
        if last.get("key") != key:
            last["key"] = key
            echo(format_progress(p))
        raise_if_signalled()
    return tick


def _coordinate(study, cfg: StudyConfig, state: Path, storage_url: str, procs: list, workers: int, parent: str,
                pending: bool, echo, locked) -> int:
    """Run the rows (in this process when ``workers`` is 1, else in the released worker
    processes ``procs``), wait for other coordinators' rows, then close the parent run. ``locked()``
    is the setup lock: the parent's tables, tags and status are written under it, because
    coordinators that finish together would otherwise insert the same new tag at once (a
    duplicate key: the PostgreSQL round of the three-coordinator test lost a coordinator to it)."""
    started, tick = time.time(), _ticker(study, cfg, state, workers, echo)
    try:
        if workers <= 1:
            with watchdog(study, state, cfg.row_timeout_s, echo):   # this process runs rows: check them from a thread
                worker_loop(cfg, storage_url, state, tick)
        else:
            from .worker_procs import run_workers
            for line in run_workers(procs, tick):
                echo(line)
        while study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            tick()   # rows run by other coordinators' workers: wait until they end or are handed back
            time.sleep(2)
    except BaseException:
        if pending:
            try:   # not under the lock: an interrupted coordinator must never wait on it
                _close_parent(state, parent, progress(study, cfg, started, workers), interrupted=True)
            except Exception as exc:  # noqa: BLE001 - the interruption is what is reported
                log.warning("could not close the study's parent run: %s", exc)
        raise
    with locked():
        final = progress(study, cfg, started, workers)
        if pending:  # a finished study run again keeps its parent run (and its end time) as it was
            from .reports import record_study_tables
            record_study_tables(state, parent, cfg.path, storage_url)
            _close_parent(state, parent, final)
    echo(format_progress(final))
    return summary(study, cfg, final, echo)


def has_pending_rows(study: optuna.Study, cfg: StudyConfig) -> bool:
    """Whether a worker would run anything: a waiting ladder row, or a search short of n_trials."""
    if cfg.kind == "ladder":
        return bool(study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))
    finished = [t for t in study.get_trials(deepcopy=False) if t.state != TrialState.FAIL or
                t.user_attrs.get(OUTCOME_ATTR) == "error"]
    return len(finished) < cfg.n_trials


def _close_parent(state: Path, parent_run_id: str, final: dict, interrupted: bool = False) -> None:
    from .tracking import client_for
    client = client_for(state)
    status = "KILLED" if interrupted else ("FAILED" if final["failed"] else (
        "FINISHED" if final["done"] >= final["total"] else "KILLED"))
    client.set_tag(parent_run_id, "grpolab.rows_done", f"{final['done']}/{final['total']}")
    client.set_terminated(parent_run_id, status=status)
