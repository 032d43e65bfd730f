"""``grpolab eval RUN --benchmark B``: re-score saved models (a run, a study's runs or a run folder)
on named benchmarks, into a nested MLflow run."""

from __future__ import annotations

from dataclasses import dataclass

from grpolab.commands import shared

# a benchmark's own settings a flag replaces: (destination, flag, type), the names rescore reads
SETTINGS = (("n", "--n", int), ("temperature", "--temperature", float), ("top_p", "--top-p", float),
            ("max_tokens", "--max-tokens", int), ("size", "--size", int), ("seed", "--seed", int))


@dataclass(frozen=True)
class EvalOptions:
    target: str
    benchmarks: tuple[str, ...]
    overrides: dict           # SETTINGS' destinations -> the value given, or None
    checkpoints: str
    state: str | None
    storage: str | None


def add(sub) -> None:
    ev = sub.add_parser("eval", help="re-score saved models (a run, a study's runs or a run folder) on named benchmarks")
    ev.add_argument("target", metavar="RUN", help="an MLflow run id, a study file, or a run folder")
    ev.add_argument("--benchmark", action="append", required=True, metavar="B",
                    help="a benchmark the run declares, held_out, or a file / hub dataset (repeatable)")
    for _, flag, kind in SETTINGS:
        ev.add_argument(flag, type=kind, default=None, help="replaces the benchmark's own setting")
    ev.add_argument("--checkpoints", choices=["final", "all"], default="final",
                    help="the final model, or every complete checkpoint too")
    shared.storage_flag(ev)
    ev.set_defaults(parse=parse, execute=execute)


def parse(args) -> EvalOptions:
    overrides = {dest: getattr(args, dest) for dest, _, _ in SETTINGS}
    return EvalOptions(args.target, tuple(args.benchmark), overrides, args.checkpoints, args.state, args.storage)


def execute(options: EvalOptions) -> int:
    shared.check_stores(options.state, options.storage)
    from grpolab.analysis.rescore import OVERRIDES, rescore
    from grpolab.state import state_dir
    overrides = {k: options.overrides.get(k) for k in OVERRIDES}
    results = rescore(options.target, state_dir(options.state), list(options.benchmarks), overrides,
                      options.checkpoints, options.storage)
    from grpolab.report.publish import publish_rescored   # a ladder's parent run shows the re-scored tables
    publish_rescored(state_dir(options.state), options.target, results, overrides, options.storage)
    return 0
