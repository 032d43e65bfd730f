"""``grpolab methods [--markdown]``: the method registry as a table of methods by axes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MethodsOptions:
    markdown: bool


def add(sub) -> None:
    methods = sub.add_parser("methods", help="print the method registry as a table of methods by axes")
    methods.add_argument("--markdown", action="store_true", help="GitHub markdown instead of plain text")
    methods.set_defaults(parse=parse, execute=execute)


def parse(args) -> MethodsOptions:
    return MethodsOptions(args.markdown)


def execute(options: MethodsOptions) -> int:
    from grpolab.method.table import methods_table
    print(methods_table(markdown=options.markdown))
    return 0
