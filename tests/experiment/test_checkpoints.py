"""Checkpoints and resume: a real training process killed with SIGKILL after its first
checkpoint continues from it into the same MLflow run, and ends where an uninterrupted run ends."""

import os
import subprocess
import sys

import pytest
import yaml
from mlflow.tracking import MlflowClient
from safetensors.torch import load_file

from fault_helpers import kill_after_first_checkpoint
from grpolab.experiment import checkpoint_files
from grpolab.tracking.recorder import final_model_dir
from grpolab.cli import main
from grpolab.tracking.recorder import tracking_uri
from grpolab.trainer.metrics import MEASURED_TIME

STEPS, SAVE_EVERY = 40, 4
EXPERIMENT = {
    "name": "ckpt", "seed": 3, "method": {"base": "grpo", "eps_low": 0.2, "eps_high": 0.28},
    "task": {"name": "addition", "digits": 2}, "model": {"preset": "tiny"}, "warm_start": {"enabled": False},
    "train": {"steps": STEPS, "group_size": 4, "prompts_per_rollout": 4, "minibatches": 2, "learning_rate": 0.003,
              "save_every": SAVE_EVERY, "keep_checkpoints": 2},
    "eval": {"every": 8, "prompts": 8, "k": 2},
    "tracking": {"flush_every": 1},   # every step is stored at once: the killed run leaves points past its checkpoint
}


def _cli(state, *args):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}   # same thread count in every process: same float reductions
    return [sys.executable, "-m", "grpolab.cli", "--state", str(state), "run", *map(str, args)], env


def _runs(state, name="ckpt-s3"):
    client = MlflowClient(tracking_uri(state))
    exp = client.get_experiment_by_name("grpolab")
    return client, client.search_runs([exp.experiment_id], f"attributes.run_name = '{name}'")


def _final_weights(state, run_id):
    return load_file(checkpoint_files.run_dir(state, run_id) / "final" / "model.safetensors")


@pytest.fixture(scope="module")
def experiment_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("exp") / "ckpt.yaml"
    path.write_text(yaml.safe_dump(EXPERIMENT))
    return path


