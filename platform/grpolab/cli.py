"""grpolab command line: run | study | table | dashboard | verdicts | methods | metrics-doc | bench.

Bad input exits with code 2 and a one-line message, before any model is loaded. Imports are
lazy: parsing (and a typo's answer) never loads torch, TRL or MLflow.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import logging
import os
import sys
import time
import warnings
from pathlib import Path

from grpolab.errors import ConfigError, GrpoLabWarning
from grpolab.signals import RunKilled
from grpolab.startup import own_process, quiet_process, start_up


def _cmd_run(args) -> int:
    from grpolab.experiment.config import load_experiment
    from grpolab.state import state_dir, state_path
    from grpolab.tracking.stores import check_stores, prepare_stores
    with warnings.catch_warnings(record=True) as caught:   # validated first: a typo's answer waits on nothing
        warnings.simplefilter("always")
        cfg = load_experiment(args.experiment, args.overrides)
    for w in caught:
        print(f"warning: {w.message}", file=sys.stderr)
    check_stores(state_path(args.state))   # fail fast (seconds, nothing written) on an unreachable store
    from grpolab.experiment.progress import TrainProgress
    from grpolab.tracking.location import where
    from grpolab.experiment.runner import run_experiment
    state = state_dir(args.state)
    prepare_stores(state)   # a fresh MLflow database is created once, under the setup lock

    def announce(run_id: str) -> None:
        print(f"run {cfg.name}: method {cfg.method_name}, {cfg.train.steps} steps; MLflow run {run_id}; "
              f"state {state.resolve()}\npreparing the model (the warm start runs once per preset, task and "
              "seed, then is cached in the state folder) ...", file=sys.stderr, flush=True)
    resume = None
    if args.resume or args.resume_run:  # continue the same MLflow run from its newest checkpoint
        from grpolab.experiment.checkpoints import resume_target
        from grpolab.tracking.recorder import client_for
        resume = resume_target(client_for(state), cfg.tracking.experiment, f"{cfg.name}-s{cfg.seed}", state,
                               args.resume_run)
        from grpolab.experiment.checkpoints import check_resume, resume_note
        note = resume_note(check_resume(state, resume, cfg.resolved()))   # refused here, before the run opens
        if int(os.environ.get("RANK", "0")) == 0:
            print(f"run {resume}: {note}", file=sys.stderr, flush=True)
    bar = TrainProgress()
    result = run_experiment(cfg, state, callbacks=[bar], eval_hook=bar.on_eval, on_run=announce, resume_run_id=resume)
    if int(os.environ.get("RANK", "0")) != 0:
        return 0   # several processes: one run, one summary (rank 0 holds the MLflow run and the evals)
    summary = {
        "run_id": result.run_id, "status": result.status, "steps": result.steps,
        "state": str(state.resolve()), "mlflow": where(result.run_id, state) if result.run_id else None,
        "wall_seconds": round(result.wall_seconds, 1),
        "eval_start": {k: round(v, 4) for k, v in result.start_eval.items()},
        "eval_final": {k: round(v, 4) for k, v in result.final_eval.items()},
        "warm_start_cache_hit": result.warm_start.get("cache_hit"),
    }
    print(json.dumps(summary, indent=2))
    return 0


def _cmd_methods(args) -> int:
    from grpolab.method.table import methods_table
    print(methods_table(markdown=args.markdown))
    return 0


def _cmd_metrics_doc(args) -> int:
    from grpolab.tracking.metric_catalog import render_doc
    print(render_doc(), end="")
    return 0


def _cmd_verdicts(args) -> int:
    """`grpolab verdicts [claims...]`: run what is missing, print the verdict table, write the
    verdict dashboard. Exit 0 (verdicts are results, whatever they say). Only the table goes
    to stdout (``--format csv`` pipes into a CSV reader); progress, the dashboard path and the
    summary line go to stderr."""
    from grpolab.analysis.claims import claim_files, load_claim
    from grpolab.state import state_dir

    def note(line: str) -> None:
        print(line, file=sys.stderr, flush=True)
    if args.workers < 1:
        raise ConfigError(f"--workers: must be >= 1, got {args.workers}")
    if args.no_run and args.until_decided:
        raise ConfigError("--until-decided runs rows; it cannot go with --no-run")
    for path in claim_files(args.claims):   # every claim (and its study) is read before the heavy imports
        load_claim(path)
    from grpolab.analysis.claim_runs import judge_family, run_claims
    from grpolab.report.publish import record_study_tables
    from grpolab.report.verdict_page import claims_count, render_verdicts, write_claims_dashboard
    state = state_dir(args.state)
    started = time.time()
    with _stdout_to_stderr():   # what the studies, their workers and libraries print is not table data
        if args.no_run:
            results = judge_family([load_claim(p) for p in claim_files(args.claims)], state, args.storage)
        else:
            results = run_claims(args.claims, state, args.storage, args.workers, echo=note,
                                 until_decided=args.until_decided, max_seeds=args.max_seeds, batch=args.batch or 2,
                                 publish=record_study_tables)
    table = render_verdicts(results, args.format)
    sys.stdout.write(table if table.endswith("\n") else table + "\n")
    sys.stdout.flush()
    out = write_claims_dashboard(results, state / "dashboards" / "verdicts.html")
    note(f"dashboard: {Path(out).resolve()}")
    note(f"{len(results)} claim(s) judged in {time.time() - started:.0f}s: {claims_count(results)}")
    return 0


@contextlib.contextmanager
def _stdout_to_stderr():
    """Send file descriptor 1 to stderr for the duration (this process and the worker processes
    it starts), so that stdout carries only the verdict table."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _cmd_bench(args) -> int:
    _check_bench_args(args)
    from grpolab.bench.suite import main as bench_main
    return bench_main(args)


