"""A study row killed with SIGKILL after its first complete checkpoint resumes on the next
command and finishes: a 2-rung x 2-seed ladder on 2 workers whose metric is a held-out one
(``final:eval/pass_at_1``) ends with every row COMPLETE exactly once, and the killed row's
value, and the last value of each of its metrics but the wall-clock ones, equal those of the same
row run undisturbed.

Rows are tiny (random-init tiny model, 6 steps, a checkpoint every 2). A reward holds every row
while a flag file exists and some row has a complete checkpoint, so the SIGKILL lands after the
first checkpoint of the killed row however fast the machine is.

A study's end results (tables, dashboard) that fail to write are reported and written by the
next run of the command, with no row run again."""

import errno
import os
import signal
import subprocess
import sys
import time

import optuna
import pytest
import yaml
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState

from conftest import tiny_two_rung_ladder, write_sums
from grpolab.analysis.ablation import load_results
from grpolab.experiment import checkpoint_files
from grpolab.report.publish import record_study_tables
from grpolab.studies.coordinator import run_study
from grpolab.studies.study_run import StudyRun
from grpolab.studies.holders import WORKER_ATTR
from grpolab.studies.results_written import RESULTS_TAG
from grpolab.studies.storage import default_storage, open_storage
from grpolab.tracking.recorder import tracking_uri
from grpolab.trainer.metrics import MEASURED_TIME

STEPS, SAVE_EVERY = 6, 2
HOLD_AFTER_CHECKPOINT = '''
import glob, hashlib, os, time

def reward(*, completion, flag, checkpoints, **kwargs):
    while os.path.exists(flag) and glob.glob(checkpoints):   # held once any row has a complete checkpoint
        time.sleep(0.05)
    return float(hashlib.sha256(completion.encode()).digest()[0] % 2)   # a fixed coin: groups differ
'''


RUNGS = [{"name": "base"}, {"name": "+ clip higher", "changes": {"method.eps_high": 0.28}}]


def _study(folder, model_dir, flag, state, name="resume_rows", rungs=RUNGS, seeds=(0, 1)):
    """The study file; its reward module ``hold_ckpt`` is written in ``folder`` (on the workers' path)."""
    (folder / "hold_ckpt.py").write_text(HOLD_AFTER_CHECKPOINT)
    sums = write_sums(folder / "sums.jsonl")
    marker = str(state / "runs" / "*" / "checkpoint-*" / checkpoint_files.COMPLETE)
    base = {"method": {"base": "grpo", "kl_coef": 0.0}, "model": {"path": str(model_dir)},
            "warm_start": {"enabled": False}, "tracking": {"experiment": "resume_study", "flush_every": 1},
            "task": {"name": "local_dataset", "path": str(sums), "extract": "last_number", "grade": "numeric",
                     "max_completion_length": 4,
                     "rewards": ["correctness", {"name": "hold_ckpt:reward", "timeout_s": 0,
                                                 "params": {"flag": str(flag), "checkpoints": marker}}]},
            "train": {"group_size": 4, "prompts_per_rollout": 2, "n_train_prompts": 32, "learning_rate": 0.003,
                      "save_every": SAVE_EVERY, "keep_checkpoints": 2},
            "eval": {"prompts": 4, "k": 2, "every": SAVE_EVERY}}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"kind": "ladder", "name": name, "metric": "final:eval/pass_at_1", "base": base,
                                    "budget": {"train.steps": STEPS}, "seeds": list(seeds), "rungs": rungs}))
    return path


def _command(state, path, folder):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")])}
    return [sys.executable, "-m", "grpolab.cli", "--state", str(state), "study", str(path), "--workers", "2"], env


def _trials(state, name="resume_rows"):
    return optuna.load_study(study_name=name, storage=open_storage(default_storage(state))).get_trials()


