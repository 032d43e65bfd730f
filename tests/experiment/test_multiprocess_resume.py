"""Several processes + checkpoints: a 2-process CPU run (torch.distributed.run, gloo) killed with
SIGKILL after its first checkpoint resumes, again on 2 processes, into the same MLflow run:
contiguous steps, no duplicated points, one eval series, and one JSON summary (rank 0's)."""

import json
import os
import signal
import subprocess
import sys

import pytest
import yaml
from mlflow.tracking import MlflowClient

from fault_helpers import kill_after_first_checkpoint
from grpolab.experiment import checkpoint_files
from grpolab.tracking.recorder import tracking_uri

STEPS, SAVE_EVERY, EVAL_EVERY = 12, 2, 4
EXPERIMENT = {
    "name": "ckpt2p", "seed": 5, "method": {"base": "grpo", "kl_coef": 0.0},
    "task": {"name": "addition", "digits": 2}, "model": {"preset": "tiny"}, "warm_start": {"enabled": False},
    "train": {"steps": STEPS, "group_size": 4, "prompts_per_rollout": 4, "minibatches": 2, "save_every": SAVE_EVERY,
              "keep_checkpoints": 2},
    "eval": {"every": EVAL_EVERY, "prompts": 4, "k": 2},
    "tracking": {"flush_every": 1},
}


def _torchrun(state, experiment, port, *extra):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}   # PYTHONPATH: conftest's (this checkout, then the caller's)
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port),
            "-m", "grpolab.cli", "--state", str(state), "run", str(experiment), *extra], env


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (torchrun starts each rank in its own session: killpg misses them)."""
    children = {}
    for stat in os.listdir("/proc"):
        if stat.isdigit():
            try:
                ppid = int(open(f"/proc/{stat}/stat").read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(stat))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _kill_tree(pid: int) -> None:
    """SIGKILL the launcher and both ranks (processes this test started), as a lost machine would."""
    ranks = _descendants(pid)
    for target in (pid, *ranks):
        try:
            os.kill(target, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.slow
def test_two_process_run_killed_after_a_checkpoint_resumes_into_the_same_run(tmp_path):
    experiment, state = tmp_path / "exp.yaml", tmp_path / "state"
    experiment.write_text(yaml.safe_dump(EXPERIMENT))
    kill_after_first_checkpoint(*_torchrun(state, experiment, 29581), state, kill=lambda proc: _kill_tree(proc.pid))
    client = MlflowClient(tracking_uri(state))
    (run,) = client.search_runs([client.get_experiment_by_name("grpolab").experiment_id])
    killed_at = checkpoint_files.checkpoint_step(checkpoint_files.find_resumable(state, run.info.run_id))
    assert SAVE_EVERY <= killed_at < STEPS

    cmd, env = _torchrun(state, experiment, 29582, "--resume")
    resumed = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    summary = json.loads(resumed.stdout)          # exactly one JSON document: rank 0's, rank 1 prints none
    assert summary["run_id"] == run.info.run_id and summary["steps"] == STEPS

    runs = client.search_runs([client.get_experiment_by_name("grpolab").experiment_id])
    assert [(r.info.run_id, r.info.status) for r in runs] == [(run.info.run_id, "FINISHED")]
    assert int(runs[0].data.tags["grpolab.resume.from_step"]) == killed_at
    for key in runs[0].data.metrics:
        steps = [m.step for m in client.get_metric_history(run.info.run_id, key)]
        assert len(steps) == len(set(steps)), f"duplicated points of {key}: {sorted(steps)}"
    assert sorted(m.step for m in client.get_metric_history(run.info.run_id, "loss")) == list(range(2, STEPS + 1, 2))   # one point per rollout (minibatches 2)
    evals = sorted(m.step for m in client.get_metric_history(run.info.run_id, "eval/pass_at_1"))
    assert evals == list(range(0, STEPS + 1, EVAL_EVERY))          # one eval series, not one per rank
    assert (checkpoint_files.run_dir(state, run.info.run_id) / "final").is_dir()