def _check_bench_args(args) -> None:
    """Counts and FILE checked before the benchmark's imports (torch, TRL) and before the state
    folder is made: FILE must be a valid experiment or study, and is read only by throughput."""
    for flag, value, least in (("--steps", args.steps, 1), ("--repeats", args.repeats, 1), ("--rows", args.rows, 2),
                               ("--rollouts", args.rollouts, 1)):
        if value < least:
            raise ConfigError(f"{flag}: must be >= {least}, got {value}")
    if args.what != "throughput":
        if args.file:
            raise ConfigError(f"bench FILE {args.file!r}: only read with --what throughput; valid: --what throughput FILE")
        return
    if not args.file:
        raise ConfigError("bench --what throughput: give the experiment or study file to measure")
    from grpolab.yaml_input import read_yaml_mapping
    data = read_yaml_mapping(args.file, "bench file", "give an experiment or a study file")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # the row's notes are shown when it runs
        if data.get("kind") in ("ladder", "search"):
            from grpolab.studies.definition import load_study
            load_study(args.file)
        else:
            from grpolab.experiment.config import load_experiment
            load_experiment(args.file)


def _study_plan(args) -> int:
    """`grpolab study FILE --plan`: validate and size the study (studies/plan.py); nothing is loaded,
    run or written, and torch is not imported."""
    from grpolab.studies.plan import plan_study, render_plan
    if args.tokens_per_second is not None and not args.tokens_per_second > 0:
        raise ConfigError(f"--tokens-per-second: must be > 0, got {args.tokens_per_second}")
    print(render_plan(plan_study(args.study, getattr(args, "gpus_per_row", None)), args.tokens_per_second))
    from grpolab.analysis.compute_hours import study_hours
    from grpolab.state import state_path
    measured = study_hours(args.study, state_path(args.state), args.storage)   # once rows ran: the actual total
    if measured is not None:
        print(measured.text())
    return 0


def _cmd_study(args) -> int:
    if args.plan:
        return _study_plan(args)
    if args.tokens_per_second is not None:
        raise ConfigError("--tokens-per-second: only with --plan")
    from grpolab.state import state_dir, state_path
    from grpolab.tracking.stores import check_stores
    if args.workers is not None and args.workers < 1:
        raise ConfigError(f"--workers: must be >= 1, got {args.workers}")
    launcher = _study_launcher(args)
    from grpolab.studies.definition import load_study
    load_study(args.study)   # the whole file is answered before any store or the coordinator is loaded
    check_stores(state_path(args.state), args.storage)   # fail fast, before the study's imports
    from grpolab.report.publish import record_study_tables
    from grpolab.studies.coordinator import run_study
    started = time.time()
    on_demand = _seeds_on_demand(args)
    if on_demand is not None and (launcher is not None or args.gpus_per_row is not None):
        raise ConfigError("seeds on demand (--until-decided or the study's seeds: {first, batch, cap}) run on this "
                          "machine only for now: add --fixed-seeds to launch the first seeds with Slurm or --gpus-per-row")
    if on_demand is not None:
        from grpolab.analysis.until_decided import run_until_decided
        code = run_until_decided(args.study, state_path(args.state), args.storage, args.workers or 1, on_demand.cap,
                                 on_demand.batch, retry_failed=args.retry_failed, accept_changed=args.accept_changed,
                                 publish=record_study_tables, max_rows=on_demand.max_rows)
    else:
        code = run_study(args.study, state_path(args.state), args.storage, args.workers, args.retry_failed,
                         accept_changed=args.accept_changed, publish=record_study_tables,
                         gpus_per_row=args.gpus_per_row, devices=args.devices, launcher=launcher,
                         accelerate_config=args.accelerate_config)
    if args.table:
        from grpolab.report.tables import study_table
        print(study_table(args.study, state_dir(args.state), args.storage, "markdown"))
    if args.dashboard:
        from grpolab.report.dashboard import build_dashboard, default_output_name
        from grpolab.report.publish import attach_dashboard
        state = state_dir(args.state)
        out = state / "dashboards" / default_output_name(args.study, None, None)
        parent = _parent_run_id(args.study, state, args.storage)
        if not (out.exists() and out.stat().st_mtime >= started):   # not already built as the study finished
            out = build_dashboard(state, out, args.study, storage_url=args.storage)
            if parent:
                attach_dashboard(state, parent, out)
        print(f"dashboard: {out.resolve()}" + (f" (also on the study's MLflow parent run {parent})" if parent else ""))
    _print_study_location(args)
    return code


