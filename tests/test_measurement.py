"""Issue 10: every ablation measures what its rung claims. Each test fails on the code before the
fix (commit 8b366f8) and asserts numbers."""

import math

import pytest
import torch
from mlflow.tracking import MlflowClient

from grpolab.config import build_config
from grpolab.tracking import tracking_uri


def _random_init_cfg(name, task, **train):
    return build_config({
        "name": name, "method": "grpo", "task": task, "model": {"preset": "tiny"},
        "warm_start": {"enabled": False},
        "train": {"steps": 1, "group_size": 4, "prompts_per_rollout": 4, **train},
        "eval": {"every": 0, "prompts": 8, "k": 2}, "tracking": {"flush_every": 1}})


# -- 1. the held-out eval samples at the run's training cap --------------------------------------

def test_eval_uses_the_training_completion_cap_and_logs_it(shared_state):
    from grpolab.runner import run_experiment
    cfg = _random_init_cfg("evalcap", {"name": "addition_scratchpad", "digits": 2}, max_completion_length=6)
    assert cfg.eval.max_completion_length == 6          # resolved from the training cap
    result = run_experiment(cfg, shared_state)
    run = MlflowClient(tracking_uri(shared_state)).get_run(result.run_id)
    assert run.data.params["eval.max_completion_length"] == "6"
    # a random-init model rarely stops early: at the task's own cap (44) its mean length was ~40
    assert 1 <= result.final_eval["eval/mean_length"] <= 6
    explicit = _random_init_cfg("evalcap2", {"name": "addition_scratchpad", "digits": 2}, max_completion_length=6)
    assert explicit.eval.max_completion_length == 6
    override = build_config({**{"name": "o", "task": {"name": "addition_scratchpad", "digits": 2}},
                             "train": {"max_completion_length": 6}, "eval": {"max_completion_length": 9}})
    assert override.eval.max_completion_length == 9
