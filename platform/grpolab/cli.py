"""grpolab command line: run | study | table | dashboard | verdicts | methods | metrics-doc | bench.

The parser, the global flags and the way out; each command lives in its own module of
``grpolab.commands`` (its flags, a parse step into a validated options record, and the ``execute``
the Python API calls too). Imports are lazy: parsing (and a typo's answer) never loads torch, TRL or
MLflow. Exit codes: 0 done; 1 a row, run or write failed, ``study`` left rows open, or ``doctor``
found a check failed (the command says which); 2 bad input, one ``error:`` line before any model is
loaded (fix the input); 75 (EX_TEMPFAIL) a tracking server or database that does not answer at
start, or a database study storage gone mid-command past its patience, one ``error:`` line (start
it, run the same command again); 130 Ctrl-C and 143 SIGTERM (the run recorded KILLED); 141
stdout's reader left (a closed pipe).
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import sys
import warnings

from grpolab.commands import (bench, dashboard, doctor, evaluate, methods, metrics_doc, run, samples, study, study_rank,
                              study_worker, table, verdicts)
from grpolab.errors import ConfigError, GrpoLabWarning
from grpolab.signals import RunKilled
from grpolab.startup import own_process, quiet_process, start_up

# in the order the parser lists them (study-worker and study-rank are internal: not listed)
COMMANDS = (run, study, study_worker, study_rank, table, samples, dashboard, verdicts, evaluate, methods, metrics_doc,
            bench, doctor)


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
    for command in COMMANDS:
        command.add(sub)
    return parser


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
        return args.execute(args.parse(args))
    except ConfigError as exc:   # bad input; a store that does not answer now says 75 (its exit_code)
        print(f"error: {exc}", file=sys.stderr)
        return getattr(exc, "exit_code", 2)
    except KeyboardInterrupt:
        print("interrupted: the run was recorded as KILLED", file=sys.stderr)
        return 130
    except RunKilled as exc:
        print(f"terminated ({exc}): the run was recorded as KILLED", file=sys.stderr)
        return 143


if __name__ == "__main__":
    sys.exit(main())

