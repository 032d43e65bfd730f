"""Benchmarks (reported, never enforced by tests).

tracking: the same run with MLflow tracking on and off, alternating; reports the median
          training seconds per optimizer step of each and the overhead.
trainer:  grpolab's GrpoLabTrainer (GRPO spec) against stock TRL GRPOTrainer (loss_type grpo,
          beta 0.04) on the same data and weights, alternating in one process; reports the
          step-time ratio.
workers:  rows per minute of the same small study with 1 and with 2 worker processes, and their
          ratio (bench_workers.py).
cli:      seconds from starting `grpolab` to its answer for a typo'd subcommand (exit 2),
          `--version` and `methods` (median of fresh processes): parsing never imports torch/TRL.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback


class _StepTimer(TrainerCallback):
    def __init__(self):
        self.times, self._t = [], None

    def on_step_begin(self, args, state, control, **kw):
        self._t = time.perf_counter()

    def on_step_end(self, args, state, control, **kw):
        self.times.append(time.perf_counter() - self._t)


def _cfg(preset: str, steps: int, tracked: bool):
    from .config import build_config
    return build_config({
        "name": f"bench-{'tracked' if tracked else 'untracked'}", "method": "grpo",
        "task": {"name": "addition", "digits": 2}, "model": {"preset": preset},
        "train": {"steps": steps, "group_size": 8, "prompts_per_rollout": 8},
        "eval": {"every": 0, "prompts": 8, "k": 1},
        "tracking": {"enabled": tracked, "experiment": "grpolab-bench", "flush_every": 20},
    })


def bench_tracking(state: Path, preset: str, steps: int, repeats: int) -> dict:
    from .runner import TrackingCallback, run_experiment
    per_step, accounted = {True: [], False: []}, []
    for _ in range(repeats):
        for tracked in (False, True):
            timer, trainers = _StepTimer(), []
            run_experiment(_cfg(preset, steps, tracked), state, callbacks=[timer], on_trainer=trainers.append)
            per_step[tracked].append(statistics.median(timer.times[2:]))  # skip warm-up steps
            if tracked:
                cb = next(c for c in trainers[0].callback_handler.callbacks if isinstance(c, TrackingCallback))
                accounted.append(cb.tracking_seconds / sum(timer.times))
    off, on = statistics.median(per_step[False]), statistics.median(per_step[True])
    return {"preset": preset, "steps": steps, "repeats": repeats, "untracked_s_per_step": off,
            "tracked_s_per_step": on, "ab_overhead_percent": 100 * (on / off - 1),
            "accounted_overhead_percent": 100 * statistics.median(accounted),
            "note": "A/B step times of separate runs carry run-to-run noise at this scale; the accounted "
                    "figure is time inside tracking code / training time of the same run"}


def bench_trainer(preset: str, steps: int, repeats: int) -> dict:
    import datasets
    from trl import GRPOConfig, GRPOTrainer

    from .methods import get_method
    from .trainer import GrpoLabTrainer
    from .world.models import build_model, save_model
    from .world.tasks import make_task

    task = make_task("addition", digits=2)
    train, _ = task.splits(0, 2000, 8)
    ds = datasets.Dataset.from_dict({"prompt": [e.prompt for e in train], "idx": list(range(len(train)))})
    tmp = Path(tempfile.mkdtemp())
    model_dir = save_model(*build_model(preset, 0), tmp / "model")

    coin = make_task("random_reward")

    def reward(prompts, completions, idx, **kw):  # a fair coin: non-zero advantages from a random model
        return [coin.score(train[i], c)["random"] for i, c in zip(idx, completions)]

    def make(ours: bool):
        args = GRPOConfig(output_dir=str(tmp / "out"), report_to="none", max_steps=steps, logging_steps=1,
                          per_device_train_batch_size=64, num_generations=8, max_completion_length=8,
                          beta=0.04, loss_type="grpo", use_bias_correction_kl=False, use_cpu=True,
                          disable_tqdm=True, save_strategy="no", seed=0, top_k=0)
        kw = dict(model=str(model_dir), reward_funcs=[reward], args=args, train_dataset=ds)
        if ours:
            return GrpoLabTrainer(**kw, spec=get_method("grpo").spec(), task=task, examples=train)
        return GRPOTrainer(**kw)

    times = {True: [], False: []}
    for _ in range(repeats):
        for ours in (False, True):
            trainer = make(ours)
            trainer.remove_callback(PrinterCallback)
            timer = _StepTimer()
            trainer.add_callback(timer)
            trainer.train()
            times[ours].append(statistics.median(timer.times[2:]))
    stock, mine = statistics.median(times[False]), statistics.median(times[True])
    return {"preset": preset, "steps": steps, "repeats": repeats, "stock_trl_s_per_step": stock,
            "grpolab_s_per_step": mine, "ratio": mine / stock}


def bench_cli(repeats: int) -> dict:
    import subprocess
    import sys
    out = {}
    for label, argv in (("typo", ["tpyo"]), ("version", ["--version"]), ("methods", ["methods"])):
        times = []
        for _ in range(max(repeats, 3)):
            start = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "grpolab.cli", *argv], capture_output=True, text=True)
            times.append(time.perf_counter() - start)
        out[f"{label}_s"] = round(statistics.median(times), 3)
        out[f"{label}_exit"] = done.returncode
    return out


def main(args) -> int:
    import json

    from .state import state_dir
    out = {}
    if args.what in ("cli", "all"):
        out["cli"] = bench_cli(args.repeats)
        print(json.dumps(out["cli"], indent=2), flush=True)
    if args.what in ("tracking", "all"):
        out["tracking"] = bench_tracking(state_dir(args.state), args.preset or "tiny", args.steps, args.repeats)
        print(json.dumps(out["tracking"], indent=2), flush=True)
    if args.what in ("trainer", "all"):
        out["trainer"] = bench_trainer(args.preset or "small", args.steps, args.repeats)
        print(json.dumps(out["trainer"], indent=2), flush=True)
    if args.what in ("workers", "all"):
        from .bench_workers import bench_workers
        out["workers"] = bench_workers(state_dir(args.state), rows=8, steps=args.steps, repeats=max(1, args.repeats // 2))
        print(json.dumps(out["workers"], indent=2), flush=True)
    return 0
