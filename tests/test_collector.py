"""A command-line process paces Python's cyclic collector (startup.COLLECTOR_THRESHOLDS) and freezes
the training stack once it is imported: importing torch, transformers and TRL runs no full collection,
and the collections the trainer asks for later walk only the run's own objects."""

import json
import subprocess
import sys

import yaml

from grpolab.startup import COLLECTOR_THRESHOLDS

FAST = {"name": "collector", "seed": 0, "method": "grpo", "task": {"name": "random_reward", "digits": 2},
        "model": {"preset": "tiny"}, "warm_start": {"enabled": False},
        "train": {"steps": 2, "group_size": 4, "prompts_per_rollout": 4}, "eval": {"every": 0, "prompts": 8, "k": 2}}

# Runs `grpolab run` through the command line's own entry point and reports, for every full
# (generation-2) collection, how many objects were frozen when it started.
PROBE = """
import gc, json, sys
full = []
gc.callbacks.append(lambda phase, info: phase == "start" and info["generation"] == 2
                    and full.append(gc.get_freeze_count()))
from grpolab.cli import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "threshold": gc.get_threshold(), "frozen": gc.get_freeze_count(), "full": full}))
"""


def test_a_run_imports_its_stack_without_full_collections_and_freezes_it(tmp_path):
    path = tmp_path / "fast.yaml"
    path.write_text(yaml.safe_dump(FAST))
    done = subprocess.run([sys.executable, "-c", PROBE, "--state", str(tmp_path / "state"), "run", str(path)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["code"] == 0 and tuple(report["threshold"]) == COLLECTOR_THRESHOLDS
    assert report["frozen"] > 200_000, report   # torch, transformers, TRL, MLflow: ~5*10^5 objects
    before_freeze = [n for n in report["full"] if n == 0]
    assert before_freeze == [0], report   # only the freeze's own collection: none while importing (8 at Python's default)
    assert len(report["full"]) >= 2, report   # the trainer's own full collections ran, after the freeze
