"""``grpolab table FILE``: a study's results table (mean, 95 % CI, paired deltas, published values),
also published to the study's MLflow parent run."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from grpolab.commands import shared
from grpolab.errors import ConfigError


@dataclass(frozen=True)
class TableOptions:
    path: str
    study: object             # the loaded StudyConfig
    state: str | None
    storage: str | None
    format: str
    metric: str | None
    scaling: dict             # the scaling fit's compute axis and window (scaling_frame's arguments)


def add(sub) -> None:
    table = sub.add_parser("table", help="results table of a study: mean, 95%% CI, paired deltas, published values")
    table.add_argument("study", help="path to studies/<name>.yaml")
    shared.storage_flag(table)
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
    table.set_defaults(parse=parse, execute=execute)


def parse(args) -> TableOptions:
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
    scaling = {"compute": args.scaling_x, "skip_below": args.scaling_skip, "fit_upto": args.scaling_fit_upto}
    return TableOptions(args.study, study, args.state, args.storage, args.format, args.metric, scaling)


def execute(options: TableOptions) -> int:
    shared.check_stores(options.state, options.storage)
    from grpolab.report.tables import study_table
    from grpolab.state import state_dir
    state = state_dir(options.state)
    print(study_table(options.path, state, options.storage, options.format, options.metric, dict(options.scaling)),
          flush=True)
    parent = shared.parent_run_id(options.study, state, options.storage)
    if parent:   # the parent run shows the latest table (md and csv), whatever format was printed
        from grpolab.report.publish import publish_tables
        publish_tables(state, parent, options.path, options.storage)
        print(f"table.md / table.csv updated on the study's MLflow parent run {parent}", file=sys.stderr)
    return 0
