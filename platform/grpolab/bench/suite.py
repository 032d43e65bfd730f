"""Benchmarks (reported, never enforced by tests).

Detail: docs/testing.md, "grpolab.bench.suite".
"""

from __future__ import annotations

import statistics
import tempfile
import time
import warnings
from pathlib import Path
from typing import NamedTuple

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
    from grpolab.experiment.config import build_config
    return build_config({
        "name": f"bench-{'tracked' if tracked else 'untracked'}", "method": "grpo",
        "task": {"name": "addition", "digits": 2}, "model": {"preset": preset},
        "train": {"steps": steps, "group_size": 8, "prompts_per_rollout": 8},
        "eval": {"every": 0, "prompts": 8, "k": 1},
        "tracking": {"enabled": tracked, "experiment": "grpolab-bench", "flush_every": 20},
    })


def bench_tracking(state: Path, preset: str, steps: int, repeats: int) -> dict:
    from grpolab.experiment.runner import TrackingCallback, run_experiment
    per_step, accounted = {True: [], False: []}, []
    for _ in range(repeats):
        for tracked in (False, True):
            timer, trainers = _StepTimer(), []
            run_experiment(_cfg(preset, steps, tracked), state, callbacks=[timer], on_trainer=trainers.append)
            per_step[tracked].append(_steady(timer.times))  # skip warm-up steps
            if tracked:
                cb = next(c for c in trainers[0].callback_handler.callbacks if isinstance(c, TrackingCallback))
                accounted.append(cb.tracking_seconds / sum(timer.times))
    off, on = statistics.median(per_step[False]), statistics.median(per_step[True])
    return {"preset": preset, "steps": steps, "repeats": repeats, "untracked_s_per_step": off,
            "tracked_s_per_step": on, "ab_overhead_percent": 100 * (on / off - 1),
            "accounted_overhead_percent": 100 * statistics.median(accounted),
            "note": "A/B step times of separate runs carry run-to-run noise at this scale; the accounted "
                    "figure is time inside tracking code / training time of the same run"}


def _steady(times: list[float]) -> float:
    """Median seconds per step after the 2 warm-up steps (a run of <= 2 steps: its last step)."""
    return statistics.median(times[min(2, len(times) - 1):])


def _alternate(make_pair, repeats: int) -> dict:
    """Median seconds per optimizer step of stock (False) and grpolab (True) trainers, built and
    trained alternately ``repeats`` times each; the first 2 steps of each run are warm-up."""
    times = {True: [], False: []}
    for _ in range(repeats):
        for ours in (False, True):
            trainer = make_pair(ours)
            trainer.remove_callback(PrinterCallback)
            timer = _StepTimer()
            trainer.add_callback(timer)
            trainer.train()
            times[ours].append(_steady(timer.times))
    stock, mine = statistics.median(times[False]), statistics.median(times[True])
    return {"stock_trl_s_per_step": stock, "grpolab_s_per_step": mine, "ratio": mine / stock}


class BothTrainers(NamedTuple):
    """Settings given to the stock and the grpolab trainer alike: the GPU check's (bench/gpu_training.py)."""
    use_cpu: bool = True
    extra_args: dict | None = None    # GRPOConfig arguments, e.g. vLLM colocate, a completion length
    model_dir: Path | None = None     # a saved model instead of the preset's


