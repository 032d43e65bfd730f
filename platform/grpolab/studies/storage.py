"""A study's Optuna storage: where it lives, how a study is created or loaded, and the facts stored
with it (seeds added on demand, the fixed sequential plan)."""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path

import optuna
from optuna.trial import TrialState

from grpolab.errors import ConfigError
from grpolab.signals import raise_if_signalled
from grpolab.studies.study_config import StudyConfig
from grpolab.studies.registration import definition_hash  # noqa: F401  (re-exported: tests, check_definition)
from grpolab.studies.storage_loss import (  # noqa: F401  (re-exported: the commands, coordinator and tests)
    RECONNECT_S, end_if_gone, give_up, outlasting_storage_loss, reconnect_patience, rides_out_restarts,
    share_storage_loss, storage_gone, storage_loss_ends_command, study_storage_reason)
from grpolab.tracking.stores import StoreRefused, StoreUnreachable, redact

log = logging.getLogger(__name__)
# Optuna's INFO lines ('Using an existing study ...', one per opening) repeat what grpolab prints
optuna.logging.set_verbosity(optuna.logging.WARNING)


def default_storage(state: Path) -> str:
    return f"journal:{Path(state).resolve() / 'optuna.journal'}"


def open_storage(url: str):
    """An Optuna storage from a URL: ``journal:/path`` or any SQLAlchemy URL. A journal is locked
    with ``JournalFileOpenLock`` (an O_EXCL lock file, which Optuna documents as safe on NFSv3 and
    later), so the same file serves local workers and Slurm jobs on a shared file system; every
    process opening a journal uses this one lock kind. A database storage outlives a restart of
    its server (``rides_out_restarts``); one that does not answer at all raises StoreUnreachable
    (exit 75: start it, run the same command again) for every command that opens it."""
    if url.startswith("journal:"):
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock
        path = url[len("journal:"):]
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        drop_partial_record(path)
        return JournalStorage(JournalFileBackend(path, lock_obj=JournalFileOpenLock(path)))
    try:
        storage = optuna.storages.RDBStorage(url, engine_kwargs={"pool_pre_ping": True})
    except Exception as exc:
        raise_if_signalled(exc)
        if url.startswith("sqlite:"):   # a file that is there: no restart changes a corrupt one or its schema
            raise StoreRefused(f"study storage {url}: not a usable Optuna storage ({_cause_line(exc)})") from None
        reason = study_storage_reason(url)
        if reason is None:
            raise
        raise StoreUnreachable(f"study storage {redact(url)}: unreachable ({reason}); once it answers (start it), "
                               "run the same command again") from None
    rides_out_restarts(storage.engine, url)
    return storage


def _cause_line(exc: BaseException) -> str:
    cause = getattr(exc, "orig", None) or exc.__cause__ or exc
    return (str(cause).strip().splitlines() or [type(cause).__name__])[0][:300]


def drop_partial_record(path: str) -> int:
    """Cut a journal's last record off when its writer was killed mid-append; returns the bytes cut.
    Optuna skips a partial last line on read but appends the next record right after it, merging
    both into one unreadable line (and every later read fails). Checked again under the journal's
    lock, which every writer holds while it appends: a partial tail seen there has no live writer,
    so the record never completed and no complete record is lost. The cut bytes are kept beside the
    journal (``<journal>.partial-<offset>``) and a warning names them."""
    from optuna.storages.journal import JournalFileOpenLock
    file = Path(path)
    if not file.is_file() or _ends_whole(file):
        return 0
    lock = JournalFileOpenLock(path)
    lock.acquire()
    try:
        if _ends_whole(file):
            return 0
        data = file.read_bytes()
        keep = data.rfind(b"\n") + 1
        Path(f"{path}.partial-{keep}").write_bytes(data[keep:])
        with open(file, "r+b") as f:
            f.truncate(keep)
            os.fsync(f.fileno())
    finally:
        lock.release()
    log.warning("study storage journal %s: its last record was cut short (a process killed while writing it); "
                "cut its %d bytes off (kept in %s.partial-%d), every complete record kept", path, len(data) - keep,
                path, keep)
    return len(data) - keep


