"""A resumed row keeps one name per metric: a run stopped right after its first complete
checkpoint and continued from it builds its held-out evals and training curves under the same
keys as an undisturbed run of the same configuration, so every study metric (final:, auc:,
tail:, steps_to:) is found and equals the undisturbed run's value.

A checkpoint whose save fails part-way, or whose files are cut afterwards, leaves the previous
complete one usable, and resume says which one it continues from.

The stop is in-process (a callback raises right after the first checkpoint is marked complete),
so this is cheap; a real SIGKILL of a study worker is in test_resume_study.py, of `grpolab run`
in test_resume_equality.py."""

import errno
import math
from pathlib import Path

import pytest
from transformers import TrainerCallback

from grpolab.errors import ConfigError
from grpolab.experiment import checkpoint_files, checkpoints
from grpolab.experiment.config import build_config
from grpolab.experiment.run_identity import RunIdentity
from grpolab.experiment.runner import run_experiment
from grpolab.studies.objectives import check_metric, objective_value
from grpolab.tracking.held_out import EVAL_KEYS
from grpolab.trainer.metrics import MEASURED_TIME

STEPS, SAVE_EVERY, EVAL_EVERY = 6, 2, 2
EXPERIMENT = {
    "name": "names", "seed": 1, "method": {"base": "grpo", "kl_coef": 0.0},
    "task": {"name": "random_reward"}, "model": {"preset": "tiny"}, "warm_start": {"enabled": False},
    "train": {"steps": STEPS, "group_size": 4, "prompts_per_rollout": 4, "learning_rate": 0.003,
              "save_every": SAVE_EVERY, "keep_checkpoints": 2},
    "eval": {"every": EVAL_EVERY, "prompts": 4, "k": 2},
    "tracking": {"flush_every": 1},
}
METRICS = ["final:eval/pass_at_1", "auc:eval/pass_at_k", "tail:loss", "steps_to:eval/pass_at_1>=0"]


class Stopped(Exception):
    """The process ended right after a checkpoint (as a kill -9 there would end it)."""