def _seeds_on_demand(args):
    """The seeds-on-demand plan of ``grpolab study``: the study file's ``seeds: {first, batch, cap}``
    design by default (``--fixed-seeds`` runs its first seeds only), or ``--until-decided --max-seeds N
    [--batch B]``, whose flags override the file's cap and batch."""
    from grpolab.studies.definition import SeedsOnDemand, load_study
    design = load_study(args.study).on_demand
    if args.fixed_seeds:
        if args.until_decided or args.max_seeds is not None or args.batch is not None:
            raise ConfigError("--fixed-seeds: not with --until-decided, --max-seeds or --batch")
        return None
    if not args.until_decided:
        if args.max_seeds is not None or args.batch is not None:
            raise ConfigError("--max-seeds and --batch: only with --until-decided (or a seeds: {first, batch, cap} design)")
        return design
    cap = args.max_seeds if args.max_seeds is not None else (design.cap if design else None)
    if cap is None:
        raise ConfigError("--until-decided needs --max-seeds N (or a study file with seeds: {first, batch, cap})")
    return SeedsOnDemand(args.batch or (design.batch if design else 2), cap, design.max_rows if design else None)


def _print_study_location(args) -> None:
    """Where the study's runs are: its MLflow experiment's runs page and how to open it."""
    from grpolab.tracking.location import where
    from grpolab.state import state_dir
    state = state_dir(args.state)
    parent = _parent_run_id(args.study, state, args.storage)
    if parent:
        w = where(parent, state)
        opener = f"{w['ui_command']}, then open " if "ui_command" in w else "open "
        print(f"MLflow: {opener}{w['experiment_runs_url']} (parent run {parent})", file=sys.stderr, flush=True)


def _sequential_flags(parser, what: str) -> None:
    parser.add_argument("--until-decided", action="store_true",
                        help=f"add paired seeds in batches until {what} is decided or --max-seeds is reached "
                             "(each look's interval at level 1 - 0.05/K over the K planned looks)")
    parser.add_argument("--max-seeds", type=int, default=None, help="with --until-decided: the most paired seeds")
    parser.add_argument("--batch", type=int, default=None,
                        help="with --until-decided: seeds added per look (default: the study file's, else 2)")


def _parent_run_id(study_path: str, state, storage_url) -> str | None:
    from grpolab.analysis.ablation import load_results
    from grpolab.studies.rows import PARENT_RUN_ATTR
    _, study = load_results(study_path, state, storage_url)
    return study.user_attrs.get(PARENT_RUN_ATTR)


def _cmd_study_worker(args) -> int:
    from grpolab.studies.worker_exit import exit_now
    if args.wait_for_go:   # started by a coordinator before its set-up (studies/processes.py)
        from grpolab.studies.processes import wait_for_go
        try:
            if not wait_for_go(preload=args.procs_per_row == 1):
                exit_now(0)   # not needed (nothing to run, or the set-up failed): nothing was touched
        except KeyboardInterrupt:   # Ctrl-C reached the whole process group during the set-up
            exit_now(130)
    from grpolab.state import state_dir
    from grpolab.studies.coordinator import worker_loop
    from grpolab.studies.definition import load_study
    worker_loop(load_study(args.study), args.storage, state_dir(args.state), procs_per_row=args.procs_per_row,
                accelerate_config=args.accelerate_config)
    exit_now(0)   # every row is reported and every run closed: skip ~2 CPU-s of interpreter teardown