def _ends_whole(file: Path) -> bool:
    """Empty, or its last byte ends a record."""
    with open(file, "rb") as f:
        f.seek(0, os.SEEK_END)
        if f.tell() == 0:
            return True
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


def create_or_load(cfg: StudyConfig, storage_url: str) -> optuna.Study:
    """The study, created on first use with its objectives' directions and names (optuna-dashboard
    and ``study.metric_names`` show the metric, not "Objective 0")."""
    directions = [o.direction for o in cfg.objectives]
    study = optuna.create_study(study_name=cfg.name, storage=open_storage(storage_url), load_if_exists=True,
                                directions=directions, sampler=cfg.study_kind.sampler(cfg),
                                pruner=cfg.study_kind.pruner(cfg))
    names = [o.metric for o in cfg.objectives]
    if study.metric_names != names:
        study.set_metric_names(names)
    return study


def load_existing(cfg: StudyConfig, storage_url: str) -> optuna.Study | None:
    """The study if its storage has it, else None: reading results never creates an empty study."""
    storage = open_storage(storage_url)
    if cfg.name not in {s.study_name for s in optuna.get_all_study_summaries(storage, include_best_trial=False)}:
        return None
    return optuna.load_study(study_name=cfg.name, storage=storage, sampler=cfg.study_kind.sampler(cfg))


def load_for_worker(cfg: StudyConfig, storage_url: str) -> optuna.Study:
    """A worker's study, which its coordinator created before starting it: only loaded here, so a
    worker on a node that does not see the coordinator's journal (a folder not shared) stops with
    a clear error instead of working on a new, empty journal of its own."""
    where = f"journal {storage_url[len('journal:'):]}" if storage_url.startswith("journal:") else "its storage"
    missing = ConfigError(f"study {cfg.name} is not in {where}"
                          + (" — is its folder on a file system every node mounts?" if where != "its storage" else
                             f" ({storage_url}); a worker only joins a study its coordinator created"))
    if storage_url.startswith("journal:") and not Path(storage_url[len("journal:"):]).is_file():
        raise missing   # (opening it would create it)
    storage = open_storage(storage_url)
    if cfg.name not in {s.study_name for s in optuna.get_all_study_summaries(storage, include_best_trial=False)}:
        raise missing
    return optuna.load_study(study_name=cfg.name, storage=storage,
                             sampler=cfg.study_kind.sampler(cfg), pruner=cfg.study_kind.pruner(cfg))


SEEDS_ADDED_ATTR = "grpolab_seeds_added"


SEED_RUNGS_ATTR = "grpolab_seed_rungs"


def with_added_seeds(cfg: StudyConfig, study: optuna.Study) -> StudyConfig:
    """The study's seeds: the file's, then those added on demand (``verdicts --until-decided``),
    which the Optuna study keeps, so every worker, table and verdict sees the same rows; an added
    seed that runs only some rungs carries them (``StudyConfig.seed_rungs``)."""
    added = tuple(s for s in study.user_attrs.get(SEEDS_ADDED_ATTR, []) if s not in cfg.seeds)
    if not added:
        return cfg
    rungs = {int(s): tuple(r) for s, r in study.user_attrs.get(SEED_RUNGS_ATTR, {}).items()}
    return dataclasses.replace(cfg, seeds=cfg.seeds + added, added_seeds=cfg.added_seeds + added,
                               seed_rungs={**cfg.seed_rungs, **rungs})


