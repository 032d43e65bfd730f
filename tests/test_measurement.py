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


# -- 5. the top-entropy mask selects policy-gradient tokens only; the in-loss KL stays on all ----

def test_top_entropy_mask_keeps_the_in_loss_kl_on_every_token():
    from grpolab.algorithms import policy_loss
    from grpolab.spec import build_spec
    logp = torch.log(torch.tensor([[0.5, 0.25, 0.5, 0.125]]))
    ref = torch.log(torch.tensor([[0.25, 0.25, 0.5, 0.25]]))
    mask, ent = torch.ones(1, 4), torch.tensor([[0.9, 0.1, 0.2, 0.8]])   # top half: tokens 0 and 3
    s = build_spec({"top_entropy_quantile": 0.5, "kl_coef": 0.1, "kl_estimator": "k1",
                    "aggregation": "token_mean_local"})
    A = torch.tensor([1.0])
    loss, stats = policy_loss(s, logp, logp.detach(), A, mask, ref, entropies=ent)
    # on-policy: surrogate -A * 1 on the 2 kept tokens; k1 KL x = logp - ref = (ln2, 0, 0, -ln2) on all 4
    kl = [math.log(2), 0.0, 0.0, -math.log(2)]
    expected = (-1.0 * 2 + 0.1 * sum(kl)) / 4
    assert loss.item() == pytest.approx(expected, abs=1e-6)
    # the gradient of the KL reaches the masked tokens 1 and 2 (coefficient 0.1 / 4 each)
    lp = logp.clone().requires_grad_(True)
    policy_loss(s, lp, lp.detach(), torch.tensor([0.0]), mask, ref, entropies=ent)[0].backward()
    assert lp.grad.flatten().tolist() == pytest.approx([0.025] * 4, abs=1e-6)
    assert stats["entropy/kept_fraction"] == pytest.approx(0.5)
