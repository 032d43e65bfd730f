"""grpolab command line: run | study | table | dashboard | methods | metrics-doc | bench.

Bad input exits with code 2 and a one-line message, before any model is loaded.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import warnings
from pathlib import Path

from .errors import ConfigError
from .tracking_signals import RunKilled


def _cmd_run(args) -> int:
    from .config import load_experiment
    from .runner import run_experiment
    from .state import state_dir

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = load_experiment(args.experiment, args.overrides)
    for w in caught:
        print(f"warning: {w.message}", file=sys.stderr)
    state = state_dir(args.state)
    resume = None
    if args.resume or args.resume_run:  # continue the same MLflow run from its newest checkpoint
        from .checkpoints import resume_target
        from .tracking import client_for
        resume = resume_target(client_for(state), cfg.tracking.experiment, f"{cfg.name}-s{cfg.seed}", state,
                               args.resume_run)
    result = run_experiment(cfg, state, resume_run_id=resume)
    summary = {
        "run_id": result.run_id, "status": result.status, "steps": result.steps,
        "wall_seconds": round(result.wall_seconds, 1),
        "eval_start": {k: round(v, 4) for k, v in result.start_eval.items()},
        "eval_final": {k: round(v, 4) for k, v in result.final_eval.items()},
        "warm_start_cache_hit": result.warm_start.get("cache_hit"),
    }
    print(json.dumps(summary, indent=2))
    return 0


def _cmd_methods(args) -> int:
    from .tables import methods_table
    print(methods_table(markdown=args.markdown))
    return 0


def _cmd_metrics_doc(args) -> int:
    from .metrics import render_doc
    print(render_doc(), end="")
    return 0


def _cmd_verdicts(args) -> int:
    from .claim_runs import verdicts_command
    return verdicts_command(args)


def _cmd_bench(args) -> int:
    from .bench import main as bench_main
    return bench_main(args)


def _cmd_study(args) -> int:
    from .state import state_dir
    from .studies import run_study
    if args.workers < 1:
        raise ConfigError(f"--workers: must be >= 1, got {args.workers}")
    code = run_study(args.study, state_dir(args.state), args.storage, args.workers, args.retry_failed,
                     accept_changed=args.accept_changed)
    if args.table:
        from .results import study_table
        print(study_table(args.study, state_dir(args.state), args.storage, "markdown"))
    if args.dashboard:
        from .dashboards import build_dashboard
        out = state_dir(args.state) / "dashboards" / f"{Path(args.study).stem}.html"
        print(f"dashboard: {build_dashboard(state_dir(args.state), out, args.study, storage_url=args.storage).resolve()}")
    return code


def _cmd_study_worker(args) -> int:
    from .state import state_dir
    from .studies import worker_loop
    from .study_config import load_study
    worker_loop(load_study(args.study), args.storage, state_dir(args.state))
    return 0


def _cmd_table(args) -> int:
    from .results import study_table
    from .state import state_dir
    print(study_table(args.study, state_dir(args.state), args.storage, args.format, args.metric))
    return 0


def _cmd_dashboard(args) -> int:
    from .dashboards import build_dashboard
    from .state import state_dir
    state = state_dir(args.state)
    run_ids = [r for r in (args.runs or "").split(",") if r]
    name = Path(args.study).stem if args.study else "runs"
    out = Path(args.out) if args.out else state / "dashboards" / f"{name}.html"
    path = build_dashboard(state, out, args.study, run_ids, args.layout, args.storage)
    print(f"dashboard: {path.resolve()}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="grpolab", description=__doc__.splitlines()[0])
    parser.add_argument("--state", default=None, help="state folder (default $GRPOLAB_STATE or ./grpolab-state)")
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="train one experiment YAML and record it in MLflow")
    run.add_argument("experiment", help="path to experiments/<name>.yaml")
    run.add_argument("overrides", nargs="*", help="key.path=value overrides, e.g. train.steps=50 method.eps_high=0.28")
    run.add_argument("--resume", action="store_true", help="continue the newest unfinished run of this experiment "
                     "(same name and seed) from its last checkpoint, in the same MLflow run")
    run.add_argument("--resume-run", metavar="RUN_ID", help="continue this MLflow run from its last checkpoint")
    run.set_defaults(func=_cmd_run)
    methods = sub.add_parser("methods", help="print the method registry as a table of methods by axes")
    methods.add_argument("--markdown", action="store_true", help="GitHub markdown instead of plain text")
    methods.set_defaults(func=_cmd_methods)
    doc = sub.add_parser("metrics-doc", help="print the definition of every tracked metric (markdown)")
    doc.set_defaults(func=_cmd_metrics_doc)
    study = sub.add_parser("study", help="run an ablation ladder or search with Optuna (resumable)")
    study.add_argument("study", help="path to studies/<name>.yaml")
    study.add_argument("--workers", type=int, default=1, help="worker processes on this machine")
    study.add_argument("--storage", default=None, help="Optuna storage URL (default: journal file in the state folder; "
                       "postgresql://... to share rows with workers on other machines)")
    study.add_argument("--retry-failed", action="store_true", help="re-queue rows that failed with an error")
    study.add_argument("--accept-changed", action="store_true",
                       help="go on although the study file changed since its rows were made (keeps the old rows)")
    study.add_argument("--table", action="store_true", help="print the results table at the end")
    study.add_argument("--dashboard", action="store_true", help="write the study's HTML dashboard at the end")
    study.set_defaults(func=_cmd_study)
    worker = sub.add_parser("study-worker", help="(internal) one worker process of `grpolab study`")
    worker.add_argument("study")
    worker.add_argument("--storage", required=True)
    worker.set_defaults(func=_cmd_study_worker)
    table = sub.add_parser("table", help="results table of a study: mean, 95%% CI, paired deltas, published values")
    table.add_argument("study", help="path to studies/<name>.yaml")
    table.add_argument("--storage", default=None)
    table.add_argument("--format", choices=["markdown", "csv", "latex"], default="markdown")
    table.add_argument("--metric", default=None, help="which objective of the study (default: the first)")
    table.set_defaults(func=_cmd_table)
    dash = sub.add_parser("dashboard", help="write an offline HTML dashboard of a study or of chosen runs")
    dash.add_argument("study", nargs="?", help="path to studies/<name>.yaml (or use --runs)")
    dash.add_argument("--runs", help="comma-separated MLflow run ids to compare instead of a study")
    dash.add_argument("--layout", help="dashboards/<layout>.yaml (default: the built-in layout)")
    dash.add_argument("--out", help="output HTML path (default: <state>/dashboards/<study>.html)")
    dash.add_argument("--storage", default=None, help="Optuna storage URL of the study")
    dash.set_defaults(func=_cmd_dashboard)
    verdicts = sub.add_parser("verdicts", help="judge published claims on paired seeds (runs missing rows first)")
    verdicts.add_argument("claims", nargs="*", help="claim names (studies/claims/<name>.yaml) or claim files; default: all")
    verdicts.add_argument("--workers", type=int, default=1, help="worker processes for the missing rows")
    verdicts.add_argument("--storage", default=None, help="Optuna storage URL of the claims' studies")
    verdicts.add_argument("--format", choices=["markdown", "csv"], default="markdown")
    verdicts.add_argument("--no-run", action="store_true", help="judge only the rows already run; run nothing")
    verdicts.set_defaults(func=_cmd_verdicts)
    bench = sub.add_parser("bench", help="measure tracking and trainer overhead against stock TRL, and 2-worker study throughput")
    bench.add_argument("--what", choices=["tracking", "trainer", "workers", "all"], default="all")
    bench.add_argument("--preset", default=None, help="model preset (default: tiny for tracking, small for trainer)")
    bench.add_argument("--steps", type=int, default=30)
    bench.add_argument("--repeats", type=int, default=3)
    bench.set_defaults(func=_cmd_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")  # offline clusters: no phoning home
    warnings.filterwarnings("ignore", category=FutureWarning, module="transformers")  # TRL's deprecated kwargs
    if not args.verbose:  # per-load progress bars and store-migration chatter drown the study progress
        import transformers
        transformers.utils.logging.disable_progress_bar()
        transformers.utils.logging.set_verbosity_error()
        logging.getLogger("mlflow").setLevel(logging.WARNING)
    try:
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