def add_seeds(cfg: StudyConfig, storage_url: str, count: int, rungs: tuple[int, ...] | None = None) -> StudyConfig:
    """Make the study's paired seeds at least ``count``: new seeds are max(seed) + 1, + 2, ... (a
    seed's rows, warm start and eval set depend on the seed only, so earlier rows stay valid).
    ``rungs``: the only rungs the new seeds run (the rows the undecided rungs' paired differences
    need); None: every rung."""
    study = create_or_load(cfg, storage_url)
    cfg = with_added_seeds(cfg, study)
    if len(cfg.seeds) >= count:
        return cfg
    new = tuple(range(max(cfg.seeds) + 1, max(cfg.seeds) + 1 + count - len(cfg.seeds)))
    if rungs is not None:   # written before the seeds, so no worker sees a new seed without its rungs
        study.set_user_attr(SEED_RUNGS_ATTR, {**study.user_attrs.get(SEED_RUNGS_ATTR, {}),
                                              **{str(s): sorted(rungs) for s in new}})
    study.set_user_attr(SEEDS_ADDED_ATTR, [*study.user_attrs.get(SEEDS_ADDED_ATTR, []), *new])
    only = {s: tuple(sorted(rungs)) for s in new} if rungs is not None else {}
    return dataclasses.replace(cfg, seeds=cfg.seeds + new, added_seeds=cfg.added_seeds + new,
                               seed_rungs={**cfg.seed_rungs, **only})


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


def record_stop(cfg: StudyConfig, storage_url: str, why: str) -> None:
    """Keep with the sequential plan why its looks ended (all decided, the cap, ``max_rows``), so
    every later table and dashboard says it, not the console alone."""
    study = create_or_load(cfg, storage_url)
    study.set_user_attr(SEQUENTIAL_ATTR, {**study.user_attrs[SEQUENTIAL_ATTR], "stopped": why})


def record_pause(cfg: StudyConfig, storage_url: str, why: str | None) -> None:
    """Keep with the sequential plan that a time limit paused its looks (``why``), or clear it
    (None) when a run of the command goes on: the tables then say the looks are not over."""
    study = create_or_load(cfg, storage_url)
    plan = study.user_attrs[SEQUENTIAL_ATTR]
    if plan.get("paused") != why:
        study.set_user_attr(SEQUENTIAL_ATTR, {k: v for k, v in {**plan, "paused": why}.items() if v is not None})


def verdict_plan(study: optuna.Study) -> tuple[float, int, int]:
    """(level, planned looks, rows complete before the plan) of a study's verdicts: (0.95, 1, 0)
    without a sequential plan."""
    plan = study.user_attrs.get(SEQUENTIAL_ATTR) or {}
    return float(plan.get("level", 0.95)), len(plan.get("looks", [0])), int(plan.get("rows_before", 0))


def plan_looks(study: optuna.Study) -> tuple[int, ...]:
    """The seed counts of a study's planned looks; () without a sequential plan."""
    return tuple((study.user_attrs.get(SEQUENTIAL_ATTR) or {}).get("looks", ()))


def sequential_note(study: optuna.Study) -> str:
    """What every verdict of a sequential study says about its plan."""
    plan = study.user_attrs.get(SEQUENTIAL_ATTR)
    if not plan:
        return ""
    note = (f"seeds added until decided: looks planned at {plan['looks']} seeds, each at "
            f"{100 * plan['level']:.4g} % (Bonferroni over the looks)")
    if plan.get("stopped"):
        note += f"; {plan['stopped']}"
    if plan.get("paused"):
        note += f"; {plan['paused']}"
    if plan.get("rows_before"):
        note += (f"; the plan began after {plan['rows_before']} rows were complete, so an earlier look at them "
                 "is not covered by its error bound")
    return note


def seed_param(cfg: StudyConfig, seed: int) -> str:
    """Optuna's categorical ``seed`` cannot grow its choices within a study, so a seed added on
    demand is the integer parameter ``added_seed`` (the row key carries the seed either way)."""
    return "added_seed" if seed in cfg.added_seeds else "seed"
