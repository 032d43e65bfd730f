"""Helpers shared by the fault tests: a study whose rows are held mid-row by a flag file, and a
training command killed right after its first complete checkpoint."""

import signal
import subprocess
import time
from pathlib import Path

import yaml

from conftest import write_sums
from grpolab.experiment import checkpoint_files

BASE = {"method": {"base": "grpo", "kl_coef": 0.0}, "task": {"name": "addition", "digits": 2},
        "model": {"preset": "tiny"}, "warm_start": {"enabled": False},
        "train": {"group_size": 4, "prompts_per_rollout": 2, "n_train_prompts": 32, "save_every": 0},
        "eval": {"prompts": 4, "k": 2, "every": 0}, "tracking": {"experiment": "faults"}}

HOLD_REWARD = '''
import os, time

def reward(*, completion, flag, **kwargs):
    while os.path.exists(flag):   # holds its row (alive, in Python) while the flag file exists
        time.sleep(0.05)
    return 0.0
'''


def held_study(folder: Path, model_dir: Path, flag: Path, name: str = "kill_rows", seeds=(0, 1),
               **study_keys) -> Path:
    """``folder/<name>.yaml``: a 1-rung ladder whose rows cannot finish while ``flag`` exists, so
    a signal or a row timeout is sure to land mid-row however fast the machine is (a fixed sleep
    raced rows that finish in seconds). ``folder`` must be importable by the workers (the reward
    module ``hold_reward`` is written there); ``study_keys`` go into the study file as given."""
    (folder / "hold_reward.py").write_text(HOLD_REWARD)
    sums = write_sums(folder / "sums.jsonl")
    base = {**BASE, "model": {"path": str(model_dir)},
            "task": {"name": "local_dataset", "path": str(sums), "extract": "last_number", "grade": "numeric",
                     "max_completion_length": 4,
                     "rewards": ["correctness", {"name": "hold_reward:reward", "timeout_s": 0,
                                                 "params": {"flag": str(flag)}}]}}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"kind": "ladder", "name": name, "base": base, "budget": {"train.steps": 2},
                                    "seeds": list(seeds), "rungs": [{"name": "base"}], **study_keys}))
    return path


def kill_after_first_checkpoint(cmd: list, env: dict, state: Path, kill=None, timeout: float = 300) -> None:
    """Start the training command ``cmd`` and SIGKILL it (``kill(proc)``; default: the process
    itself) as soon as a checkpoint of a run folder new under ``state`` is complete (the state
    may hold other runs' checkpoints); asserts it died of the SIGKILL, not by finishing first."""
    known = {p.name for p in state.glob("runs/*")}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        if [p for p in state.glob(f"runs/*/checkpoint-*/{checkpoint_files.COMPLETE}") if p.parent.parent.name not in known]:
            break
        time.sleep(0.02)
    else:   # no checkpoint in time: a kill now would test a run with nothing to resume
        proc.kill()
        raise AssertionError(f"no complete checkpoint before the run ended or {timeout} s passed: "
                             + proc.stderr.read()[-2000:])
    (kill or (lambda p: p.send_signal(signal.SIGKILL)))(proc)
    assert proc.wait(60) == -signal.SIGKILL, "the run finished before it could be killed: " + proc.stderr.read()[-2000:]