def _cmd_table(args) -> int:
    from grpolab.studies.definition import load_study
    study = load_study(args.study)   # the file and --metric are answered before any store is opened
    metrics = [o.metric for o in study.objectives]
    from grpolab.analysis.rescored import is_rescored, parse_rescored
    if is_rescored(args.metric):
        parse_rescored(args.metric)
    elif args.metric is not None and args.metric not in metrics:
        raise ConfigError(f"--metric: {args.metric!r} is not an objective of {study.name}; valid: {', '.join(metrics)}, "
                          "or a re-scored one: rescored:eval/<benchmark>/<score> (docs/studies.md)")
    from grpolab.analysis.scaling import check_window
    check_window(args.scaling_skip, args.scaling_fit_upto)
    from grpolab.report.tables import study_table
    from grpolab.state import state_dir
    state = state_dir(args.state)
    scaling = {"compute": args.scaling_x, "skip_below": args.scaling_skip, "fit_upto": args.scaling_fit_upto}
    print(study_table(args.study, state, args.storage, args.format, args.metric, scaling), flush=True)
    parent = _parent_run_id(args.study, state, args.storage)
    if parent:   # the parent run shows the latest table (md and csv), whatever format was printed
        from grpolab.report.publish import publish_tables
        publish_tables(state, parent, args.study, args.storage)
        print(f"table.md / table.csv updated on the study's MLflow parent run {parent}", file=sys.stderr)
    return 0


def _cmd_dashboard(args) -> int:
    from grpolab.report.layout import load_layout
    from grpolab.state import state_dir
    if args.layout is not None:
        load_layout(args.layout)   # a bad layout is answered before the state folder is touched
    if args.out and not Path(args.out).absolute().parent.is_dir():
        raise ConfigError(f"--out: the folder of {args.out!r} does not exist; create it first or give a path in an existing folder")
    if args.out and Path(args.out).is_dir():
        raise ConfigError(f"--out: {args.out!r} is a folder; give the path of the HTML file to write")
    if args.study:
        from grpolab.studies.definition import load_study
        load_study(args.study)
    from grpolab.report.dashboard import build_dashboard, default_output_name
    state = state_dir(args.state)
    run_ids = [r.strip() for r in (args.runs or "").split(",") if r.strip()]
    name = default_output_name(args.study, run_ids, args.layout, args.x or "steps", args.seeds or "band")
    out = Path(args.out) if args.out else state / "dashboards" / name
    path = build_dashboard(state, out, args.study, run_ids, args.layout, args.storage, x=args.x, seeds=args.seeds,
                           plotlyjs=args.plotlyjs)
    parent = _parent_run_id(args.study, state, args.storage) if args.study else None
    note = ""
    if parent:   # the study's parent run shows the latest page of this view
        from grpolab.report.publish import attach_dashboard, dashboard_artifact_name
        artifact = dashboard_artifact_name(args.study, args.layout, args.x, args.seeds)
        attach_dashboard(state, parent, path, artifact)
        note = f" (also {artifact} on the study's MLflow parent run {parent})"
    print(f"dashboard: {path.resolve()}{note}")
    return 0


def _common_flags(defaults: bool) -> argparse.ArgumentParser:
    """--state and -v, accepted before or after the subcommand (after it they must not reset
    what was given before it, hence SUPPRESS as the subcommand's default)."""
    common = _OneLineParser(add_help=False)
    common.add_argument("--state", default=None if defaults else argparse.SUPPRESS,
                        help="state folder (default $GRPOLAB_STATE or ./grpolab-state)")
    common.add_argument("-v", "--verbose", action="store_true", default=False if defaults else argparse.SUPPRESS)
    return common


PUBLIC_COMMANDS = ("run", "study", "table", "samples", "dashboard", "verdicts", "eval", "methods", "metrics-doc", "bench", "doctor")
STATE_COMMANDS = ("run", "study", "table", "samples", "dashboard", "verdicts", "eval", "bench")   # they read or write the state folder


