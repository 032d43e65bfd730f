"""A resumed run equals an undisturbed one: ``grpolab run --resume`` after a SIGKILL past the first
checkpoint ends with the last value of every metric exactly equal to the uninterrupted run's, for
DAPO (dynamic sampling: its sampling RNG is restored) and PPO (its critic and critic optimizer are
restored), on the smoke experiment cut to a few steps, without its warm start. GRPO's run is
test_checkpoints.py's, which makes the same comparison.

What cannot be equal, and is left out of the comparison: the wall-clock curves (``step_time``,
``time/*``: ``trainer.metrics.MEASURED_TIME``) and MLflow's ``system/*`` samples, which measure
the machine rather than the run. Equality needs the same machine and thread count for both runs
(float reductions), so every process here runs with OMP_NUM_THREADS=1."""

import os
import subprocess
import sys

import pytest
from mlflow.tracking import MlflowClient

from conftest import REPO
from fault_helpers import kill_after_first_checkpoint
from grpolab.experiment import checkpoint_files
from grpolab.tracking.recorder import tracking_uri
from grpolab.trainer.metrics import MEASURED_TIME

SMOKE = REPO / "experiments" / "smoke.yaml"
STEPS, SAVE_EVERY = 12, 4
# The warm start (minutes on a CPU) is left out: resume restores the trainer, not the starting model, and
# a random-init model learns from random_reward's coin (a task whose reward varies within groups).
OVERRIDES = [f"train.steps={STEPS}", f"train.save_every={SAVE_EVERY}", "eval.every=4", "eval.prompts=8", "eval.k=2",
             "warm_start.enabled=false", "task.name=random_reward",
             "tracking.flush_every=1"]   # every step stored at once: the killed run leaves points past its checkpoint


@pytest.fixture(scope="module")
def state(tmp_path_factory):
    """One state folder for the three methods (each its own run name)."""
    return tmp_path_factory.mktemp("smoke-resume")


def _run(state, method, *extra):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return [sys.executable, "-m", "grpolab.cli", "--state", str(state), "run", str(SMOKE), f"method={method}",
            f"name=resume-{method}", *OVERRIDES, *extra], env


def _last_values(client, run_id):
    metrics = client.get_run(run_id).data.metrics
    return {k: v for k, v in metrics.items() if not k.startswith((*MEASURED_TIME, "system/"))}


@pytest.mark.slow
@pytest.mark.parametrize("method", ["dapo", "ppo"])   # GRPO: test_checkpoints.py, the same comparison
def test_a_run_resumed_after_sigkill_ends_equal_to_an_uninterrupted_one(state, method):
    kill_after_first_checkpoint(*_run(state, method), state, timeout=900)
    cmd, env = _run(state, method)
    reference = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert reference.returncode == 0, reference.stderr[-3000:]
    cmd, env = _run(state, method, "--resume")                 # continues the killed run, not the finished one
    resumed = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    client = MlflowClient(tracking_uri(state))
    exp = client.get_experiment_by_name("grpolab").experiment_id
    runs = client.search_runs([exp], f"attributes.run_name = 'resume-{method}-s0'", order_by=["attributes.start_time"])
    assert [r.info.status for r in runs] == ["FINISHED", "FINISHED"]
    killed, undisturbed = runs                               # the killed run started first
    from_step = int(client.get_run(killed.info.run_id).data.tags["grpolab.resume.from_step"])
    assert SAVE_EVERY <= from_step < STEPS
    assert f"run {killed.info.run_id}: resuming from checkpoint-{from_step} (step {from_step})" in resumed.stderr
    assert killed.data.tags["grpolab.resume.differing_points"] == "0"
    assert (checkpoint_files.run_dir(state, killed.info.run_id) / "final").is_dir()
    resumed_values, expected = _last_values(client, killed.info.run_id), _last_values(client, undisturbed.info.run_id)
    assert sorted(resumed_values) == sorted(expected)
    differing = {k: (resumed_values[k], v) for k, v in expected.items() if resumed_values[k] != v}
    assert differing == {}
    print(f"\nRESUME_EQUAL method={method} metrics={len(expected)} from_step={from_step} differing=0")
