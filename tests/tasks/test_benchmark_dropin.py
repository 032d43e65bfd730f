"""The drop-in GrpoLabTrainer's benchmark scores inside TRL's evaluation loop, and its answer
extractors."""

import pytest


def test_dropin_evaluation_logs_benchmark_scores_under_trls_eval_prefix(tiny_model_dir, tmp_path):
    import datasets
    from trl import GRPOConfig
    from grpolab import GrpoLabTrainer
    from grpolab.world.generated import make_task
    task = make_task("addition", digits=2)
    train, held = task.splits(0, 32, 6)
    def data(examples):
        return datasets.Dataset.from_dict({"prompt": [e.prompt for e in examples], "answer": [e.answer for e in examples]})
    args = GRPOConfig(output_dir=str(tmp_path / "out"), report_to="none", max_steps=2, logging_steps=1,
                      per_device_train_batch_size=8, per_device_eval_batch_size=8, num_generations=4,
                      num_generations_eval=8, max_completion_length=8, use_cpu=True, bf16=False, disable_tqdm=True,
                      save_strategy="no", seed=0, top_k=0, eval_strategy="steps", eval_steps=1)

    def reward(completions, answer, **kwargs):
        return [float(c.strip() == a) for c, a in zip(completions, answer)]

    def even_length(completions, **kwargs):   # a correctness source this random model meets about half the time
        return [float(len(c) % 2 == 0) for c in completions]
    trainer = GrpoLabTrainer(model=str(tiny_model_dir), reward_funcs=[reward, even_length], args=args, train_dataset=data(train),
                             eval_dataset=data(held), method="grpo", correctness="answer", answer_extractor="none")
    trainer.train()
    evals = [h for h in trainer.state.log_history if "eval_avg_at_8" in h]
    assert [h["step"] for h in evals] == [1, 2]   # at every eval step, beside TRL's own eval metrics
    for h in evals:
        assert {f"eval_pass_at_{k}" for k in (1, 2, 4, 8)} | {"eval_maj_at_8", "eval_sd_at_8", "eval_reward"} <= set(h)
        assert h["eval_avg_at_8"] == pytest.approx(h["eval_pass_at_1"]) and 0 <= h["eval_pass_at_8"] <= 1
    # the same scores as scoring the trained model directly, same seed, same settings
    direct = trainer.benchmark_scores(data(held))
    assert direct["avg_at_8"] == trainer.evaluate()["eval_avg_at_8"]
    # with the reward function as the correctness source the scores agree (reward 1 = the answer)
    trainer.correctness.kind, trainer.correctness.key = "reward", 0
    assert trainer.benchmark_scores(data(held)) == direct
    # scores strictly between 0 and 1 (a random model answers no sum right): TRL's evaluation reports
    # exactly the direct scores, each of them, and they are the samples' pass@k, not a constant
    trainer.correctness.kind, trainer.correctness.key = "reward", 1
    halves = trainer.benchmark_scores(data(held))
    assert 0 < halves["avg_at_8"] < halves["pass_at_2"] <= halves["pass_at_8"] <= 1
    assert {f"eval_{k}": v for k, v in halves.items()} == {k: v for k, v in trainer.evaluate().items()
                                                          if k.removeprefix("eval_") in halves}
    trainer.correctness.kind, trainer.correctness.key = "reward", 0
    # without an answer extractor whole completions would vote: no maj@n, said once
    trainer.benchmark.answer_extract = None
    with pytest.warns(UserWarning, match="no answer_extractor= given, so evaluation reports no maj@n"):
        plain = trainer.benchmark_scores(data(held))
    assert "maj_at_8" not in plain and plain["avg_at_8"] == direct["avg_at_8"]
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.benchmark_scores(data(held))
    assert not [w for w in caught if "answer_extractor" in str(w.message)]   # once per trainer


def test_dropin_answer_extractor_is_a_callable_a_name_or_the_tasks():
    from grpolab.tasks import make_task
    from grpolab.tasks.answers import math_equal
    from grpolab.trainer.benchmark_eval import resolve_answer_extractor
    from grpolab.trainer.dropin import task_correctness
    extract, same = resolve_answer_extractor("boxed", None)
    assert extract("so \\boxed{1/2}") == "1/2" and same is None
    assert resolve_answer_extractor(None, "answer") == (None, None)          # a column: no extractor known
    toy = make_task("addition", digits=2)
    assert resolve_answer_extractor(None, task_correctness(toy, [])) == (None, None)   # a toy task has none
    from types import SimpleNamespace
    verified = SimpleNamespace(extract=lambda t: t[-3:], grader=math_equal, grade_kind="math")
    extract, same = resolve_answer_extractor(None, task_correctness(verified, []))
    assert extract("is 1/2") == "1/2" and same is math_equal
    with pytest.raises(ValueError, match="answer_extractor: unknown extractor 'boxd'; valid: a callable"):
        resolve_answer_extractor("boxd", None)
    with pytest.raises(ValueError, match="expected a callable"):
        resolve_answer_extractor(3, None)
