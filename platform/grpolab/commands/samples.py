"""``grpolab samples STUDY_OR_RUN``: one prompt's logged completions from every rung and seed."""

from __future__ import annotations

from dataclasses import dataclass

from grpolab.commands import shared


@dataclass(frozen=True)
class SamplesOptions:
    target: str
    state: str | None
    storage: str | None
    prompt: str | None
    step: int | None


def add(sub) -> None:
    samples = sub.add_parser("samples", help="one prompt's logged completions from every rung and seed, side by side")
    samples.add_argument("target", metavar="STUDY_OR_RUN", help="a study file, or an MLflow run id (a study's parent "
                         "run: its rows)")
    samples.add_argument("--prompt", default=None, help="the prompt containing TEXT (default: the prompt most runs logged)")
    samples.add_argument("--step", type=int, default=None, help="only this step's rollout")
    shared.storage_flag(samples)
    samples.set_defaults(parse=parse, execute=execute)


def parse(args) -> SamplesOptions:
    return SamplesOptions(args.target, args.state, args.storage, args.prompt, args.step)


def execute(options: SamplesOptions) -> int:
    shared.check_stores(options.state, options.storage)
    from grpolab.analysis.side_by_side import render, side_by_side
    from grpolab.state import state_path
    print(render(side_by_side(options.target, state_path(options.state), options.storage, options.prompt,
                              options.step)))
    return 0
