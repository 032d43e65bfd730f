"""A command-line process runs Python's cyclic collector rarely while it imports the training stack,
freezes the stack once loaded and then collects at Python's own pace (grpolab.startup); code that
calls the command line's main([...]) in its own process keeps its collector as it was."""

import gc
import json
import subprocess
import sys

import yaml

FAST = {"name": "collector", "seed": 0, "method": "grpo", "task": {"name": "random_reward", "digits": 2},
        "model": {"preset": "tiny"}, "warm_start": {"enabled": False},
        "train": {"steps": 2, "group_size": 4, "prompts_per_rollout": 4}, "eval": {"every": 0, "prompts": 8, "k": 2}}

# `grpolab run` through the command line's entry point as the console script calls it (main(), the
# process's own), reporting for every full (generation-2) collection how many objects were frozen when it
# started, and for every freeze how many torch parameters (a row's model's weights) were alive then.
PROBE = """
import gc, json, sys
python_thresholds, full, freezes = gc.get_threshold(), [], []
gc.callbacks.append(lambda phase, info: phase == "start" and info["generation"] == 2
                    and full.append(gc.get_freeze_count()))
freeze = gc.freeze
def counting_freeze():
    import torch
    freezes.append(sum(isinstance(o, torch.nn.Parameter) for o in gc.get_objects()))
    freeze()
gc.freeze = counting_freeze
from grpolab.cli import main
sys.argv = ["grpolab", *sys.argv[1:]]
code = main()
print(json.dumps({"code": code, "python": python_thresholds, "after": gc.get_threshold(),
                  "frozen": gc.get_freeze_count(), "full": full, "freezes": freezes}))
"""


def _experiment(tmp_path):
    path = tmp_path / "fast.yaml"
    path.write_text(yaml.safe_dump(FAST))
    return ["--state", str(tmp_path / "state"), "run", str(path)]


def test_a_command_line_run_imports_its_stack_without_full_collections_then_freezes_it(tmp_path):
    done = subprocess.run([sys.executable, "-c", PROBE, *_experiment(tmp_path)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["code"] == 0
    assert report["frozen"] > 200_000, report   # torch, transformers, TRL, MLflow: ~7*10^5 objects
    # No full collection while importing (8 or more at Python's thresholds): the first one is the freeze's
    # own, and the trainer's later ones start with the stack frozen.
    assert report["full"][:1] == [0] and all(n > 200_000 for n in report["full"][1:]), report
    assert len(report["full"]) >= 2, report
    assert report["after"] == report["python"], report   # Python's pace once the stack is frozen
    assert report["freezes"] == [0], report   # once, before the row's model exists: none of a row's objects is frozen


def test_main_called_in_a_process_it_does_not_own_leaves_the_collector_alone(tmp_path, monkeypatch):
    from grpolab.cli import main
    freezes = []
    monkeypatch.setattr(gc, "freeze", lambda: freezes.append(1))
    thresholds = gc.get_threshold()
    assert main(_experiment(tmp_path)) == 0
    assert gc.get_threshold() == thresholds and freezes == []
