"""A rank that falls back to the CPU on a GPU machine (engines.trains_on_cuda: more ranks than
devices) must act on the device its trainer uses, not on what torch.cuda reports: its run is
tagged CPU, it never synchronizes a GPU, and a seeded draw forks only its own model's CUDA
generator (none on the CPU). CUDA is faked here: torch.cuda.is_available answers True."""

import contextlib
from types import SimpleNamespace

import pytest
import torch
from mlflow.tracking import MlflowClient

from grpolab.tasks import make_task
from grpolab.tasks.benchmarks import Benchmark, rng_devices, score_benchmark
from grpolab.trainer.step_times import RunCounters, StepTimes


def _fake_cuda(monkeypatch, devices: int = 4) -> list:
    """torch.cuda says ``devices`` GPUs; fork_rng and synchronize record what they are asked for."""
    calls: list = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: devices)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(("synchronize", device)))

    @contextlib.contextmanager
    def fork_rng(devices=None, **kw):
        calls.append(("fork_rng", list(devices)))
        yield
    monkeypatch.setattr(torch.random, "fork_rng", fork_rng)
    return calls


def test_rng_devices_are_the_models_own():
    assert rng_devices(torch.device("cpu")) == rng_devices(None) == []
    assert rng_devices(torch.device("cuda", 2)) == [2] and rng_devices("cuda:1") == [1]


def test_a_benchmark_draw_forks_only_its_models_generator(monkeypatch):
    calls = _fake_cuda(monkeypatch)
    task = make_task("addition", digits=2)
    examples = task.splits(0, 0, 2)[1]

    def draw(prompts, n, max_new_tokens, temperature, top_p, seed):
        return ["1"] * (len(prompts) * n), [1] * (len(prompts) * n)
    bench = Benchmark("b", n=2, max_tokens=4)
    score_benchmark(bench, task, examples, draw, 0, device=torch.device("cuda", 2))
    score_benchmark(bench, task, examples, draw, 0, device=torch.device("cpu"))
    assert calls == [("fork_rng", [2]), ("fork_rng", [])]


@pytest.mark.parametrize("device,synchronized", [("cpu", []), ("cuda:1", [("synchronize", torch.device("cuda", 1))])])
def test_a_window_synchronizes_only_the_trainers_own_gpu(monkeypatch, device, synchronized):
    calls = _fake_cuda(monkeypatch)
    times = StepTimes(RunCounters())
    accelerator = SimpleNamespace(device=torch.device(device), num_processes=1)
    curves = times.step_ends(times.step_starts(), True, accelerator)   # the step that ends a window
    assert "time/accelerator_hours" in curves and calls == synchronized


def test_a_run_trained_on_the_cpu_is_tagged_cpu_while_cuda_is_visible(tmp_path, monkeypatch):
    from grpolab.experiment.config import build_config
    from grpolab.experiment.runner import run_experiment
    from grpolab.tracking.recorder import tracking_uri
    cfg = build_config({"name": "cpu-tag", "method": {"base": "grpo"}, "task": {"name": "random_reward"},
                        "model": {"preset": "tiny"}, "warm_start": {"enabled": False},
                        "train": {"steps": 1, "group_size": 2, "prompts_per_rollout": 2, "save_every": 0},
                        "eval": {"every": 0, "prompts": 2, "k": 1}})
    seen = {}

    def on_trainer(trainer):   # built on the CPU; from here on torch.cuda says a GPU is visible
        seen["device"] = trainer.accelerator.device.type
        _fake_cuda(monkeypatch, devices=1)
    result = run_experiment(cfg, tmp_path, on_trainer=on_trainer)
    tags = MlflowClient(tracking_uri(tmp_path)).get_run(result.run_id).data.tags
    assert seen["device"] == "cpu" and tags["grpolab.accelerator"] == "CPU"