def _row_with_a_checkpoint(state, timeout=600):
    """The running trial whose MLflow run has a complete checkpoint."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        done = {p.parent.parent.name for p in state.glob(f"runs/*/checkpoint-*/{checkpoint_files.COMPLETE}")}
        if done:   # a run folder has a checkpoint: the study and its trials exist
            for t in _trials(state):
                if t.state == TrialState.RUNNING and t.user_attrs.get("mlflow_run_id") in done:
                    return t
        time.sleep(0.2)
    raise AssertionError("no row reached its first checkpoint within the timeout")


def _complete(state, name="resume_rows"):
    """{row: COMPLETE trial}; asserts each row is COMPLETE exactly once."""
    complete = [t for t in _trials(state, name) if t.state == TrialState.COMPLETE]
    rows = [t.user_attrs["row"] for t in complete]
    assert sorted(rows) == sorted(set(rows)), rows
    return {t.user_attrs["row"]: t for t in complete}


def _last_values(client, run_id):
    """The last value of every metric of a run but the wall-clock ones (MEASURED_TIME, system/*)."""
    metrics = client.get_run(run_id).data.metrics
    return {k: v for k, v in metrics.items() if not k.startswith((*MEASURED_TIME, "system/"))}


@pytest.mark.slow
def test_a_row_killed_after_its_checkpoint_resumes_finishes_and_equals_an_undisturbed_one(tmp_path, tiny_model_dir):
    killed, undisturbed, flag = tmp_path / "killed", tmp_path / "undisturbed", tmp_path / "hold"
    path = _study(tmp_path, tiny_model_dir, flag, killed)
    cmd, env = _command(killed, path, tmp_path)
    flag.touch()
    first = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    trial = _row_with_a_checkpoint(killed)
    os.kill(trial.user_attrs[WORKER_ATTR]["pid"], signal.SIGKILL)
    time.sleep(1.0)
    flag.unlink()                                           # the other worker's row may go on
    out, _ = first.communicate(timeout=600)
    assert first.returncode == 1 and "did not complete" in out and "Traceback" not in out, out[-3000:]

    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
    complete = _complete(killed)
    assert sorted(complete) == ["r0-s0", "r0-s1", "r1-s0", "r1-s1"]
    row = trial.user_attrs["row"]
    client = MlflowClient(tracking_uri(killed))
    run = client.get_run(trial.user_attrs["mlflow_run_id"])
    assert complete[row].user_attrs["mlflow_run_id"] == run.info.run_id   # the killed row's own run, continued
    assert run.info.status == "FINISHED"
    assert int(run.data.tags["grpolab.resume.from_step"]) >= SAVE_EVERY
    assert run.data.tags["grpolab.resume.differing_points"] == "0"
    exp = client.get_experiment_by_name("resume_study").experiment_id
    assert [r.info.run_id for r in client.search_runs([exp]) if r.info.status == "RUNNING"] == []

    # the same row undisturbed: a one-row study of the killed row's rung and seed
    rung, seed = int(row[1:].split("-s")[0]), int(row.split("-s")[1])
    twin = _study(tmp_path, tiny_model_dir, flag, undisturbed, "twin", [{**RUNGS[rung], "name": "base"}], [seed])
    cmd, env = _command(undisturbed, twin, tmp_path)
    reference = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert reference.returncode == 0, (reference.stdout + reference.stderr)[-3000:]
    (twin_trial,) = _complete(undisturbed, "twin").values()
    assert complete[row].values == twin_trial.values        # the table's value of the resumed row
    resumed = _last_values(client, run.info.run_id)
    expected = _last_values(MlflowClient(tracking_uri(undisturbed)), twin_trial.user_attrs["mlflow_run_id"])
    assert resumed == expected                              # every metric's last value, exactly
    print(f"\nRESUME_STUDY killed_row={row} from_step={run.data.tags['grpolab.resume.from_step']} "
          f"metrics_equal={len(expected)} value={twin_trial.values[0]}")


def test_a_failed_results_write_is_reported_and_the_next_run_writes_them_without_rows(tmp_path):
    """The study's end results (tables, dashboard on the parent run) fail to write (disk full): the
    command says so in one error line and exits 1 with every row recorded; running it again writes
    them without running any row, and a third run, with nothing left to write, writes nothing."""
    path = tmp_path / "results_cut.yaml"
    path.write_text(yaml.safe_dump(tiny_two_rung_ladder(name="results_cut", seeds=[0])))
    state, lines = tmp_path / "state", []

    def disk_full(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    assert run_study(StudyRun.of(str(path), state, workers=1, echo=lines.append, publish=disk_full)) == 1
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1 and "No space left on device" in errors[0] and "run the same command again" in errors[0]
    cfg, study = load_results(str(path), state, None)
    rows = sorted((t.number, t.state, t.user_attrs["row"]) for t in study.get_trials())
    assert [(state_, row) for _, state_, row in rows] == [(TrialState.COMPLETE, "r0-s0"), (TrialState.COMPLETE, "r1-s0")]
    client, parent = MlflowClient(tracking_uri(state)), study.user_attrs["mlflow_parent_run_id"]
    runs = sorted(r.info.run_id for r in client.search_runs([client.get_run(parent).info.experiment_id]))
    assert client.get_run(parent).data.tags[RESULTS_TAG] == "pending"
    assert not {"table.md", "table.csv"} & {a.path for a in client.list_artifacts(parent)}

    assert run_study(StudyRun.of(str(path), state, workers=1, echo=lines.append, publish=record_study_tables)) == 0
    assert sorted((t.number, t.state, t.user_attrs["row"]) for t in load_results(str(path), state, None)[1].get_trials()) == rows
    assert sorted(r.info.run_id for r in client.search_runs([client.get_run(parent).info.experiment_id])) == runs
    assert {"table.md", "table.csv", "dashboard.html"} <= {a.path for a in client.list_artifacts(parent)}
    assert client.get_run(parent).data.tags[RESULTS_TAG] == "written"
    assert run_study(StudyRun.of(str(path), state,
                                 workers=1, echo=lines.append, publish=disk_full)) == 0   # nothing to write