class StopAfterFirstCheckpoint(TrainerCallback):
    """Runs after grpolab's own checkpoint callback, so the checkpoint is complete when it stops."""

    def on_save(self, args, state, control, **kwargs):
        raise Stopped(state.global_step)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(undisturbed result, resumed result, step the stopped run was continued from)."""
    cfg = build_config(EXPERIMENT)
    undisturbed = run_experiment(cfg, tmp_path_factory.mktemp("undisturbed"))
    state, started = tmp_path_factory.mktemp("stopped"), []
    with pytest.raises(Stopped):
        run_experiment(cfg, state, callbacks=[StopAfterFirstCheckpoint()], on_run=started.append)
    (run_id,) = started
    resumed_from = checkpoint_files.checkpoint_step(checkpoint_files.find_resumable(state, run_id))
    resumed = run_experiment(cfg, state, RunIdentity(resume_run_id=run_id))
    assert resumed.run_id == run_id and resumed.steps == STEPS
    return undisturbed, resumed, resumed_from


def test_a_resumed_run_keys_its_history_as_an_undisturbed_one(runs):
    undisturbed, resumed, resumed_from = runs
    assert resumed_from == SAVE_EVERY                      # continued from the first checkpoint, not restarted
    assert sorted(resumed.evals) == sorted(undisturbed.evals) == list(range(0, STEPS + 1, EVAL_EVERY))
    for step, metrics in resumed.evals.items():
        assert sorted(metrics) == sorted(EVAL_KEYS), step   # the stored steps (0, 2) as well as the live ones
        assert metrics == undisturbed.evals[step], step
    assert sorted(resumed.train_curves) == sorted(undisturbed.train_curves)
    for key, points in undisturbed.train_curves.items():
        steps = [step for step, _ in points]
        assert [step for step, _ in resumed.train_curves[key]] == steps, key
        if not key.startswith(MEASURED_TIME):   # wall-clock curves differ between any two runs
            assert resumed.train_curves[key] == points, key


@pytest.mark.parametrize("metric", METRICS)
def test_every_study_metric_of_a_resumed_run_is_found_and_equal(runs, metric):
    check_metric(metric)
    undisturbed, resumed, _ = runs
    value = objective_value(metric, resumed.evals, resumed.train_curves)
    assert math.isfinite(value)
    assert value == objective_value(metric, undisturbed.evals, undisturbed.train_curves)


def test_a_save_cut_short_resumes_from_the_previous_checkpoint_and_ends_equal(runs, tmp_path, monkeypatch):
    """The second checkpoint's save fails part-way (half a file written, then the disk is full): the
    run fails, the first checkpoint stays usable, resume says it continues from it, and the run
    ends as the undisturbed one. A checkpoint whose files are cut after it was saved is passed
    over the same way; with no usable checkpoint left, resume refuses with the reasons."""
    undisturbed, cfg, saves = runs[0], build_config(EXPERIMENT), []
    real_save = checkpoints.save_extra_state

    def disk_full_on_the_second_save(trainer, folder):
        saves.append(folder)
        if len(saves) == 2:
            (Path(folder) / "grpolab_state.pt").write_bytes(b"\0" * 100)
            raise OSError(errno.ENOSPC, "No space left on device")
        real_save(trainer, folder)

    monkeypatch.setattr(checkpoints, "save_extra_state", disk_full_on_the_second_save)
    started = []
    with pytest.raises(OSError, match="No space left"):
        run_experiment(cfg, tmp_path, on_run=started.append)
    monkeypatch.undo()
    (run_id,) = started
    folder = checkpoint_files.run_dir(tmp_path, run_id)
    cut = "no completion marker (its save was cut short)"
    assert [(s, p.name, why) for s, p, why in checkpoint_files.checkpoint_folders(folder)] == [
        (2, "checkpoint-2", None), (4, "checkpoint-4", cut)]
    ckpt = checkpoint_files.check_resume(tmp_path, run_id, cfg.resolved())
    assert checkpoint_files.resume_note(ckpt) == f"resuming from checkpoint-2 (step 2); not from the newer checkpoint-4 ({cut})"
    resumed = run_experiment(cfg, tmp_path, RunIdentity(resume_run_id=run_id))
    assert resumed.evals == undisturbed.evals
    for metric in METRICS:
        assert objective_value(metric, resumed.evals, resumed.train_curves) == \
            objective_value(metric, undisturbed.evals, undisturbed.train_curves)

    assert [s for s, _ in checkpoint_files.complete_checkpoints(folder)] == [4, 6]   # the newest two, rewritten whole
    weights = folder / "checkpoint-6" / "model.safetensors"
    size = weights.stat().st_size
    with open(weights, "r+b") as f:
        f.truncate(size // 2)                          # cut after it was saved
    assert checkpoint_files.checkpoint_problem(folder / "checkpoint-6") == \
        f"model.safetensors is {size // 2} bytes, {size} when saved"
    assert checkpoint_files.find_resumable(tmp_path, run_id) == folder / "checkpoint-4"
    (folder / "checkpoint-4" / checkpoint_files.COMPLETE).write_text('{"step": 4, "fil')   # a marker cut mid-write
    with pytest.raises(ConfigError, match="no usable checkpoint") as refused:
        checkpoint_files.check_resume(tmp_path, run_id, cfg.resolved())
    assert "checkpoint-4: its completion marker grpolab_complete.json cannot be read" in str(refused.value)
    assert "checkpoint-6: model.safetensors is" in str(refused.value)


class StopAfterLastCheckpoint(TrainerCallback):
    """A process ended between its last checkpoint (at the last step) and the run's end: in the final
    evaluation, the final save or the worker's report."""

    def on_save(self, args, state, control, **kwargs):
        if state.global_step == STEPS:
            raise Stopped(state.global_step)


def test_a_run_stopped_after_its_last_checkpoint_resumes_without_training_past_its_budget(runs, tmp_path):
    """Resumed from a checkpoint at its last step, the run trains no further step (transformers'
    Trainer, resumed at max_steps mid-epoch, would train one more before checking its budget): it
    restores the weights and random state, evaluates and ends as the undisturbed run."""
    undisturbed, cfg, started = runs[0], build_config(EXPERIMENT), []
    with pytest.raises(Stopped):
        run_experiment(cfg, tmp_path, callbacks=[StopAfterLastCheckpoint()], on_run=started.append)
    (run_id,) = started
    assert checkpoint_files.checkpoint_step(checkpoint_files.find_resumable(tmp_path, run_id)) == STEPS
    resumed = run_experiment(cfg, tmp_path, RunIdentity(resume_run_id=run_id))
    assert resumed.steps == STEPS
    assert resumed.evals == undisturbed.evals                    # the final evaluation too: same weights, same draws
    assert sorted(resumed.train_curves) == sorted(undisturbed.train_curves)
    for key, points in undisturbed.train_curves.items():
        assert [step for step, _ in resumed.train_curves[key]] == [step for step, _ in points], key
        if not key.startswith(MEASURED_TIME):
            assert resumed.train_curves[key] == points, key
    assert [s for s, _ in checkpoint_files.complete_checkpoints(checkpoint_files.run_dir(tmp_path, run_id))] == [4, 6]
