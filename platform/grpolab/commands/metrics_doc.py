"""``grpolab metrics-doc``: the definition of every tracked metric, as docs/metrics.md holds it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MetricsDocOptions:
    pass


def add(sub) -> None:
    doc = sub.add_parser("metrics-doc", help="print the definition of every tracked metric (markdown)")
    doc.set_defaults(parse=parse, execute=execute)


def parse(args) -> MetricsDocOptions:
    return MetricsDocOptions()


def execute(options: MetricsDocOptions) -> int:
    from grpolab.tracking.metric_catalog import render_doc
    print(render_doc(), end="")
    return 0
