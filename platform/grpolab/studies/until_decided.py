"""Seeds on demand for a ladder, the driver: run the ladder, then add paired seeds in batches
until every judged rung is decided or the plan's cap is reached. Which looks to plan, at what
level, and whether a rung is decided are the caller's ``LookDecider`` (analysis/until_decided.py
is the ladder's): this floor runs rows and never judges them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import NamedTuple, Protocol

from grpolab.errors import ConfigError
from grpolab.studies.definition import SeedsOnDemand, StudyConfig, load_study
from grpolab.studies.registration import definition_hash
from grpolab.studies.study_run import StudyRun
from grpolab.tracking.stores import init_tracking_store


class Look(NamedTuple):
    """One look's judgement: ``rows`` the study holds, ``labels`` of the judged rungs (printed),
    ``open_rungs`` (1-based) the rungs not yet decided."""
    rows: int
    labels: list[str]
    open_rungs: list[int]


class LookDecider(Protocol):
    def plan(self, cfg: StudyConfig, max_seeds: int, batch: int) -> tuple[list[int], float]:
        """(planned looks' seed counts, per-look confidence level), or a ConfigError saying why not."""

    def judge(self, run: StudyRun, n: int, level: float, looks: list[int]) -> Look:
        """Look at the first ``n`` seeds of the study's rows at ``level``."""


def run_until_decided(run: StudyRun, on_demand: SeedsOnDemand, decider: LookDecider) -> int:
    """``grpolab study LADDER --until-decided --max-seeds N``: run the ladder, then add
    ``on_demand.batch`` paired seeds at a time until every judged rung stops or ``on_demand.cap``
    seeds ran. Each planned look is judged at the decider's per-look level, which the study keeps
    (``record_sequential``), so its table and dashboard state the same level. The seeds of a later
    look run only the rungs undecided rungs need (``rows_needed``); a look whose rows would take
    the study past ``on_demand.max_rows`` is not started (fewer looks than planned stay valid,
    conservatively); why the looks ended is kept with the plan (``record_stop``), before the last
    look's tables and dashboard are published (``run.publish``), so they say it. A time limit
    (``run.time_limit``, studies/time_limit.py) that leaves a look's rows waiting pauses the looks
    there, recorded the same way and cleared by the next run, which goes on from the rows kept.
    Returns run_study's exit code."""
    from grpolab.studies.coordinator import run_study
    from grpolab.studies.storage import add_seeds, default_storage, record_pause, record_sequential
    cfg, echo = run.study, run.echo
    looks, level = decider.plan(cfg, on_demand.cap, on_demand.batch)
    storage = run.storage_url or default_storage(run.state)
    Path(run.state).mkdir(parents=True, exist_ok=True)
    init_tracking_store(run.state)
    record_sequential(cfg, storage, looks, level)
    needed, held = None, _HeldPublish(run.publish)
    try:
        for j, n in enumerate(looks, 1):
            _refuse_if_edited(cfg, j)
            add_seeds(cfg, storage, n, needed)
            code = run_study(replace(run, publish=held.hold if run.publish else None))
            if code or _paused(run, storage, looks):
                return code   # a pause recorded by an earlier run stays until a run gets past it
            record_pause(cfg, storage, None)
            look = decider.judge(run, n, level, looks)
            echo(f"look {j}/{len(looks)} at {n} seeds (per-look level {100 * level:.4g} %): " + ", ".join(look.labels))
            stopped = _why_stop(look, j, looks, n, on_demand.max_rows)
            if stopped:
                _record_stop(cfg, storage, f"stopped after look {j}/{len(looks)} at {n} seeds: {stopped}", echo)
                return code
            needed = rows_needed(look.open_rungs)
            held.flush()
            echo(f"look {j + 1}/{len(looks)} runs rungs {', '.join(str(r) for r in needed)} "
                 f"(the paired differences of undecided rungs {', '.join(str(r) for r in look.open_rungs)})")
        return code
    finally:
        held.flush()


def _refuse_if_edited(cfg: StudyConfig, look: int) -> None:
    """The looks run on the study as it was read when they started (the coordinator keeps that
    definition; worker processes read the file afresh): a file edited while they run would mix two
    definitions in one table, so the next look is refused before any of its rows is queued."""
    if definition_hash(load_study(cfg.path)) != definition_hash(cfg):
        raise ConfigError(f"{cfg.path}: the study file changed while --until-decided ran its looks; look {look} "
                          "is not started, and the rows of the looks before it are kept: restore the file and run "
                          "the command again to continue the looks, or run it with --accept-changed to go on under "
                          "the edited definition with those rows (an edit of the seeds-on-demand plan needs a new "
                          "study name)")


def _paused(run: StudyRun, storage: str, looks: list[int]) -> bool:
    """Whether the command's time limit paused the looks: its run ended well (exit 0) with rows still
    waiting, which its workers, past the limit, did not claim. Recorded with the plan, so the tables
    say it, and named by the latest look the study holds seeds for (a later run of the command goes
    through the complete looks again before it reaches the paused one). Decided by time alone."""
    from grpolab.studies.rows import waiting_rows
    from grpolab.studies.storage import create_or_load, record_pause, with_added_seeds
    study = create_or_load(run.study, storage)
    if run.time_limit is None or not waiting_rows(study):
        return False
    n = len(with_added_seeds(run.study, study).seeds)
    where = f"during look {looks.index(n) + 1}/{len(looks)} at {n} seeds" if n in looks else f"at {n} seeds"
    why = (f"paused {where} by this command's time limit, the rows made so far kept: run the same command "
           "again to go on with the registered plan")
    run.echo(why)
    record_pause(run.study, storage, why)
    return True


def _why_stop(look: Look, j: int, looks: list[int], n: int, max_rows: int | None) -> str:
    """Why the looks end after look ``j`` at ``n`` seeds, or '' to run the next one."""
    if not look.open_rungs:
        return "every judged rung decided or not a test (precondition not met, regime absent or not measured)"
    if j == len(looks):
        return "the cap; more seeds need a new plan on fresh seeds"
    more = len(rows_needed(look.open_rungs)) * (looks[j] - n)
    if max_rows is not None and look.rows + more > max_rows:
        return (f"look {j + 1}'s {more} rows would pass max_rows {max_rows} ({look.rows} rows ran); "
                "more seeds need a new plan on fresh seeds")
    return ""


def _record_stop(cfg: StudyConfig, storage: str, stopped: str, echo) -> None:
    from grpolab.studies.storage import record_stop
    echo(stopped)
    record_stop(cfg, storage, stopped)


class _HeldPublish:
    """A look's tables and dashboard (``publish``, called by the coordinator as its rows finish),
    held until the look is judged: the last look's are published only after why the looks ended
    is recorded (``record_stop``), so the parent run's tables and the dashboard say it."""

    def __init__(self, publish):
        self.publish, self.held = publish, []

    def hold(self, *args) -> None:
        self.held.append(args)

    def flush(self) -> None:
        while self.held:
            self.publish(*self.held.pop(0))


def rows_needed(open_rungs: list[int]) -> tuple[int, ...]:
    """The rungs a new seed must run so that every undecided rung i gets one more paired
    difference (rung i minus rung i - 1); a decided rung keeps the seeds of the look that decided
    it, unless a neighbour's difference needs its rows. Stopping a rung once it is decided spends
    no error rate: under the Bonferroni plan every look's interval holds at once, so the
    interval at whichever look a rung last ran is valid at the plan's level."""
    return tuple(sorted({r for i in open_rungs for r in (i - 1, i)}))
