"""generation.backend=vllm: training rollouts AND grpolab's held-out eval come from the same vLLM
engine, with the same sampling settings, after the current weights are pushed into it.

vLLM cannot run here (no CUDA, no vLLM wheel): these tests drive TRL 1.16's own vLLM code path
(VLLMGeneration, weight sync, importance-sampling correction) against a test double of vLLM's
``LLM`` and TRL's ``VLLMClient`` (tests/vllm_double.py), not against vLLM itself."""

import pytest
import torch

import vllm_double
from grpolab.experiment import engines
from grpolab.experiment.config import build_config
from grpolab.errors import ConfigError
from grpolab.experiment.runner import run_experiment
from grpolab.world import generation

K, EVAL_PROMPTS, EVAL_CAP, TRAIN_CAP = 3, 4, 9, 12


def _config(mode: str):
    return build_config({
        "name": f"vllm-{mode}", "method": {"base": "grpo"}, "task": {"name": "addition", "digits": 2},
        "model": {"preset": "tiny"},
        "train": {"steps": 2, "group_size": 4, "prompts_per_rollout": 2, "learning_rate": 0.01, "save_every": 0,
                  "max_completion_length": TRAIN_CAP, "temperature": 0.9},
        "eval": {"every": 1, "prompts": EVAL_PROMPTS, "k": K, "max_completion_length": EVAL_CAP},
        "generation": {"backend": "vllm", "mode": mode, "server_base_url": "http://vllm.invalid:8000",
                       "is_correction": "token_truncate"},
        "tracking": {"flush_every": 1}})


def _no_transformers_sampling(*args, **kwargs):
    raise AssertionError("the held-out eval sampled with transformers generate while vLLM is on")


def _run(mode: str, state, monkeypatch):
    """One 2-step run under the double; at each eval, the engine's weights vs the trainer's."""
    from grpolab.experiment.starting_model import resolve_model_once
    from grpolab.tasks import make_task
    vllm_double.install(monkeypatch)
    cfg = _config(mode)
    # the warm start (cached per preset, task, seed) samples with transformers: done before the ban below;
    # it is also the model `trl vllm-serve --model` would serve in server mode
    model_dir, _ = resolve_model_once(cfg, make_task("addition", digits=2), state)
    vllm_double.VLLMClient.MODEL_PATH = str(model_dir)
    monkeypatch.setattr(generation, "generate", _no_transformers_sampling)   # sample() and evaluate() draw through it
    seen, at_eval = {}, {}

    def compare(step, metrics):
        engine, policy = vllm_double.ENGINES[0].model, seen["trainer"].model
        at_eval[step] = (max((a - b).abs().max().item() for a, b in zip(engine.parameters(), policy.parameters())),
                         [p.detach().clone() for p in engine.parameters()])
    result = run_experiment(cfg, state, on_trainer=lambda t: seen.update(trainer=t), eval_hook=compare)
    return result, seen["trainer"], at_eval


@pytest.mark.parametrize("mode", ["colocate", "server"])
def test_training_and_eval_both_sample_from_vllm_with_synced_weights(mode, shared_state, monkeypatch):
    result, trainer, at_eval = _run(mode, shared_state, monkeypatch)
    assert len(vllm_double.ENGINES) == 1 and trainer.use_vllm and trainer.vllm_mode == mode
    log = [c for c in vllm_double.ENGINE_LOG if c["kind"] == "generate"]
    train_calls = [c for c in log if c["max_tokens"] == TRAIN_CAP]
    eval_calls = [c for c in log if c["max_tokens"] == EVAL_CAP]
    assert len(train_calls) + len(eval_calls) == len(log)
    # training: TRL asks for the sampled tokens' log-probs (its IS correction), 2 prompts x 4 per step
    assert len(train_calls) >= 2 and all(c["logprobs"] == 0 and c["temperature"] == 0.9 for c in train_calls)
    assert sum(c["prompts"] * c["n"] for c in train_calls) == 2 * 2 * 4
    # eval at steps 0, 1, 2: k samples per prompt at the training temperature, then greedy (temperature 0)
    sampled = [c for c in eval_calls if c["temperature"] != 0]
    greedy = [c for c in eval_calls if c["temperature"] == 0]
    assert [(c["n"], c["prompts"], c["temperature"]) for c in sampled] == [(K, EVAL_PROMPTS, 0.9)] * 3
    assert [(c["n"], c["prompts"]) for c in greedy] == [(1, EVAL_PROMPTS)] * 3
    same = ("top_k", "top_p")
    assert all(c[key] == train_calls[0][key] for c in eval_calls for key in same)   # the trainer's sampling settings
    # the eval's numbers are the engine's completions: mean length of the k samples per eval
    for call, step in zip(sampled, sorted(result.evals)):
        assert result.evals[step]["eval/mean_length"] == pytest.approx(sum(call["lengths"]) / len(call["lengths"]))
    # each eval saw the policy's current weights (synced), and training moved them between evals
    assert sorted(at_eval) == [0, 1, 2]
    assert all(at_eval[s][0] == 0.0 for s in at_eval), {s: at_eval[s][0] for s in at_eval}
    assert any(not torch.equal(a, b) for a, b in zip(at_eval[0][1], at_eval[2][1]))
    # one weight push (each ends with a prefix-cache reset) per step 0, 1, 2: each eval pushes, and the
    # training generation of the same step reuses it (TRL's _last_loaded_step)
    assert len([c for c in vllm_double.ENGINE_LOG if c["kind"] == "reset_prefix_cache"]) == 3


def test_eval_without_the_sync_would_see_stale_weights(shared_state, monkeypatch):
    """The check above can fail: skip the eval's weight push and the engine lags the policy."""
    from grpolab.trainer.grpo_trainer import GrpoLabTrainer
    monkeypatch.setattr(GrpoLabTrainer, "sync_generation_weights", lambda self: None)
    _, _, at_eval = _run("colocate", shared_state, monkeypatch)
    assert at_eval[0][0] == 0.0        # step 0: the engine loaded the same initial weights
    assert at_eval[2][0] > 0           # after the last optimizer step no generation pushed them


def test_colocate_tensor_parallel_is_refused_at_config_time(monkeypatch):
    monkeypatch.setattr(engines, "vllm_installed", lambda: True)
    with pytest.raises(ConfigError, match=r"^generation.tensor_parallel_size: > 1 with mode=colocate"):
        build_config({"name": "tp", "generation": {"backend": "vllm", "tensor_parallel_size": 2}})
    cfg = build_config({"name": "tp", "generation": {"backend": "vllm", "mode": "server", "tensor_parallel_size": 2}})
    assert not any("transformers generate" in w for w in cfg.warnings)   # no more "eval still uses transformers"
