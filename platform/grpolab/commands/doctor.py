"""``grpolab doctor [--gpu]``: versions; with --gpu, the GPU, every method, a micro-ladder, stock TRL
vs grpolab step times and vLLM, into one JSON report (bench/gpu_check.py)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from grpolab.commands import shared
from grpolab.errors import ConfigError


@dataclass(frozen=True)
class DoctorOptions:
    gpu: bool
    out: str | None
    model: str | None
    steps: int
    state: str | None


def add(sub) -> None:
    doctor = sub.add_parser("doctor", help="check this machine: versions; with --gpu, the GPU, every method, a "
                            "micro-ladder, stock TRL vs grpolab step times and vLLM, into one JSON report")
    doctor.add_argument("--gpu", action="store_true", help="run the GPU checks (each is 'not checked' without CUDA)")
    doctor.add_argument("--out", default=None, metavar="FILE",
                        help="the JSON report (default: <state>/doctor/gpu-<time>.json)")
    doctor.add_argument("--model", default=None, metavar="DIR",
                        help="a local chat model for the vLLM and ladder checks (default: a tiny model built here)")
    doctor.add_argument("--steps", type=int, default=4,
                        help="optimizer steps per micro-ladder row and timed run (each method row runs 2)")
    doctor.set_defaults(parse=parse, execute=execute)


def parse(args) -> DoctorOptions:
    shared.at_least("--steps", args.steps, 1)
    if args.model is not None and not Path(args.model).is_dir():
        raise ConfigError(f"--model: {args.model} is not a folder (a local Hugging Face model directory)")
    return DoctorOptions(args.gpu, args.out, args.model, args.steps, args.state)


def execute(options: DoctorOptions) -> int:
    from grpolab.bench.gpu_check import GpuChecks, any_failed, gpu_report, summary_lines, versions
    from grpolab.state import state_dir
    if not options.gpu:
        print("versions: " + ", ".join(f"{k} {v or 'not installed'}" for k, v in versions().items()))
        print("give --gpu for the GPU checks (GPU, every method, micro-ladder, stock TRL vs grpolab timing, vLLM)")
        return 0
    state = state_dir(options.state)
    out = Path(options.out) if options.out else state / "doctor" / f"gpu-{time.strftime('%Y%m%d-%H%M%S')}.json"
    report = gpu_report(out, state, GpuChecks(options.model, options.steps))
    for line in summary_lines(report):
        print(line)
    return 1 if any_failed(report) else 0   # a GPU machine that cannot run grpolab fails `make gpu-check`
