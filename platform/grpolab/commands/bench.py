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
    bench.add_argument("--rollouts", type=int, default=None, help="with --what throughput: rollouts to time (default 2)")
    bench.add_argument("--preset", default=None, help="model preset (default: tiny for tracking, small for trainer)")
    bench.add_argument("--steps", type=int, default=None, help="steps per timed run (default 30)")
    bench.add_argument("--repeats", type=int, default=None,
                       help="timed runs per variant (default 3); cli: at least 3 (their median); workers: an even "
                            "count, repeats/2 rotations of its three configurations (default: 1 rotation); all: "
                            "an even count >= 4")
    bench.add_argument("--rows", type=int, default=None,
                       help="rows of the workers benchmark's study: an even count, rows/2 rungs x 2 seeds, at most "
                            "2 x the ladder's rungs (default 8)")
    bench.set_defaults(parse=parse, execute=execute)


# what each --what runs ("all": every benchmark but throughput, which needs its FILE)
RUNS = {"all": ("cli", "tracking", "trainer", "workers")}
# flag -> (the --what values that read it, its default)
READ_BY = {"--rollouts": (("throughput",), 2), "--preset": (("tracking", "trainer"), None),
           "--steps": (("tracking", "trainer", "workers"), 30),
           "--repeats": (("cli", "tracking", "trainer", "workers"), 3), "--rows": (("workers",), 8)}


def parse(args) -> BenchOptions:
    """Flags, counts and FILE checked before the benchmark's imports (torch, TRL) and before the
    state folder is made: a flag the chosen ``--what`` would not read is refused (it would be
    silently inert), and FILE must be a valid experiment or study, read only by throughput."""
    if args.what != "throughput" and args.file:
        raise ConfigError(f"bench FILE {args.file!r}: only read with --what throughput; valid: --what throughput FILE")
    runs = RUNS.get(args.what, (args.what,))
    values = {}
    for flag, (readers, default) in READ_BY.items():
        value = getattr(args, flag[2:])
        if value is not None and not set(runs) & set(readers):
            which = [*readers, *["all"] * bool(set(RUNS["all"]) & set(readers))]
            raise ConfigError(f"{flag}: not read by bench --what {args.what}; only by --what {' or '.join(which)} "
                              "(drop it, or choose one of those)")
        values[flag] = default if value is None else value
    for flag, least in (("--steps", 1), ("--repeats", 1), ("--rows", 2), ("--rollouts", 1)):
        shared.at_least(flag, values[flag], least)
    _check_counts(args.what, runs, args.repeats, args.rows)
    if args.what == "throughput":
        _check_file(args.file)
    return BenchOptions(args.what, args.file, values["--rollouts"], values["--preset"], values["--steps"],
                        values["--repeats"], values["--rows"], args.state)


def _check_counts(what: str, runs, repeats: int | None, rows: int | None) -> None:
    """A given count a benchmark would run otherwise is refused (it would be silently not what was
    asked): cli times the median of at least 3 runs, workers repeats/2 rotations (an even count) of
    rows/2 rungs x 2 seeds (an even count, at most the ladder's rungs x 2)."""
    cli, workers = "cli" in runs, "workers" in runs
    if repeats is not None and ((cli and repeats < 3) or (workers and repeats % 2)):
        valid = "an even count >= 4" if cli and workers else ">= 3" if cli else "an even count"
        why = [*(["cli times the median of at least 3 runs"] if cli else []),
               *(["workers runs repeats/2 rotations of its 3 configurations"] if workers else [])]
        raise ConfigError(f"--repeats {repeats}: bench --what {what} needs {valid} ({'; '.join(why)})")
    if rows is not None and workers:
        from grpolab.bench.workers import SEEDS, ladder_rungs
        most = len(SEEDS) * ladder_rungs()
        if rows % len(SEEDS) or rows > most:
            raise ConfigError(f"--rows {rows}: bench --what {what} needs an even count from 2 to {most} (rows/2 rungs "
                              f"of the ladder, {ladder_rungs()} rungs, x {len(SEEDS)} seeds)")


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