class _OneLineParser(argparse.ArgumentParser):
    """A usage error is one line, like every other bad input: what was wrong and where the
    command's valid flags are listed (its --help)."""

    def error(self, message):
        self.exit(2, f"error: {message} (valid: see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    from grpolab import __version__
    parser = _OneLineParser(prog="grpolab", description=__doc__.splitlines()[0], parents=[_common_flags(True)])
    parser.add_argument("--version", action="version", version=f"grpolab {__version__}")
    # the internal study-worker command is left out of the listing (it has no help= either)
    sub = parser.add_subparsers(dest="command", required=True, metavar="{" + ",".join(PUBLIC_COMMANDS) + "}")
    sub.add_parser = functools.partial(sub.add_parser, parents=[_common_flags(False)])
    for add in (_add_run, _add_study, _add_study_worker, _add_study_rank, _add_table, _add_samples, _add_dashboard, _add_verdicts,
                _add_eval, _add_methods, _add_bench, _add_doctor):
        add(sub)
    return parser


def _add_run(sub) -> None:
    run = sub.add_parser("run", help="train one experiment YAML and record it in MLflow")
    run.add_argument("experiment", help="path to experiments/<name>.yaml")
    run.add_argument("overrides", nargs="*", help="key.path=value overrides, e.g. train.steps=50 method.eps_high=0.28")
    run.add_argument("--resume", action="store_true", help="continue the newest unfinished run of this experiment "
                     "(same name and seed) from its last checkpoint, in the same MLflow run")
    run.add_argument("--resume-run", metavar="RUN_ID", help="continue this MLflow run from its last checkpoint")
    run.set_defaults(func=_cmd_run)


def _add_study(sub) -> None:
    study = sub.add_parser("study", help="run an ablation ladder or search with Optuna (resumable)")
    study.add_argument("study", help="path to studies/<name>.yaml")
    study.add_argument("--workers", type=int, default=None,
                       help="worker processes on this machine (default 1; with --gpus-per-row: pool // K)")
    study.add_argument("--storage", default=None, help="Optuna storage URL (default: journal file in the state folder; "
                       "postgresql://... to share rows with workers on other machines)")
    study.add_argument("--retry-failed", action="store_true", help="re-queue rows that failed with an error")
    study.add_argument("--accept-changed", action="store_true",
                       help="go on although the study file changed since its rows were made (keeps the old rows)")
    study.add_argument("--table", action="store_true", help="print the results table at the end")
    study.add_argument("--dashboard", action="store_true", help="write the study's HTML dashboard at the end")
    study.add_argument("--plan", action="store_true", help="validate the whole study and print its rows, devices, "
                       "generated tokens and GPU-hours; loads no model, runs and writes nothing")
    study.add_argument("--tokens-per-second", type=float, default=None, metavar="X",
                       help="with --plan: one row's generated tokens per second (grpolab bench --what throughput)")
    _sequential_flags(study, "every rung verdict")
    study.add_argument("--fixed-seeds", action="store_true",
                       help="a study file with seeds: {first, batch, cap}: run its first seeds only, add none")
    _launch_flags(study)
    study.set_defaults(func=_cmd_study)


def _launch_flags(study) -> None:
    """Where a study's workers run: on this machine with devices per row, or as Slurm jobs."""
    study.add_argument("--gpus-per-row", type=int, default=None, metavar="K",
                       help="each worker owns K devices (its CUDA_VISIBLE_DEVICES); K > 1 runs each row as K "
                            "processes (torch.distributed) logging one MLflow run")
    study.add_argument("--devices", default=None, metavar="0,1,...", help="with --gpus-per-row: the device pool "
                       "(default: the study file's devices:, else CUDA_VISIBLE_DEVICES, else every CUDA device)")
    study.add_argument("--launcher", choices=["local", "slurm"], default="local",
                       help="slurm: run the workers as Slurm jobs through submitit (needs a PostgreSQL --storage)")
    slurm = study.add_argument_group("with --launcher slurm")
    slurm.add_argument("--jobs", type=int, default=None, metavar="N", help="worker jobs to submit (default 1)")
    slurm.add_argument("--partition", default=None, help="Slurm partition (default: the cluster's default)")
    slurm.add_argument("--time", default=None, metavar="T", help="time limit per job, e.g. 4:00:00 (default 24:00:00)")
    slurm.add_argument("--slurm-folder", default=None, metavar="DIR",
                       help="submitit's folder for job scripts and logs (default: <state>/slurm/<job id>)")
    slurm.add_argument("--cpus-per-job", type=int, default=None, metavar="C", help="CPUs per job (default: Slurm's)")
    for flag, what in (("--account", "account to charge"), ("--qos", "quality of service"),
                       ("--mem", "memory per job, e.g. 64G"), ("--constraint", "node features, e.g. a100"),
                       ("--exclude", "nodes not to use, e.g. node[01-02]")):
        slurm.add_argument(flag, default=None, help=f"Slurm {what} (default: launcher.slurm in the study file)")
    slurm.add_argument("--setup", action="append", default=None, metavar="LINE",
                       help="a shell line the job runs before the worker (module load, conda activate); repeatable")
    slurm.add_argument("--slurm-param", action="append", default=None, metavar="KEY=VALUE",
                       help="any other submitit Slurm parameter, e.g. gres=gpu:a100:2; repeatable")
    study.add_argument("--accelerate-config", default=None, metavar="FILE",
                       help="with --gpus-per-row K >= 2: launch each row's K processes with accelerate and this "
                            "config (e.g. studies/accelerate/zero3.yaml; default: launcher.accelerate_config)")


def _study_launcher(args):
    """The Slurm launcher asked for, or None; Slurm's flags without it are refused."""
    slurm_only = {"--jobs": args.jobs, "--partition": args.partition, "--time": args.time,
                  "--slurm-folder": args.slurm_folder, "--cpus-per-job": args.cpus_per_job, "--account": args.account,
                  "--qos": args.qos, "--mem": args.mem, "--constraint": args.constraint, "--exclude": args.exclude,
                  "--setup": args.setup, "--slurm-param": args.slurm_param}
    if args.launcher != "slurm":
        given = [name for name, value in slurm_only.items() if value is not None]
        if given:
            raise ConfigError(f"{given[0]}: only with --launcher slurm")
        if args.until_decided and args.gpus_per_row is not None:
            raise ConfigError("--gpus-per-row: not with --until-decided yet")
        if args.until_decided and args.accelerate_config is not None:
            raise ConfigError("--accelerate-config: not with --until-decided yet")
        return None
    if args.until_decided:
        raise ConfigError("--launcher slurm: not with --until-decided yet")
    from grpolab.studies.launch_options import parse_slurm_params
    from grpolab.studies.slurm import SlurmLauncher
    return SlurmLauncher(jobs=args.jobs, partition=args.partition, gpus_per_row=args.gpus_per_row, time=args.time,
                         folder=args.slurm_folder, cpus_per_job=args.cpus_per_job, account=args.account, qos=args.qos,
                         mem=args.mem, constraint=args.constraint, exclude=args.exclude, setup=tuple(args.setup or ()),
                         params=parse_slurm_params(args.slurm_param or ()))


def _add_study_worker(sub) -> None:
    worker = sub.add_parser("study-worker")   # internal: one worker process of `grpolab study`
    worker.add_argument("study")
    worker.add_argument("--storage", required=True)
    worker.add_argument("--wait-for-go", action="store_true", help=argparse.SUPPRESS)
    worker.add_argument("--procs-per-row", type=int, default=1, help=argparse.SUPPRESS)   # --gpus-per-row K
    worker.add_argument("--accelerate-config", default=None, help=argparse.SUPPRESS)     # checked by the coordinator
    worker.set_defaults(func=_cmd_study_worker)


def _add_study_rank(sub) -> None:
    rank = sub.add_parser("study-rank")   # internal: one of the K processes of a row (studies/ranks.py)
    rank.add_argument("spec")
    rank.set_defaults(func=_cmd_study_rank)


def _cmd_study_rank(args) -> int:
    from grpolab.studies.row_on_ranks import run_rank
    run_rank(args.spec)
    return 0


def _add_table(sub) -> None:
    table = sub.add_parser("table", help="results table of a study: mean, 95%% CI, paired deltas, published values")
    table.add_argument("study", help="path to studies/<name>.yaml")
    table.add_argument("--storage", default=None)
    table.add_argument("--format", choices=["markdown", "csv", "latex"], default="markdown")
    table.add_argument("--metric", default=None,
                       help="which objective of the study (default: the first), or a score `grpolab eval` re-scored: "
                            "rescored[QUALIFIERS]:[auc:]eval/<benchmark>/<score>, e.g. rescored:eval/aime/avg@16 "
                            "(the final models; qualifiers step=N, n, temperature, top_p, max_tokens, size, seed)")
    table.add_argument("--scaling-x", choices=["tokens", "accelerator_hours"], default="tokens",
                       help="compute axis of the scaling fit beside a ladder's table")
    table.add_argument("--scaling-skip", type=float, default=0.0, metavar="C",
                       help="leave points with compute below C out of the fit (the noisy start)")
    table.add_argument("--scaling-fit-upto", type=float, default=1.0, metavar="F",
                       help="fit on compute <= F x each run's largest and check the extrapolation on the rest")
    table.set_defaults(func=_cmd_table)


def _add_samples(sub) -> None:
    samples = sub.add_parser("samples", help="one prompt's logged completions from every rung and seed, side by side")
    samples.add_argument("target", metavar="STUDY_OR_RUN", help="a study file, or an MLflow run id (a study's parent "
                         "run: its rows)")
    samples.add_argument("--prompt", default=None, help="the prompt containing TEXT (default: the prompt most runs logged)")
    samples.add_argument("--step", type=int, default=None, help="only this step's rollout")
    samples.add_argument("--storage", default=None, help="Optuna storage URL of the study")
    samples.set_defaults(func=_cmd_samples)


def _cmd_samples(args) -> int:
    from grpolab.analysis.side_by_side import render, side_by_side
    from grpolab.state import state_path
    print(render(side_by_side(args.target, state_path(args.state), args.storage, args.prompt, args.step)))
    return 0


def _add_dashboard(sub) -> None:
    dash = sub.add_parser("dashboard", help="write an offline HTML dashboard of a study or of chosen runs")
    dash.add_argument("study", nargs="?", help="path to studies/<name>.yaml (or use --runs)")
    dash.add_argument("--runs", help="comma-separated MLflow run ids to compare instead of a study")
    dash.add_argument("--layout", help="dashboards/<layout>.yaml (default: the built-in layout)")
    dash.add_argument("--out", help="output HTML path (default: <state>/dashboards/<what it shows>.html)")
    dash.add_argument("--storage", default=None, help="Optuna storage URL of the study")
    dash.add_argument("--x", choices=["steps", "tokens", "seconds", "accelerator_hours"], default=None,
                      help="x-axis of the curves (default: the layout's x, else steps)")
    dash.add_argument("--seeds", choices=["band", "lines", "both"], default=None,
                      help="seeds as a min-max band, one line each, or both (default: the layout's seeds, else band)")
    dash.add_argument("--plotlyjs", choices=["inline", "shared"], default="inline",
                      help="inline: one self-contained file (default); shared: one plotly.min.js beside the pages")
    dash.set_defaults(func=_cmd_dashboard)


def _add_verdicts(sub) -> None:
    verdicts = sub.add_parser("verdicts", help="judge published claims on paired seeds (runs missing rows first)")
    verdicts.add_argument("claims", nargs="*", help="claim names (studies/claims/<name>.yaml) or claim files; default: all")
    verdicts.add_argument("--workers", type=int, default=1, help="worker processes for the missing rows")
    verdicts.add_argument("--storage", default=None, help="Optuna storage URL of the claims' studies")
    verdicts.add_argument("--format", choices=["markdown", "csv"], default="markdown")
    verdicts.add_argument("--no-run", action="store_true", help="judge only the rows already run; run nothing")
    _sequential_flags(verdicts, "every claim's verdict")
    verdicts.set_defaults(func=_cmd_verdicts)


def _add_bench(sub) -> None:
    bench = sub.add_parser("bench", help="measure tracking and trainer overhead against stock TRL, and 2-worker study throughput")
    bench.add_argument("--what", choices=["cli", "tracking", "trainer", "workers", "throughput", "all"], default="all",
                       help="throughput (not in all): generated tokens/s of FILE's first row, for `study FILE --plan`")
    bench.add_argument("file", nargs="?", help="with --what throughput: an experiment or study file")
    bench.add_argument("--rollouts", type=int, default=2, help="with --what throughput: rollouts to time")
    bench.add_argument("--preset", default=None, help="model preset (default: tiny for tracking, small for trainer)")
    bench.add_argument("--steps", type=int, default=30)
    bench.add_argument("--repeats", type=int, default=3,
                       help="timed runs per variant (workers: repeats // 2 rotations of its three configurations)")
    bench.add_argument("--rows", type=int, default=8, help="rows of the workers benchmark's study (2 rungs x rows/2 seeds)")
    bench.set_defaults(func=_cmd_bench)


def _add_eval(sub) -> None:
    ev = sub.add_parser("eval", help="re-score saved models (a run, a study's runs or a run folder) on named benchmarks")
    ev.add_argument("target", metavar="RUN", help="an MLflow run id, a study file, or a run folder")
    ev.add_argument("--benchmark", action="append", required=True, metavar="B",
                    help="a benchmark the run declares, held_out, or a file / hub dataset (repeatable)")
    for flag, kind in (("--n", int), ("--temperature", float), ("--top-p", float), ("--max-tokens", int),
                       ("--size", int), ("--seed", int)):
        ev.add_argument(flag, type=kind, default=None, help="replaces the benchmark's own setting")
    ev.add_argument("--checkpoints", choices=["final", "all"], default="final",
                    help="the final model, or every complete checkpoint too")
    ev.add_argument("--storage", default=None, help="Optuna storage URL of the study")
    ev.set_defaults(func=_cmd_eval)


def _cmd_eval(args) -> int:
    from grpolab.analysis.rescore import OVERRIDES, rescore
    from grpolab.state import state_dir
    overrides = {k: getattr(args, k) for k in OVERRIDES}
    rescore(args.target, state_dir(args.state), args.benchmark, overrides, args.checkpoints, args.storage)
    return 0


def _add_doctor(sub) -> None:
    doctor = sub.add_parser("doctor", help="check this machine: versions; with --gpu, the GPU, every method, a "
                            "micro-ladder, stock TRL vs grpolab step times and vLLM, into one JSON report")
    doctor.add_argument("--gpu", action="store_true", help="run the GPU checks (each is 'not checked' without CUDA)")
    doctor.add_argument("--out", default=None, metavar="FILE",
                        help="the JSON report (default: <state>/doctor/gpu-<time>.json)")
    doctor.add_argument("--model", default=None, metavar="DIR",
                        help="a local chat model for the vLLM and ladder checks (default: a tiny model built here)")
    doctor.add_argument("--steps", type=int, default=4,
                        help="optimizer steps per micro-ladder row and timed run (each method row runs 2)")
    doctor.set_defaults(func=_cmd_doctor)


def _cmd_doctor(args) -> int:
    from grpolab.state import state_dir
    if args.steps < 1:
        raise ConfigError(f"--steps: must be >= 1, got {args.steps}")
    if args.model is not None and not Path(args.model).is_dir():
        raise ConfigError(f"--model: {args.model} is not a folder (a local Hugging Face model directory)")
    from grpolab.bench.gpu_check import any_failed, gpu_report, summary_lines, versions
    if not args.gpu:
        print("versions: " + ", ".join(f"{k} {v or 'not installed'}" for k, v in versions().items()))
        print("give --gpu for the GPU checks (GPU, every method, micro-ladder, stock TRL vs grpolab timing, vLLM)")
        return 0
    state = state_dir(args.state)
    out = Path(args.out) if args.out else state / "doctor" / f"gpu-{time.strftime('%Y%m%d-%H%M%S')}.json"
    report = gpu_report(out, state, args.model, args.steps)
    for line in summary_lines(report):
        print(line)
    return 1 if any_failed(report) else 0   # a GPU machine that cannot run grpolab fails `make gpu-check`


def _add_methods(sub) -> None:
    methods = sub.add_parser("methods", help="print the method registry as a table of methods by axes")
    methods.add_argument("--markdown", action="store_true", help="GitHub markdown instead of plain text")
    methods.set_defaults(func=_cmd_methods)
    doc = sub.add_parser("metrics-doc", help="print the definition of every tracked metric (markdown)")
    doc.set_defaults(func=_cmd_metrics_doc)


def main(argv: list[str] | None = None) -> int:
    if argv is None:   # the process's entry point (`grpolab ...`): its collector is the command line's
        own_process()
    try:
        code = _main(argv)
        sys.stdout.flush()   # a closed pipe must surface here, not as a traceback at interpreter exit
        if argv is None and code in (130, 143):
            # Ctrl-C / SIGTERM: the run and its row are recorded (KILLED, handed back) before the
            # message; what is left is interpreter teardown, 7.5 of the 7.9 s from SIGTERM to exit
            # measured on a loaded 2-core machine. A signalled command line leaves at once.
            from grpolab.studies.worker_exit import exit_now
            exit_now(code)
        return code
    except BrokenPipeError:  # `grpolab methods | head`: the reader left; exit quietly like coreutils
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141


def hoist_global_flags(argv: list[str]) -> list[str]:
    """Move --state DIR / -v anywhere on the line to the front: argparse cannot take an option
    between a subcommand's positionals (`run exp.yaml --state X train.steps=5`)."""
    front, rest, i = [], [], 0
    while i < len(argv):
        token = argv[i]
        if token == "--":
            rest.extend(argv[i:])
            break
        if token == "--state" and i + 1 < len(argv):
            front += argv[i:i + 2]
            i += 2
            continue
        (front if token.startswith("--state=") or token in ("-v", "--verbose") else rest).append(token)
        i += 1
    return front + rest


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """grpolab's own warnings reach a command-line user as one ``warning: ...`` line, like its
    configuration warnings: the default format would print grpolab's source line, which names
    nothing the user wrote. Other libraries' warnings keep Python's format (file and line)."""
    if issubclass(category, GrpoLabWarning) or category.__module__.split(".")[0] == "grpolab":
        print(f"warning: {message}", file=file or sys.stderr, flush=True)
    else:
        (file or sys.stderr).write(warnings.formatwarning(message, category, filename, lineno, line))


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(hoist_global_flags(sys.argv[1:] if argv is None else list(argv)))
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    start_up(args.state)
    warnings.filterwarnings("ignore", category=FutureWarning, module="transformers")  # TRL's deprecated kwargs
    warnings.showwarning = _show_warning
    if not args.verbose:
        quiet_process()
    try:
        if args.command in STATE_COMMANDS:
            from grpolab.state import check_state_folder
            check_state_folder(args.state)
        return args.func(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: the run was recorded as KILLED", file=sys.stderr)
        return 130
    except RunKilled as exc:
        print(f"terminated ({exc}): the run was recorded as KILLED", file=sys.stderr)
        return 143


if __name__ == "__main__":
    sys.exit(main())

