"""Warm start reaches the band and is reused from its cache."""

import json
import time

from grpolab.world.tasks import make_task
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
