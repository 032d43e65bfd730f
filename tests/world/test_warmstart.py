"""Warm start reaches the band and is reused from its cache."""

import json
import time

from grpolab.world.generated import make_task
from grpolab.world.warmstart import WarmStartConfig, cache_key, warm_start


def test_warm_start_reaches_band_and_cache_is_reused(tmp_path):
    task = make_task("addition", digits=2)
    cfg = WarmStartConfig(band=(0.15, 0.7), check_every=50, eval_prompts=48)
    start = time.perf_counter()
    path, record = warm_start("tiny", task, 0, cfg, tmp_path)
    first = time.perf_counter() - start
    assert record["cache_hit"] is False
    assert 0.15 <= record["pass@1"] <= 0.7 and record["pass@8"] > 0
    assert (path / "config.json").exists() and (path / "warmstart.json").exists()
    weights = (path / "model.safetensors").stat().st_mtime
    start = time.perf_counter()
    path2, record2 = warm_start("tiny", task, 0, cfg, tmp_path)
    assert path2 == path and record2["cache_hit"] is True
    assert record2["pass@1"] == record["pass@1"]
    assert (path / "model.safetensors").stat().st_mtime == weights  # not retrained
    assert time.perf_counter() - start < first / 3
    # anything that determines the model is in the key
    assert cache_key("tiny", task, 1, cfg) != cache_key("tiny", task, 0, cfg)
    assert cache_key("tiny", make_task("addition", digits=3), 0, cfg) != cache_key("tiny", task, 0, cfg)
    assert cache_key("tiny", task, 0, WarmStartConfig(band=(0.2, 0.6))) != cache_key("tiny", task, 0, cfg)
    assert json.loads((path / "warmstart.json").read_text())["steps"] == record["steps"]


def test_band_is_checked_at_the_runs_cap_and_the_cap_is_in_the_key(tmp_path, monkeypatch):
    """Issue 24: the band is held-out pass@1 at the cap the RL run evaluates with (24 tokens on
    the DAPO ladder), not the task's own (44); a cache checked at another cap is not reused."""
    from grpolab.world import warmstart as ws
    from grpolab.world.generation import EvalResult
    task = make_task("addition_scratchpad", digits=2)
    assert task.max_completion_length == 44
    caps = []

    def fake_evaluate(model, tokenizer, task, examples, options, **kw):
        caps.append(options.max_new_tokens)
        return EvalResult(pass_at_1=0.3, pass_at_k=0.9, greedy_accuracy=0.3, mean_length=9.0, samples=[])
    monkeypatch.setattr(ws, "evaluate", fake_evaluate)
    at_24 = WarmStartConfig(check_every=1, eval_prompts=8, max_completion_length=24)
    _, record = warm_start("tiny", task, 0, at_24, tmp_path)
    assert caps == [24] and record["max_completion_length"] == 24 and record["steps"] == 1
    at_task = WarmStartConfig(check_every=1, eval_prompts=8)
    path, record = warm_start("tiny", task, 0, at_task, tmp_path)
    assert caps == [24, 44] and record["cache_hit"] is False and record["max_completion_length"] == 44
    # the cap is in the key; 0 and the task's own cap are the same procedure, hence the same key
    assert cache_key("tiny", task, 0, at_24) != cache_key("tiny", task, 0, at_task)
    assert cache_key("tiny", task, 0, WarmStartConfig(check_every=1, eval_prompts=8, max_completion_length=44)) \
        == cache_key("tiny", task, 0, at_task)
    assert str(path).endswith(cache_key("tiny", task, 0, at_task))


def test_run_passes_its_eval_cap_to_the_warm_start(tmp_path, monkeypatch):
    from grpolab.experiment import starting_model
    from grpolab.experiment.config import build_config
    seen = []
    monkeypatch.setattr(starting_model, "warm_start", lambda preset, task, seed, cfg, cache: seen.append(cfg) or (tmp_path, {}))
    base = {"method": "grpo", "task": {"name": "addition_scratchpad", "digits": 2}}
    for train, expected in (({"max_completion_length": 24, "minibatches": 2}, 24), ({"minibatches": 2}, 44)):
        cfg = build_config({**base, "train": train})
        starting_model.resolve_model(cfg, make_task("addition_scratchpad", digits=2), tmp_path)
        assert seen[-1].max_completion_length == expected


def test_negative_band_cap_is_refused():
    import pytest

    from grpolab.errors import ConfigError
    with pytest.raises(ConfigError, match="max_completion_length: must be >= 0"):
        cache_key("tiny", make_task("addition", digits=2), 0, WarmStartConfig(max_completion_length=-1))