def bench_trainer(preset: str, steps: int, repeats: int, precisions=("fp32", "bf16"), dropin: bool = True,
                  both: BothTrainers = BothTrainers()) -> dict:
    """GrpoLabTrainer(method="grpo") against stock GRPOTrainer (loss_type grpo, beta 0.04) on the
    same data and weights, in fp32 (what runs train in on CPU: ``train.dtype`` defaults to fp32)
    and in bf16 autocast (GRPOConfig's own default, emulated on CPUs); then the drop-in on TRL's
    quickstart script (``bench_dropin``). ``both``: ``use_cpu`` False, ``extra_args`` and ``model_dir``,
    given to both trainers alike."""
    use_cpu, extra_args, model_dir = both
    import datasets
    from trl import GRPOConfig, GRPOTrainer

    from grpolab.trainer.grpo_trainer import GrpoLabTrainer
    from grpolab.trainer.dropin import MethodSettingsWarning, task_correctness
    from grpolab.world.models import build_model, save_model
    from grpolab.world.generated import make_task

    task = make_task("addition", digits=2)
    train, _ = task.splits(0, 2000, 8)
    ds = datasets.Dataset.from_dict({"prompt": [e.prompt for e in train], "idx": list(range(len(train)))})
    tmp = Path(tempfile.mkdtemp())
    model_dir = model_dir or save_model(*build_model(preset, 0), tmp / "model")

    coin = make_task("random_reward")

    def reward(prompts, completions, idx, **kw):  # a fair coin: non-zero advantages from a random model
        return [coin.score(train[i], c)["random"] for i, c in zip(idx, completions)]

    out = {"preset": preset, "steps": steps, "repeats": repeats}
    for precision in precisions:
        def make(ours: bool):
            settings = dict(output_dir=str(tmp / "out"), report_to="none", max_steps=steps, logging_steps=1,
                            per_device_train_batch_size=64, num_generations=8, max_completion_length=8,
                            beta=0.04, loss_type="grpo", use_bias_correction_kl=False, use_cpu=use_cpu,
                            bf16=precision == "bf16", disable_tqdm=True, save_strategy="no", seed=0, top_k=0)
            args = GRPOConfig(**{**settings, **(extra_args or {})})
            kw = dict(model=str(model_dir), reward_funcs=[reward], args=args, train_dataset=ds)
            if ours:
                with warnings.catch_warnings():   # the GRPOConfig above is stock's; the method's changes are the point
                    warnings.simplefilter("ignore", MethodSettingsWarning)
                    return GrpoLabTrainer(**kw, method="grpo", correctness=task_correctness(task, train))
            return GRPOTrainer(**kw)
        out[precision] = _alternate(make, repeats)
    if dropin:
        out["dropin_quickstart"] = bench_dropin(model_dir, ds, steps, repeats)
    return out


def reward_num_unique_chars(completions, **kwargs):
    """TRL's GRPO quickstart reward."""
    return [len(set(c)) for c in completions]


def bench_dropin(model_dir: Path, dataset, steps: int, repeats: int) -> dict:
    """TRL's GRPO quickstart script as a user runs it, with ``GRPOTrainer`` and with the drop-in
    ``GrpoLabTrainer``: GRPOConfig defaults except the step budget, fp32 and a completion cap of
    128 (the toy models hold 256 positions; the default cap is 512), offline (a local model and
    dataset). The drop-in's method is the stock defaults' update rule (loss_type dapo = token-mean
    aggregation, beta 0, group std, clip 0.2), so both train the same thing."""
    from trl import GRPOConfig, GRPOTrainer

    from grpolab.trainer.grpo_trainer import GrpoLabTrainer
    method = {"name": "grpo", "aggregation": "token_mean", "kl_coef": 0.0}

    def make(ours: bool):
        args = GRPOConfig(output_dir=str(Path(tempfile.mkdtemp()) / "quickstart"), report_to="none",
                          max_steps=steps, use_cpu=True, bf16=False, max_completion_length=128, disable_tqdm=True,
                          save_strategy="no")
        kw = dict(model=str(model_dir), reward_funcs=reward_num_unique_chars, args=args, train_dataset=dataset)
        if not ours:
            return GRPOTrainer(**kw)
        with warnings.catch_warnings():   # the quickstart has no correctness source (said once, on purpose)
            warnings.simplefilter("ignore")
            return GrpoLabTrainer(**kw, method=method)
    return {"method": method, "max_completion_length": 128, **_alternate(make, repeats)}


def bench_cli(repeats: int) -> dict:
    import subprocess
    import sys
    out = {}
    # config_typo reads the shipped experiments/smoke.yaml: run from the checkout (`make bench` does)
    cases = (("typo", ["tpyo"]), ("config_typo", ["run", "experiments/smoke.yaml", "train.stepz=3"]),
             ("version", ["--version"]), ("methods", ["methods"]))
    for label, argv in cases:
        times = []
        for _ in range(repeats):   # at least 3: commands/bench.py refuses fewer
            start = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "grpolab.cli", *argv], capture_output=True, text=True)
            times.append(time.perf_counter() - start)
        out[f"{label}_s"] = round(statistics.median(times), 3)
        out[f"{label}_exit"] = done.returncode
    return out


def main(args) -> int:
    import json

    from grpolab.state import state_dir
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
    if args.what == "throughput":   # not in "all": it needs the file whose row it measures
        from grpolab.bench.throughput import bench_throughput
        out["throughput"] = bench_throughput(state_dir(args.state), getattr(args, "file", None),
                                             getattr(args, "rollouts", 2))
        print(json.dumps(out["throughput"], indent=2), flush=True)
    if args.what in ("workers", "all"):
        from grpolab.bench.workers import bench_workers
        # a given --repeats is even (commands/bench.py); the default 3 gives 1 rotation
        out["workers"] = bench_workers(state_dir(args.state), rows=args.rows, steps=args.steps,
                                       repeats=max(1, args.repeats // 2))
        print(json.dumps(out["workers"], indent=2), flush=True)
    return 0
