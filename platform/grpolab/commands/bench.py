"""``grpolab bench``: tracking and trainer overhead against stock TRL, worker throughput, one row's
generated tokens per second (bench/suite.py)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from grpolab.commands import shared
from grpolab.errors import ConfigError


@dataclass(frozen=True)
class BenchOptions:   # the names bench.suite.main reads
    what: str
    file: str | None
    rollouts: int
    preset: str | None
    steps: int
    repeats: int
    rows: int
    state: str | None


def add(sub) -> None:
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
    bench.set_defaults(parse=parse, execute=execute)


def parse(args) -> BenchOptions:
    """Counts and FILE checked before the benchmark's imports (torch, TRL) and before the state
    folder is made: FILE must be a valid experiment or study, and is read only by throughput."""
    for flag, value, least in (("--steps", args.steps, 1), ("--repeats", args.repeats, 1), ("--rows", args.rows, 2),
                               ("--rollouts", args.rollouts, 1)):
        shared.at_least(flag, value, least)
    if args.what != "throughput" and args.file:
        raise ConfigError(f"bench FILE {args.file!r}: only read with --what throughput; valid: --what throughput FILE")
    if args.what == "throughput":
        _check_file(args.file)
    return BenchOptions(args.what, args.file, args.rollouts, args.preset, args.steps, args.repeats, args.rows,
                        args.state)


def _check_file(path: str | None) -> None:
    if not path:
        raise ConfigError("bench --what throughput: give the experiment or study file to measure")
    from grpolab.yaml_input import read_yaml_mapping
    data = read_yaml_mapping(path, "bench file", "give an experiment or a study file")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # the row's notes are shown when it runs
        from grpolab.studies.definition import load_study   # (it registers the kinds)
        from grpolab.studies.kinds import names_a_kind
        if names_a_kind(data.get("kind")):
            load_study(path)
        else:
            from grpolab.experiment.config import load_experiment
            load_experiment(path)


def execute(options: BenchOptions) -> int:
    from grpolab.bench.suite import main as bench_main
    return bench_main(options)
