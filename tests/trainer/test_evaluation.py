"""The drop-in trainer's ``evaluate()``: TRL's ``prediction_step`` computes the method's own loss on
the evaluation batch, so the loss inputs grpolab adds to a training batch (the groups, the combined
reward, correctness: ``BatchExtras``) ride on the evaluation batch too. The methods that read them
in the loss: group_dpo (a pairwise surrogate: groups and rewards) and VAPO (the LM term on correct
completions)."""

import math

import pytest

from grpolab import GrpoLabTrainer


def _data(n):
    import datasets
    from grpolab.world.generated import make_task
    train, held = make_task("addition", digits=2).splits(0, n, 4)
    return tuple(datasets.Dataset.from_dict({"prompt": [e.prompt for e in examples],
                                             "answer": [e.answer for e in examples]}) for examples in (train, held))


def _reward(completions, answer, **kwargs):
    """1 for a completion that is the answer, else a small length-dependent reward (the groups' rows differ)."""
    return [1.0 if c.strip() == a else 0.01 * len(c) for c, a in zip(completions, answer)]


@pytest.mark.parametrize("method", ["vapo", "group_dpo"])
def test_evaluate_computes_the_methods_loss_on_the_evaluation_batch(method, tiny_model_dir, tmp_path):
    from trl import GRPOConfig
    train, held = _data(16)
    args = GRPOConfig(output_dir=str(tmp_path / "out"), report_to="none", max_steps=1, logging_steps=1,
                      per_device_train_batch_size=8, per_device_eval_batch_size=8, num_generations=4,
                      num_generations_eval=2, max_completion_length=8, use_cpu=True, bf16=False, disable_tqdm=True,
                      save_strategy="no", seed=0, top_k=0)
    trainer = GrpoLabTrainer(model=str(tiny_model_dir), reward_funcs=[_reward], args=args, train_dataset=train,
                             eval_dataset=held, method=method, correctness="answer", answer_extractor="none")
    metrics = trainer.evaluate()
    assert "eval_loss" in metrics and math.isfinite(metrics["eval_loss"])
    assert all(math.isfinite(v) for v in metrics.values() if isinstance(v, float))
    assert metrics["eval_policy_loss"] == pytest.approx(metrics["eval_loss"], abs=1e-6)
    if method == "group_dpo":
        assert metrics["eval_dpo/pairs"] >= 1   # groups of num_generations_eval rows, with distinct rewards
