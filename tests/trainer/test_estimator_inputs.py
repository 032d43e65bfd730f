"""The inputs the trainer computes only for the estimators that ask for them: ReMax's greedy
baseline (``greedy_rewards``) and the optimal token baselines' sum_v pi_old(v)^2 (``pi_old_token_stats``),
through the drop-in trainer on the tiny model (one step, learning rate 0, so the policy after the
step is the policy that generated and the test can recompute what the trainer saw)."""

import dataclasses

import pytest
import torch

from grpolab import GrpoLabTrainer
from grpolab.algorithms import baselines
from grpolab.method.advantages import ADVANTAGES
from grpolab.method.spec import build_spec
from grpolab.trainer.estimator_inputs import EstimatorInputs

G = 4


def _args(tmp_path, **kw):
    from trl import GRPOConfig
    base = dict(output_dir=str(tmp_path / "out"), report_to="none", max_steps=1, logging_steps=1,
                per_device_train_batch_size=8, num_generations=G, max_completion_length=8, use_cpu=True, bf16=False,
                disable_tqdm=True, save_strategy="no", seed=0, top_k=0, learning_rate=0.0)
    return GRPOConfig(**{**base, **kw})


def _dataset():
    import datasets
    from conftest import tiny_dataset
    _, train, _ = tiny_dataset(32)
    return datasets.Dataset.from_dict({"prompt": [e.prompt for e in train], "answer": [e.answer for e in train]})


class _Calls:
    """Records every reward call and every ``compute_advantages`` call (its inputs by field, and its advantages)."""

    def __init__(self, monkeypatch):
        from grpolab import algorithms
        self.rewards, self.advantages, original = [], [], algorithms.compute_advantages

        def spy(spec, inputs):
            estimate = original(spec, inputs)
            given = {f.name: getattr(inputs, f.name) for f in dataclasses.fields(inputs)}
            self.advantages.append({**given, "rewards": inputs.rewards.clone(), "out": estimate.advantages.clone()})
            return estimate
        monkeypatch.setattr(algorithms, "compute_advantages", spy)

    def reward(self, prompts, completions, completion_ids=None, **kwargs):
        values = [float(len(set(c))) for c in completions]   # unique characters, as TRL's quickstart
        self.rewards.append({"prompts": list(prompts), "completions": list(completions), "values": values,
                             "ids": [list(i) for i in completion_ids]})
        return values


def _last_log(trainer) -> dict:
    [log] = [e for e in trainer.state.log_history if "loss" in e]
    return log


def test_remax_baseline_is_the_reward_of_the_prompts_greedy_completion(tiny_model_dir, tmp_path, monkeypatch):
    calls = _Calls(monkeypatch)
    t = GrpoLabTrainer(model=str(tiny_model_dir), reward_funcs=calls.reward, args=_args(tmp_path),
                       train_dataset=_dataset(), method="remax")
    t.train()
    sampled, greedy = calls.rewards   # the rollout's 8 completions, then one greedy completion per prompt
    assert len(sampled["completions"]) == 8 and greedy["prompts"] == sampled["prompts"][::G]
    # greedy: the policy (unchanged, lr 0) decodes the same text again without sampling
    tok = t.processing_class
    t.model.eval()
    for prompt, text in zip(greedy["prompts"], greedy["completions"]):
        ids = tok(prompt, return_tensors="pt")
        again = t.model.generate(**ids, do_sample=False, max_new_tokens=8, pad_token_id=tok.pad_token_id,
                                 temperature=None, top_p=None, top_k=None)
        assert tok.decode(again[0, ids["input_ids"].size(1):], skip_special_tokens=True) == text
    [call] = calls.advantages
    b = torch.tensor(greedy["values"]).repeat_interleave(G)
    torch.testing.assert_close(call["greedy_rewards"].cpu(), b)
    torch.testing.assert_close(call["out"].cpu(), torch.tensor(sampled["values"]) - b)   # A_i = R_i - R_greedy
    assert _last_log(t)["remax/greedy_reward_mean"] == pytest.approx(sum(greedy["values"]) / 2)


