"""``grpolab study-rank SPEC`` (internal): one of the K processes of a row (studies/ranks.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RankOptions:
    spec: str


def add(sub) -> None:
    rank = sub.add_parser("study-rank")   # internal: no help=, so left out of the listing
    rank.add_argument("spec")
    rank.set_defaults(parse=parse, execute=execute)


def parse(args) -> RankOptions:
    return RankOptions(args.spec)


def execute(options: RankOptions) -> int:
    from grpolab.studies.row_on_ranks import run_rank
    run_rank(options.spec)
    return 0
