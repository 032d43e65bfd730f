"""``grpolab verdicts [CLAIM ...]``: run what is missing, print the verdict table, write the verdict
dashboard. Exit 0 (verdicts are results, whatever they say). Only the table goes to stdout
(``--format csv`` pipes into a CSV reader); progress, the dashboard path and the summary line go
to stderr."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from grpolab.commands import shared
from grpolab.errors import ConfigError


@dataclass(frozen=True)
class VerdictsOptions:
    names: tuple[str, ...]    # as given (claim names or files; none: every claim)
    claims: tuple             # the loaded claims
    state: str | None
    storage: str | None
    workers: int
    format: str
    no_run: bool
    until_decided: bool
    max_seeds: int | None
    batch: int


def add(sub) -> None:
    verdicts = sub.add_parser("verdicts", help="judge published claims on paired seeds (runs missing rows first)")
    verdicts.add_argument("claims", nargs="*", help="claim names (studies/claims/<name>.yaml) or claim files; default: all")
    verdicts.add_argument("--workers", type=int, default=1, help="worker processes for the missing rows")
    shared.storage_flag(verdicts)
    verdicts.add_argument("--format", choices=["markdown", "csv"], default="markdown")
    verdicts.add_argument("--no-run", action="store_true", help="judge only the rows already run; run nothing")
    shared.sequential_flags(verdicts, "every claim's verdict")
    verdicts.set_defaults(parse=parse, execute=execute)


def parse(args) -> VerdictsOptions:
    from grpolab.analysis.claims import claim_files, load_claim
    shared.at_least("--workers", args.workers, 1)
    if args.no_run and args.until_decided:
        raise ConfigError("--until-decided runs rows; it cannot go with --no-run")
    if not args.until_decided and (args.max_seeds is not None or args.batch is not None):
        raise ConfigError("--max-seeds and --batch: only with --until-decided")
    shared.at_least("--batch", args.batch, 1)
    claims = tuple(load_claim(path) for path in claim_files(args.claims))   # every claim and its study, before the heavy imports
    return VerdictsOptions(tuple(args.claims), claims, args.state, args.storage, args.workers, args.format,
                           args.no_run, args.until_decided, args.max_seeds,
                           2 if args.batch is None else args.batch)


def execute(options: VerdictsOptions) -> int:
    shared.check_stores(options.state, options.storage)
    from grpolab.analysis.claim_runs import AddedSeeds, judge_family, run_claims
    from grpolab.report.publish import record_study_tables
    from grpolab.report.verdict_page import claims_count, render_verdicts, write_claims_dashboard
    from grpolab.state import state_dir

    def note(line: str) -> None:
        print(line, file=sys.stderr, flush=True)
    state = state_dir(options.state)
    started = time.time()
    with _stdout_to_stderr():   # what the studies, their workers and libraries print is not table data
        if options.no_run:
            results = judge_family(list(options.claims), state, options.storage)
        else:
            added = AddedSeeds(options.until_decided, options.max_seeds, options.batch)
            results = run_claims(list(options.names), state, options.storage, options.workers, echo=note,
                                 added=added, publish=record_study_tables)
    table = render_verdicts(results, options.format)
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