def test_optimal_token_baseline_reads_pi_old_and_its_vocabulary_sum(tiny_model_dir, tmp_path, monkeypatch):
    calls = _Calls(monkeypatch)
    seen = []
    original = EstimatorInputs.policy_token_stats

    def stats_spy(self, out):
        seen.append({k: v.clone() for k, v in out.items() if isinstance(v, torch.Tensor)})
        return original(self, out)
    monkeypatch.setattr(EstimatorInputs, "policy_token_stats", stats_spy)
    t = GrpoLabTrainer(model=str(tiny_model_dir), reward_funcs=calls.reward, args=_args(tmp_path, temperature=0.7),
                       train_dataset=_dataset(), method="otb")
    t.train()
    [out], [call] = seen, calls.advantages
    mask = call["mask"]
    T = out["completion_ids"].size(1)
    ids = torch.cat([out["prompt_ids"], out["completion_ids"]], 1)
    attend = torch.cat([out["prompt_mask"], out["completion_mask"]], 1)
    with torch.no_grad():   # TRL's own log-probs of the same tokens (temperature 0.7 included)
        trl_logp, _, _ = t._get_per_token_logps_and_entropies(t.model, ids, attend, T)
        logits = t.model(input_ids=ids, attention_mask=attend).logits[:, -T - 1:-1].float() / 0.7
    on = mask.bool()
    torch.testing.assert_close(call["old_logp"][on], trl_logp[on], atol=1e-5, rtol=0)
    by_hand = (logits.softmax(-1) ** 2).sum(-1)
    torch.testing.assert_close(call["sum_pi_squared"][on], by_hand[on], atol=1e-5, rtol=0)
    assert (call["sum_pi_squared"][on] >= call["old_logp"][on].exp() ** 2 - 1e-6).all()   # pi(y)^2 is one term
    expected = baselines.optimal_token_baseline(call["rewards"], mask, call["old_logp"], call["sum_pi_squared"], G)
    torch.testing.assert_close(call["out"], expected)
    assert _last_log(t)["otb/sum_pi_squared_mean"] == pytest.approx(float(by_hand[on].mean()), abs=1e-5)


def test_only_the_estimators_that_ask_get_the_extra_work():
    assert [n for n, e in ADVANTAGES.items() if "greedy_rewards" in e.inputs] == ["remax"]
    assert [n for n, e in ADVANTAGES.items() if "pi_old_token_stats" in e.inputs] == [
        "optimal_token_baseline", "tir_optimal_token_baseline"]
    assert [n for n, e in ADVANTAGES.items() if "critic_values" in e.inputs] == ["gae"]
    assert [n for n, e in ADVANTAGES.items() if e.inputs] == [
        "gae", "remax", "optimal_token_baseline", "tir_optimal_token_baseline"]


def test_remax_refuses_dynamic_sampling():
    from grpolab.errors import ConfigError
    with pytest.raises(ConfigError, match="greedy completion per prompt"):
        build_spec({"advantage": "remax", "sampling": "dynamic", "aggregation": "token_mean"})
    kept = build_spec({"advantage": "remax", "sampling": "zero_variance_filter", "aggregation": "token_mean"})
    assert kept.sampling == "zero_variance_filter"


def _model_with_end_tokens(tiny_model_dir, tmp_path, ends: list[int]):
    """The tiny model, its generation config declaring ``ends`` as end tokens after the tokenizer's EOS."""
    import shutil

    from transformers import AutoTokenizer, GenerationConfig
    path = tmp_path / "model"
    shutil.copytree(tiny_model_dir, path)
    config = GenerationConfig.from_pretrained(path)
    config.eos_token_id = [AutoTokenizer.from_pretrained(path).eos_token_id, *ends]
    config.save_pretrained(path)
    return path


