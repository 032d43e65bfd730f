"""Seeds on demand for a ladder: add paired seeds in batches until every judged rung is decided,
each look judged at the level of a fixed plan (Bonferroni over the planned looks)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from grpolab.analysis import inference
from grpolab.analysis.ablation import ladder_rows, load_results
from grpolab.analysis.ladder_verdicts import rung_verdicts
from grpolab.analysis.verdicts import stops
from grpolab.errors import ConfigError
from grpolab.studies.definition import SeedsOnDemand
from grpolab.studies.study_run import StudyRun
from grpolab.tracking.stores import init_tracking_store


def run_until_decided(run: StudyRun, on_demand: SeedsOnDemand) -> int:
    """``grpolab study LADDER --until-decided --max-seeds N``: run the ladder, then add
    ``on_demand.batch`` paired seeds at a time until every judged rung stops (``verdicts.stops``)
    or ``on_demand.cap`` seeds ran. Each of the K planned looks is judged at level 1 - 0.05/K
    (``inference``), which the study keeps, so its table and dashboard state the same level. The
    seeds of a later look run only the rungs undecided rungs need (``rows_needed``); a look whose
    rows would take the study past ``on_demand.max_rows`` is not started (fewer looks than planned
    stay valid, conservatively); why the looks ended is kept with the plan (``record_stop``),
    before the last look's tables and dashboard are published (``run.publish``), so they say it.
    Returns run_study's exit code."""
    from grpolab.studies.coordinator import run_study
    from grpolab.studies.storage import add_seeds, default_storage, record_sequential, record_stop
    cfg, state, storage_url, echo, publish = run.study, run.state, run.storage_url, run.echo, run.publish
    max_seeds, batch, max_rows = on_demand.cap, on_demand.batch, on_demand.max_rows
    looks = _plan(cfg, max_seeds, batch)
    level = inference.sequential_level(0.95, len(looks))
    storage = storage_url or default_storage(state)
    Path(state).mkdir(parents=True, exist_ok=True)
    init_tracking_store(state)
    record_sequential(cfg, storage, looks, level)
    code, needed, stopped, held = 0, None, "", _HeldPublish(publish)
    try:
        for j, n in enumerate(looks, 1):
            add_seeds(cfg, storage, n, needed)
            code = run_study(replace(run, publish=held.hold if publish else None))
            if code:
                return code
            cfg_now, study = load_results(cfg.path, state, storage_url)
            rows = ladder_rows(study, cfg_now)
            rows = rows[rows.seed.isin(cfg_now.seeds[:n])]          # look j judges its first n_j seeds
            verdicts = [r.verdict for r in rung_verdicts(rows, cfg_now, 0, state, level, len(looks), tuple(looks))[1]]
            echo(f"look {j}/{len(looks)} at {n} seeds (per-look level {100 * level:.4g} %): "
                 + ", ".join(v.verdict for v in verdicts if v is not None))
            open_rungs = [i for i, v in enumerate(verdicts, 1) if v is not None and not stops(v)]
            stopped = f"stopped after look {j}/{len(looks)} at {n} seeds: "
            if not open_rungs:
                stopped += "every judged rung decided or not a test (precondition not met, regime absent or not measured)"
                break
            needed = rows_needed(open_rungs)
            if j == len(looks):
                stopped += "the cap; more seeds need a new plan on fresh seeds"
                break
            more = len(needed) * (looks[j] - n)
            if max_rows is not None and len(rows) + more > max_rows:
                stopped += (f"look {j + 1}'s {more} rows would pass max_rows {max_rows} ({len(rows)} rows ran); "
                            "more seeds need a new plan on fresh seeds")
                break
            held.flush()
            echo(f"look {j + 1}/{len(looks)} runs rungs {', '.join(str(r) for r in needed)} "
                 f"(the paired differences of undecided rungs {', '.join(str(r) for r in open_rungs)})")
        if stopped:
            echo(stopped)
            record_stop(cfg, storage, stopped)
        return code
    finally:
        held.flush()


def _plan(cfg, max_seeds: int, batch: int) -> list[int]:
    """The planned looks' seed counts, or why this study cannot add seeds until decided."""
    if not cfg.study_kind.paired_rungs:
        raise ConfigError(f"--until-decided: {cfg.name} is a {cfg.kind}; only ladders have rung verdicts")
    if cfg.objectives[0].smallest_effect is None:
        raise ConfigError(f"--until-decided: {cfg.name} has no smallest_effect for {cfg.objectives[0].metric}: "
                          "nothing can be decided")
    if max_seeds < len(cfg.seeds) or batch < 1:
        raise ConfigError(f"--until-decided needs --max-seeds N >= the study's seeds ({len(cfg.seeds)}) and --batch >= 1")
    return inference.planned_looks(len(cfg.seeds), batch, max_seeds)


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