def test_sigkill_then_resume_continues_the_same_run_exactly(tmp_path, experiment_file):
    killed_state, reference_state = tmp_path / "killed", tmp_path / "reference"
    kill_after_first_checkpoint(*_cli(killed_state, experiment_file), killed_state)
    client, (run,) = _runs(killed_state)
    assert run.info.status == "RUNNING"     # kill -9: nothing could end the run
    ckpt = checkpoint_files.find_resumable(killed_state, run.info.run_id)
    killed_at = checkpoint_files.checkpoint_step(ckpt)
    assert SAVE_EVERY <= killed_at < STEPS and not (ckpt.parent / "final").exists()

    cmd, env = _cli(killed_state, experiment_file, "--resume")
    resumed = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    cmd, env = _cli(reference_state, experiment_file)
    reference = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert reference.returncode == 0, reference.stderr[-3000:]

    client, runs = _runs(killed_state)
    assert len(runs) == 1 and runs[0].info.run_id == run.info.run_id      # one MLflow run, continued
    run = runs[0]
    assert run.info.status == "FINISHED"
    tags = run.data.tags
    assert int(tags["grpolab.resume.from_step"]) == killed_at
    assert tags["grpolab.resume.differing_points"] == "0"  # re-computed steps equal what the killed run stored
    assert tags["grpolab.final_model"] == f"runs/{run.info.run_id}/final"      # relative to the state folder
    assert final_model_dir(run.info.run_id, killed_state) == checkpoint_files.run_dir(killed_state, run.info.run_id).resolve() / "final"
    for key in run.data.metrics:
        steps = [m.step for m in client.get_metric_history(run.info.run_id, key)]
        assert len(steps) == len(set(steps)), f"duplicated points of {key}: {sorted(steps)}"
    # one point per rollout (minibatches 2: steps 2, 4, ..., STEPS), continued without a gap or a repeat
    assert sorted(m.step for m in client.get_metric_history(run.info.run_id, "loss")) == list(range(2, STEPS + 1, 2))
    evals = sorted(m.step for m in client.get_metric_history(run.info.run_id, "eval/pass_at_1"))
    assert evals == list(range(0, STEPS + 1, 8))
    kept = [step for step, _ in checkpoint_files.complete_checkpoints(checkpoint_files.run_dir(killed_state, run.info.run_id))]
    assert kept == [STEPS - SAVE_EVERY, STEPS]    # the newest two, the last one at the end of training

    (ref_run,) = _runs(reference_state)[1]
    final, expected = _final_weights(killed_state, run.info.run_id), _final_weights(reference_state, ref_run.info.run_id)
    assert final.keys() == expected.keys()
    for key in expected:
        assert (final[key] - expected[key]).abs().max().item() <= 1e-6, key
    ref_client = MlflowClient(tracking_uri(reference_state))
    ref_loss = [m.value for m in sorted(ref_client.get_metric_history(ref_run.info.run_id, "loss"), key=lambda m: m.step)]
    loss = [m.value for m in sorted(client.get_metric_history(run.info.run_id, "loss"), key=lambda m: m.step)]
    assert loss == pytest.approx(ref_loss, rel=1e-5, abs=1e-7)
    # every metric's last value, exactly, but the wall-clock ones (docs/runs.md: what resume cannot make equal)
    last = {k: v for k, v in client.get_run(run.info.run_id).data.metrics.items() if not k.startswith(MEASURED_TIME)}
    ref_last = {k: v for k, v in ref_client.get_run(ref_run.info.run_id).data.metrics.items()
                if not k.startswith(MEASURED_TIME)}
    assert sorted(last) == sorted(ref_last) and {k: v for k, v in last.items() if ref_last[k] != v} == {}
    # the completions table holds each rollout once, as the undisturbed run's: the re-trained steps replaced
    from grpolab.tracking.completions import TRAIN_TABLE, read_table
    table = read_table(checkpoint_files.run_dir(killed_state, run.info.run_id) / TRAIN_TABLE)
    ref_table = read_table(checkpoint_files.run_dir(reference_state, ref_run.info.run_id) / TRAIN_TABLE)
    assert [(r["step"], r["prompt"]) for r in table] == [(r["step"], r["prompt"]) for r in ref_table] and table
    # the uninterrupted run's folder is its own: run folders are never shared between runs
    assert checkpoint_files.run_dir(reference_state, ref_run.info.run_id).exists()


def _short_run_with_checkpoint(state, experiment_file, *overrides):
    code = main(["--state", str(state), "run", str(experiment_file), "train.steps=4", "eval.every=0", *overrides])
    assert code == 0
    client, (run,) = _runs(state)
    client.set_terminated(run.info.run_id, status="KILLED")   # as if it had been interrupted
    return run.info.run_id


def test_resume_refuses_a_changed_config_or_a_missing_checkpoint(tmp_path, experiment_file, capsys):
    run_id = _short_run_with_checkpoint(tmp_path, experiment_file)
    before = _runs(tmp_path)[0].get_run(run_id).data.metrics
    capsys.readouterr()
    assert main(["--state", str(tmp_path), "run", str(experiment_file), "train.steps=4", "eval.every=0",
                 "train.learning_rate=0.01", "--resume"]) == 2
    err = capsys.readouterr().err
    assert "train.learning_rate" in err and "0.003" in err and "0.01" in err and err.count("\n") == 1
    assert _runs(tmp_path)[0].get_run(run_id).data.metrics == before       # nothing recorded, nothing lost
    assert main(["--state", str(tmp_path), "run", str(experiment_file), "--resume-run", "0123456789abcdef"]) == 2
    assert "--resume-run" in capsys.readouterr().err
    no_ckpt = tmp_path / "no-ckpt"
    _short_run_with_checkpoint(no_ckpt, experiment_file, "train.save_every=0")
    capsys.readouterr()
    assert main(["--state", str(no_ckpt), "run", str(experiment_file), "train.steps=4", "eval.every=0",
                 "train.save_every=0", "--resume"]) == 2
    assert "--resume" in capsys.readouterr().err
    assert len(_runs(no_ckpt)[1]) == 1     # no new run was created


def test_save_every_must_not_split_a_rollout(experiment_file, capsys):
    assert main(["run", str(experiment_file), "train.save_every=3"]) == 2   # minibatches = 2: a rollout is 2 steps
    assert "train.save_every" in capsys.readouterr().err