@pytest.mark.parametrize("advantage", ["optimal_token_baseline", "tir_optimal_token_baseline"])
def test_optimal_token_baselines_refuse_a_reward_side_kl(advantage):
    from grpolab.errors import ConfigError
    base = {"advantage": advantage, "aggregation": "token_mean"}
    with pytest.raises(ConfigError, match=f"advantage={advantage}: grpolab does not implement .*reward-to-go.*"
                                          r"kl_placement=loss \(or kl_coef=0\)"):
        build_spec({**base, "kl_coef": 0.01, "kl_estimator": "k1", "kl_placement": "reward"})
    assert build_spec({**base, "kl_coef": 0.01, "kl_placement": "loss"}).kl_coef == 0.01
    assert build_spec({**base, "kl_coef": 0.0, "kl_placement": "reward"}).kl_coef == 0.0


def test_remax_says_what_grpolab_does_not_implement():
    from grpolab.errors import ConfigError
    with pytest.raises(ConfigError, match="grpolab does not implement ReMax with a reward-side KL"):
        build_spec({"advantage": "remax", "aggregation": "token_mean", "kl_coef": 0.01, "kl_placement": "reward"})
    assert "does not implement" in ADVANTAGES["remax"].multi_turn


@pytest.mark.parametrize("method", [{"name": "grpo", "kl_coef": 0.0}, "remax"])
def test_greedy_scoring_leaves_trls_logs_and_the_reward_counters_to_the_rollout(method, tiny_model_dir, tmp_path):
    """What a remax step logs (reward functions' log_metric / log_extra, a task reward's counters)
    is over the rollout's completions only, as a grpo step's: the greedy completions stay out."""
    import json

    import datasets
    from grpolab.tasks import make_task
    rows = tmp_path / "rows.jsonl"
    rows.write_text("\n".join(json.dumps({"q": f"{i}+{i}=", "a": str(2 * i)}) for i in range(32)))
    task = make_task("local_dataset", path=str(rows), prompt_field="q", answer_field="a", extract="last_number",
                     grade="numeric", rewards=["correctness"])
    train = task.splits(0, 1000, 1000)[0]
    [correctness] = task.reward_funcs(train, max_len=8)
    dataset = datasets.Dataset.from_dict({"prompt": [e.prompt for e in train], "idx": list(range(len(train)))})

    def logging_reward(prompts, completions, log_metric, log_extra, **kwargs):
        log_metric("scored_rows", float(len(completions)))
        log_extra("scored_completion", list(completions))
        return [0.0] * len(completions)
    t = GrpoLabTrainer(model=str(tiny_model_dir), reward_funcs=[correctness, logging_reward],
                       args=_args(tmp_path, max_steps=2), train_dataset=dataset, method=method)
    t.train()
    logs = [e for e in t.state.log_history if "loss" in e]
    assert [e["scored_rows"] for e in logs] == [8.0, 8.0]
    assert not t._pending_metrics and not t._pending_extra_logs
    assert list(t._logs["extra"]["scored_completion"]) == list(t._logs["completion"])
    assert (correctness.reward.calls, correctness.reward.failures) == (16, 0)


def test_whole_groups_are_checked_when_the_trainer_is_built(tiny_model_dir, tmp_path):
    from grpolab.trainer.estimator_inputs import check_whole_groups
    args = _args(tmp_path)
    args.per_device_train_batch_size = 6   # as GRPOConfig accepts it on 2 processes (a generation batch of 12)
    for method in ("remax", "otb"):
        with pytest.raises(ValueError, match=r"whole groups on each process: per_device_train_batch_size \(6\) x "
                                             r"steps_per_generation \(1\) = 6 rows .* num_generations \(4\)"):
            GrpoLabTrainer(model=str(tiny_model_dir), reward_funcs=lambda completions, **kw: [0.0] * len(completions),
                           args=args, train_dataset=_dataset(), method=method)
    assert check_whole_groups("group_std", args) is None   # its baseline is over the gathered batch


