"""``grpolab dashboard [FILE] [--runs IDS]``: an offline HTML dashboard of a study or of chosen runs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from grpolab.commands import shared
from grpolab.errors import ConfigError


@dataclass(frozen=True)
class DashboardOptions:
    path: str | None
    study: object | None      # the loaded StudyConfig, when a study file was given
    run_ids: tuple[str, ...]
    layout: str | None
    out: str | None
    state: str | None
    storage: str | None
    x: str | None
    seeds: str | None
    plotlyjs: str


def add(sub) -> None:
    dash = sub.add_parser("dashboard", help="write an offline HTML dashboard of a study or of chosen runs")
    dash.add_argument("study", nargs="?", help="path to studies/<name>.yaml (or use --runs)")
    dash.add_argument("--runs", help="comma-separated MLflow run ids to compare instead of a study")
    dash.add_argument("--layout", help="dashboards/<layout>.yaml (default: the built-in layout)")
    dash.add_argument("--out", help="output HTML path (default: <state>/dashboards/<what it shows>.html)")
    shared.storage_flag(dash)
    dash.add_argument("--x", choices=["steps", "tokens", "seconds", "accelerator_hours"], default=None,
                      help="x-axis of the curves (default: the layout's x, else steps)")
    dash.add_argument("--seeds", choices=["band", "lines", "both"], default=None,
                      help="seeds as a min-max band, one line each, or both (default: the layout's seeds, else band)")
    dash.add_argument("--plotlyjs", choices=["inline", "shared"], default="inline",
                      help="inline: one self-contained file (default); shared: one plotly.min.js beside the pages")
    dash.set_defaults(parse=parse, execute=execute)


def parse(args) -> DashboardOptions:
    from grpolab.report.layout import load_layout
    if args.layout is not None:
        load_layout(args.layout)   # a bad layout is answered before the state folder is touched
    if args.out and not Path(args.out).absolute().parent.is_dir():
        raise ConfigError(f"--out: the folder of {args.out!r} does not exist; create it first or give a path in an existing folder")
    if args.out and Path(args.out).is_dir():
        raise ConfigError(f"--out: {args.out!r} is a folder; give the path of the HTML file to write")
    study = None
    if args.study:
        from grpolab.studies.definition import load_study
        study = load_study(args.study)
    run_ids = tuple(r.strip() for r in (args.runs or "").split(",") if r.strip())
    return DashboardOptions(args.study, study, run_ids, args.layout, args.out, args.state, args.storage, args.x,
                            args.seeds, args.plotlyjs)


def execute(options: DashboardOptions) -> int:
    shared.check_stores(options.state, options.storage)
    from grpolab.report.dashboard import PageView, build_dashboard, default_output_name
    from grpolab.state import state_dir
    state = state_dir(options.state)
    run_ids = list(options.run_ids)
    name = default_output_name(options.path, run_ids, options.layout, options.x or "steps", options.seeds or "band")
    out = Path(options.out) if options.out else state / "dashboards" / name
    path = build_dashboard(state, out, options.path, run_ids, PageView(options.layout, options.x, options.seeds),
                           options.storage, plotlyjs=options.plotlyjs)
    parent = shared.parent_run_id(options.study, state, options.storage) if options.study is not None else None
    note = ""
    if parent:   # the study's parent run shows the latest page of this view
        from grpolab.report.publish import attach_dashboard, dashboard_artifact_name
        artifact = dashboard_artifact_name(options.path, options.layout, options.x, options.seeds)
        attach_dashboard(state, parent, path, artifact)
        note = f" (also {artifact} on the study's MLflow parent run {parent})"
    print(f"dashboard: {path.resolve()}{note}")
    return 0
