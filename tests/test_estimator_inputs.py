"""The inputs the trainer computes only for the estimators that ask for them: ReMax's greedy
baseline (``greedy_baseline``) and the optimal token baselines' sum_v pi_old(v)^2 (``sum_pi_squared``),
through the drop-in trainer on the tiny model (one step, learning rate 0, so the policy after the
step is the policy that generated and the test can recompute what the trainer saw)."""

import pytest
import torch

from grpolab import GrpoLabTrainer
from grpolab.algorithms import baselines
from grpolab.method.advantages import ADVANTAGES
from grpolab.method.spec import build_spec

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
    """Records every reward call and every ``compute_advantages`` call (its keywords and result)."""

    def __init__(self, monkeypatch):
        from grpolab import algorithms
        self.rewards, self.advantages, original = [], [], algorithms.compute_advantages

        def spy(spec, rewards, group_size, **kw):
            out = original(spec, rewards, group_size, **kw)
            self.advantages.append({"rewards": rewards.clone(), "out": out.clone(), **kw})
            return out
        monkeypatch.setattr(algorithms, "compute_advantages", spy)

    def reward(self, prompts, completions, **kwargs):
        values = [float(len(set(c))) for c in completions]   # unique characters, as TRL's quickstart
        self.rewards.append({"prompts": list(prompts), "completions": list(completions), "values": values})
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
    original = GrpoLabTrainer._policy_token_stats

    def stats_spy(self, out):
        seen.append({k: v.clone() for k, v in out.items() if isinstance(v, torch.Tensor)})
        return original(self, out)
    monkeypatch.setattr(GrpoLabTrainer, "_policy_token_stats", stats_spy)
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
    assert [n for n, e in ADVANTAGES.items() if e.greedy_baseline] == ["remax"]
    assert [n for n, e in ADVANTAGES.items() if e.sum_pi_squared] == ["optimal_token_baseline",
                                                                       "tir_optimal_token_baseline"]


def test_remax_refuses_dynamic_sampling():
    from grpolab.errors import ConfigError
    with pytest.raises(ConfigError, match="greedy completion per prompt"):
        build_spec({"advantage": "remax", "sampling": "dynamic", "aggregation": "token_mean"})
    kept = build_spec({"advantage": "remax", "sampling": "zero_variance_filter", "aggregation": "token_mean"})
    assert kept.sampling == "zero_variance_filter"