def test_greedy_completion_keeps_trls_settings_and_stops_at_every_end_token(tiny_model_dir, tmp_path, monkeypatch):
    import datasets
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    prompt = _dataset()["prompt"][0]
    ids = tok(prompt, return_tensors="pt")
    with torch.no_grad():   # TRL's settings (repetition penalty 1.3) with the tokenizer's EOS only
        free = model.generate(**ids, do_sample=False, max_new_tokens=8, repetition_penalty=1.3, temperature=None,
                              top_p=None, top_k=None, pad_token_id=tok.pad_token_id,
                              eos_token_id=tok.eos_token_id)[0, ids["input_ids"].size(1):].tolist()
    # a second end token: the first greedy token after the first that is new to the completion
    k = next(i for i in range(1, len(free)) if free[i] not in free[:i] and free[i] != tok.eos_token_id)
    assert tok.eos_token_id not in free[:k] and len(free) > k + 1
    calls = _Calls(monkeypatch)
    t = GrpoLabTrainer(model=str(_model_with_end_tokens(tiny_model_dir, tmp_path, [free[k]])),
                       reward_funcs=calls.reward, args=_args(tmp_path, repetition_penalty=1.3),
                       train_dataset=datasets.Dataset.from_dict({"prompt": [prompt] * 32}), method="remax")
    assert t.eos_token_ids == [tok.eos_token_id, free[k]]
    t.train()
    greedy = calls.rewards[1]
    assert greedy["ids"] == [free[:k + 1]] * 2   # cut at the second end token, one per prompt
    assert greedy["completions"] == [tok.decode(free[:k + 1], skip_special_tokens=True)] * 2


def test_optimal_token_baseline_is_over_generated_tokens_truncated_rows_included(tiny_model_dir, tmp_path,
                                                                                monkeypatch):
    """TRL's mask_truncated_completions (the overlong filter) empties truncated rows of the loss;
    the baselines and their metric still count their tokens, as verl's."""
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    calls, seen = _Calls(monkeypatch), []
    original = EstimatorInputs.policy_token_stats

    def stats_spy(self, out):
        seen.append(out["completion_mask"].clone())
        return original(self, out)
    monkeypatch.setattr(EstimatorInputs, "policy_token_stats", stats_spy)
    model = _model_with_end_tokens(tiny_model_dir, tmp_path, tok.convert_tokens_to_ids(list("0123456789")))
    t = GrpoLabTrainer(model=str(model), reward_funcs=calls.reward, args=_args(tmp_path, max_completion_length=4),
                       train_dataset=_dataset(), method={"name": "otb", "overlong_filter": True})
    t.train()
    [trained], [call], [sampled] = seen, calls.advantages, calls.rewards
    lengths = torch.tensor([len(i) for i in sampled["ids"]])
    generated = (torch.arange(trained.size(1)).unsqueeze(0) < lengths.unsqueeze(1)).float()
    truncated = trained.sum(1) == 0
    assert truncated.any() and not truncated.all()   # the filter acted on some rows only
    torch.testing.assert_close(call["mask"].cpu(), generated)
    expected = baselines.optimal_token_baseline(call["rewards"], generated, call["old_logp"], call["sum_pi_squared"], G)
    torch.testing.assert_close(call["out"], expected)
    on = generated.bool()
    assert _last_log(t)["otb/sum_pi_squared_mean"] == pytest.approx(float(call["sum_pi_squared"][on].mean()), abs=1e-5)


def test_a_run_config_splits_prompts_into_whole_groups_per_process(tmp_path, monkeypatch):
    from grpolab.errors import ConfigError
    from grpolab.experiment.config import build_config
    from grpolab.experiment import runner
    from grpolab.world.generated import make_task

    def config(method, prompts):
        return build_config({"name": "whole", "method": method, "task": {"name": "addition", "digits": 2},
                             "model": {"preset": "tiny"}, "warm_start": {"enabled": False},
                             "train": {"steps": 1, "group_size": 4, "prompts_per_rollout": prompts}})
    monkeypatch.setattr(runner, "_world", lambda: 2)   # 2 processes as the run sees them (GRPOConfig sees one)
    with pytest.raises(ConfigError, match=r"train.prompts_per_rollout \(3\): method.advantage=remax needs whole "
                                          r"groups on each process, so a multiple of the 2 processes"):
        runner._grpo_args(config("remax", 3), make_task("addition", digits=2), tmp_path)
    assert runner._grpo_args(config("remax", 4), make_task("addition", digits=2), tmp_path).per_device_train_batch_size == 8
