"""``grpolab study FILE``: run (or resume) a ladder or a search with Optuna; ``--plan`` sizes it
and runs nothing. The Python API's ``grpolab.study`` builds the same records (``StudyFlags``,
checked by ``study_options``) and calls the same ``execute``."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

from grpolab.commands import shared, study_flags
from grpolab.errors import ConfigError


@dataclass(frozen=True)
class StudyOptions:
    path: str
    study: object | None              # the loaded StudyConfig (None with plan: the plan reads the file its way)
    state: str | None = None
    storage: str | None = None
    workers: int | None = None
    retry_failed: bool = False
    accept_changed: bool = False
    table: bool = False               # print the results table at the end
    dashboard: bool = False           # write the study's dashboard at the end
    plan: bool = False
    tokens_per_second: float | None = None
    gpus_per_row: int | None = None
    devices: str | None = None
    slurm: dict | None = None         # SlurmLauncher's keyword arguments; None: workers on this machine
    accelerate_config: str | None = None
    on_demand: object | None = None   # SeedsOnDemand: add paired seeds until decided; None: the file's seeds
    time_limit: float | None = None   # minutes: no row starts that would end later (studies/time_limit.py)
    echo: object = field(default=print)   # where progress lines go
    where: bool = True                # say where the study's MLflow runs are, at the end


@dataclass(frozen=True)
class StudyFlags:
    """What ``grpolab study`` is told beside the file, unchecked: its flags, or ``grpolab.study``'s
    keywords (the API's subset, ``API_FLAGS``). ``study_options`` checks them."""
    state: str | None = None
    storage: str | None = None
    workers: int | None = None
    retry_failed: bool = False
    accept_changed: bool = False
    table: bool = False
    dashboard: bool = False
    plan: bool = False
    tokens_per_second: float | None = None
    until_decided: bool = False
    max_seeds: int | None = None
    batch: int | None = None
    fixed_seeds: bool = False
    gpus_per_row: int | None = None
    devices: str | None = None
    launcher: str = "local"
    slurm: dict | None = None
    accelerate_config: str | None = None
    time_limit: float | None = None
    echo: object = field(default=print)
    where: bool = True


#: the flags ``grpolab.study`` takes as keywords (it prints no table, writes no dashboard and never plans)
API_FLAGS = ("state", "storage", "workers", "retry_failed", "accept_changed", "until_decided", "max_seeds", "batch",
             "fixed_seeds", "gpus_per_row", "devices", "launcher", "slurm", "accelerate_config", "time_limit")


def add(sub) -> None:
    study = sub.add_parser("study", help="run an ablation ladder or search with Optuna (resumable)")
    study.add_argument("study", help="path to studies/<name>.yaml")
    study.add_argument("--workers", type=int, default=None,
                       help="worker processes on this machine (default 1; with --gpus-per-row: pool // K)")
    shared.storage_flag(study)
    study.add_argument("--retry-failed", action="store_true", help="re-queue rows that failed with an error")
    study.add_argument("--accept-changed", action="store_true",
                       help="go on although the study file changed since its rows were made (keeps the old rows)")
    study.add_argument("--table", action="store_true", help="print the results table at the end")
    study.add_argument("--dashboard", action="store_true", help="write the study's HTML dashboard at the end")
    study.add_argument("--plan", action="store_true", help="validate the whole study and print its rows, devices, "
                       "generated tokens and GPU-hours; loads no model, runs and writes nothing")
    study.add_argument("--tokens-per-second", type=float, default=None, metavar="X",
                       help="with --plan: one row's generated tokens per second (grpolab bench --what throughput)")
    shared.sequential_flags(study, "every rung verdict")
    study.add_argument("--time-limit", type=float, default=None, metavar="MINUTES",
                       help="start no row that would end more than MINUTES after the command started (the median "
                            "row time measured so far); the rows left wait for the next run of the same command")
    study.add_argument("--fixed-seeds", action="store_true",
                       help="a study file with seeds: {first, batch, cap}: run its first seeds only, add none")
    study_flags.add_launch_flags(study)
    study.set_defaults(parse=parse, execute=execute)


def parse(args) -> StudyOptions:
    return study_options(args.study, StudyFlags(
        state=args.state, storage=args.storage, workers=args.workers, retry_failed=args.retry_failed,
        accept_changed=args.accept_changed, table=args.table, dashboard=args.dashboard, plan=args.plan,
        tokens_per_second=args.tokens_per_second, until_decided=args.until_decided, max_seeds=args.max_seeds,
        batch=args.batch, fixed_seeds=args.fixed_seeds, gpus_per_row=args.gpus_per_row, devices=args.devices,
        launcher=args.launcher, slurm=study_flags.slurm_values(args), accelerate_config=args.accelerate_config,
        time_limit=args.time_limit))


def study_options(path, flags: StudyFlags) -> StudyOptions:
    """Every choice checked and the study file read (once), in the order the command line
    answers them; nothing is opened or written."""
    path, f = str(path), flags
    common = dict(state=f.state, storage=f.storage, gpus_per_row=f.gpus_per_row, echo=f.echo, where=f.where)
    if f.plan:
        _nothing_the_plan_ignores(workers=f.workers, retry_failed=f.retry_failed, accept_changed=f.accept_changed,
                                  table=f.table, dashboard=f.dashboard, until_decided=f.until_decided,
                                  max_seeds=f.max_seeds, batch=f.batch, fixed_seeds=f.fixed_seeds, devices=f.devices,
                                  launcher=f.launcher, slurm=f.slurm, accelerate_config=f.accelerate_config,
                                  time_limit=f.time_limit)
        if f.tokens_per_second is not None and not f.tokens_per_second > 0:
            raise ConfigError(f"--tokens-per-second: must be > 0, got {f.tokens_per_second}")
        return StudyOptions(path, None, plan=True, tokens_per_second=f.tokens_per_second, **common)
    if f.tokens_per_second is not None:
        raise ConfigError("--tokens-per-second: only with --plan")
    shared.at_least("--workers", f.workers, 1)
    shared.at_least("--batch", f.batch, 1)
    if f.time_limit is not None and (isinstance(f.time_limit, bool) or not isinstance(f.time_limit, (int, float))
                                     or not 0 < f.time_limit < float("inf")):
        raise ConfigError(f"--time-limit: minutes, a finite number > 0, got {f.time_limit!r}")
    slurm = study_flags.launcher_options(f.launcher, dict(f.slurm or {}), f.until_decided, f.gpus_per_row,
                                         f.accelerate_config)
    from grpolab.studies.definition import load_study
    study = load_study(path)   # the whole file is answered before any store or the coordinator is loaded
    on_demand = study_flags.seeds_on_demand(study.on_demand, f.fixed_seeds, f.until_decided, f.max_seeds, f.batch)
    if f.time_limit is not None and slurm is not None:
        raise ConfigError("--time-limit: not with --launcher slurm, whose jobs may wait in the queue past any limit; "
                          "bound each job with --time (Slurm's own limit) instead")
    if on_demand is not None and (slurm is not None or f.gpus_per_row is not None):
        raise ConfigError("seeds on demand (--until-decided or the study's seeds: {first, batch, cap}) run on this "
                          "machine only for now: add --fixed-seeds to launch the first seeds with Slurm or --gpus-per-row")
    if on_demand is not None and (f.devices is not None or f.accelerate_config is not None):
        flag = "--devices" if f.devices is not None else "--accelerate-config"
        raise ConfigError(f"{flag}: seeds on demand (--until-decided or the study's seeds: {{first, batch, cap}}) run "
                          "each row as one process on this machine; add --fixed-seeds to run the first seeds with it")
    return StudyOptions(path, study, workers=f.workers, retry_failed=f.retry_failed, accept_changed=f.accept_changed,
                        table=f.table, dashboard=f.dashboard, devices=f.devices, slurm=slurm,
                        accelerate_config=f.accelerate_config, on_demand=on_demand, time_limit=f.time_limit, **common)


def _nothing_the_plan_ignores(*, launcher, slurm, **given) -> None:
    """``--plan`` sizes the study from its file (and --gpus-per-row, --tokens-per-second) and runs
    nothing: a flag that only running reads would be silently inert there."""
    flags = [f"--{name.replace('_', '-')}" for name, value in given.items() if value not in (None, False)]
    flags += ["--launcher"] * (launcher != "local")
    flags += [study_flags.SLURM_FLAGS[k] for k, v in (slurm or {}).items() if v not in (None, [], {}, ())]
    if flags:
        raise ConfigError(f"{flags[0]}: not with --plan, which sizes the study from its file and runs nothing; "
                          "drop one of the two")


def execute(options: StudyOptions) -> int:
    """Run the study's missing rows (adding seeds on demand when asked), then the table, the
    dashboard and where the runs are, as asked. Returns run_study's exit code."""
    if options.plan:
        return _plan(options)
    started = time.time()   # the time limit counts from here, the study's imports included
    from grpolab.state import state_path
    from grpolab.tracking.stores import check_stores
    check_stores(state_path(options.state), options.storage)   # fail fast, before the study's imports
    from grpolab.report.publish import record_study_tables
    from grpolab.studies.study_run import StudyRun
    from grpolab.studies.time_limit import TimeLimit
    launcher = None
    if options.slurm is not None:
        from grpolab.studies.slurm import SlurmLauncher
        launcher = SlurmLauncher(**options.slurm)
    run = StudyRun(options.study, state_path(options.state), storage_url=options.storage, workers=options.workers,
                   retry_failed=options.retry_failed, accept_changed=options.accept_changed, echo=options.echo,
                   publish=record_study_tables, gpus_per_row=options.gpus_per_row, devices=options.devices,
                   launcher=launcher, accelerate_config=options.accelerate_config,
                   time_limit=TimeLimit.of(options.time_limit, started))
    if options.on_demand is not None:
        from grpolab.analysis.until_decided import LADDER_LOOKS
        from grpolab.studies.until_decided import run_until_decided
        code = run_until_decided(run, options.on_demand, LADDER_LOOKS)
    else:
        from grpolab.studies.coordinator import run_study
        code = run_study(run)
    _report(options, started)
    return code


def _report(options: StudyOptions, started: float) -> None:
    from grpolab.state import state_dir
    state = state_dir(options.state)
    parent = shared.parent_run_id(options.study, state, options.storage) \
        if options.dashboard or options.where else None
    if options.table:
        from grpolab.report.tables import study_table
        print(study_table(options.path, state, options.storage, "markdown"))
    if options.dashboard:
        from grpolab.report.dashboard import build_dashboard, default_output_name
        from grpolab.report.publish import attach_dashboard
        out = state / "dashboards" / default_output_name(options.path, None, None)
        if not (out.exists() and out.stat().st_mtime >= started):   # not already built as the study finished
            out = build_dashboard(state, out, options.path, storage_url=options.storage)
            if parent:
                attach_dashboard(state, parent, out)
        print(f"dashboard: {out.resolve()}" + (f" (also on the study's MLflow parent run {parent})" if parent else ""))
    if parent and options.where:   # where the study's runs are: its MLflow experiment's runs page
        from grpolab.tracking.location import where
        w = where(parent, state)
        opener = f"{w['ui_command']}, then open " if "ui_command" in w else "open "
        print(f"MLflow: {opener}{w['experiment_runs_url']} (parent run {parent})", file=sys.stderr, flush=True)


def _plan(options: StudyOptions) -> int:
    """`grpolab study FILE --plan`: validate and size the study (studies/plan.py); nothing is loaded,
    run or written, and torch is not imported."""
    from grpolab.analysis.compute_hours import study_hours
    from grpolab.state import state_path
    from grpolab.studies.plan import plan_study, render_plan
    print(render_plan(plan_study(options.path, options.gpus_per_row), options.tokens_per_second))
    measured = study_hours(options.path, state_path(options.state), options.storage)   # once rows ran: the actual total
    if measured is not None:
        print(measured.text())
    return 0

