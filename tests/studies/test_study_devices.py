"""Devices per worker (`grpolab study --gpus-per-row K`): bad requests are refused before anything
is written; each worker process is started seeing only its own device set; a K=2 row runs as two
gloo processes that log one MLflow run, with the numbers of the same row on one process.

CPU only: the devices are names handed out through CUDA_VISIBLE_DEVICES (`--devices 0,1`); no
GPU is used, so which GPU a rank computes on is not checked here."""

import os
import time
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState

from grpolab import cli
from grpolab.errors import ConfigError
from grpolab.studies.coordinator import run_study
from grpolab.studies.study_run import StudyRun
from grpolab.studies.definition import load_study
from grpolab.studies.devices import device_pool, place, placement_for
from grpolab.studies.processes import release, start_workers
from grpolab.studies.storage import create_or_load, default_storage
from grpolab.tracking.recorder import tracking_uri

ROW = {"method": {"base": "grpo", "kl_coef": 0.0}, "task": {"name": "addition", "digits": 2},
       "model": {"preset": "tiny"}, "warm_start": {"enabled": False},
       "train": {"steps": 2, "group_size": 4, "prompts_per_rollout": 4, "minibatches": 2},
       "eval": {"every": 2, "prompts": 8, "k": 2}, "tracking": {"flush_every": 1}}


def study_file(folder: Path, name: str = "devices", **extra) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"kind": "ladder", "name": name, "base": ROW, "seeds": [3],
                                    "rungs": [{"name": "base"}], **extra}))
    return path


@pytest.mark.parametrize("flags, message", [
    (["--gpus-per-row", "0", "--devices", "0,1"], "--gpus-per-row: must be an integer >= 1, got 0"),
    (["--gpus-per-row", "3", "--devices", "0,1"], "--gpus-per-row 3: the device pool has only 2 device(s)"),
    (["--gpus-per-row", "2", "--devices", "0,1,2"], "the pool of 3 devices (0,1,2, from --devices) does not split"),
    (["--gpus-per-row", "2", "--devices", "0,1,2,3", "--workers", "3"],
     "--workers 3: a pool of 4 devices with --gpus-per-row 2 gives at most 2 worker(s)"),
    (["--gpus-per-row", "1", "--devices", "0,0"], "a device is listed twice"),
    (["--devices", "0,1"], "--devices: only with --gpus-per-row K"),
])
def test_bad_device_requests_are_refused_before_anything_is_written(tmp_path, capsys, flags, message):
    state = tmp_path / "state"
    code = cli.main(["--state", str(state), "study", str(study_file(tmp_path)), *flags])
    assert code == 2 and message in capsys.readouterr().err
    assert not state.exists()   # no store, no study, no worker


def test_the_pool_comes_from_the_flag_the_study_file_or_cuda_visible_devices(tmp_path):
    cfg = load_study(study_file(tmp_path, devices=[4, 5, "GPU-aa"]))
    assert cfg.devices == ("4", "5", "GPU-aa")
    assert device_pool("0,1", cfg.devices, {}) == (("0", "1"), "--devices")
    assert device_pool(None, cfg.devices, {"CUDA_VISIBLE_DEVICES": "7"}) == (("4", "5", "GPU-aa"),
                                                                             "the study file's devices:")
    assert device_pool(None, (), {"CUDA_VISIBLE_DEVICES": "6,7"}) == (("6", "7"), "CUDA_VISIBLE_DEVICES")
    with pytest.raises(ConfigError, match="set but empty"):
        device_pool(None, (), {"CUDA_VISIBLE_DEVICES": ""})
    assert place(("0", "1", "2", "3"), 2, None).device_sets == (("0", "1"), ("2", "3"))
    assert place(("0", "1", "2", "3"), 1, 3).device_sets == (("0",), ("1",), ("2",))   # --workers asks for fewer
    assert placement_for((), None, None, 4) is None                                    # no --gpus-per-row: today's
    with pytest.raises(ConfigError, match="devices: 'a,b' is not a device"):
        load_study(study_file(tmp_path, devices=["a,b"]))


def _environ(proc, key: str = "CUDA_VISIBLE_DEVICES") -> dict:
    """The environment the process was started with, as the kernel shows it (empty once it
    exited); read again for a moment if ``key`` is not there yet."""
    deadline = time.monotonic() + 5
    while True:
        raw = Path(f"/proc/{proc.pid}/environ").read_bytes().split(b"\0")
        env = dict(item.decode("utf-8", "replace").split("=", 1) for item in raw if b"=" in item)
        if key in env or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert env, f"worker {proc.pid} already exited with {proc.poll()}"
    return env


def test_each_worker_process_sees_only_its_own_device_set(tmp_path):
    placement = place(("0", "1", "2", "3"), 2, None)
    procs = start_workers(str(study_file(tmp_path)), default_storage(tmp_path), tmp_path / "state", placement.workers,
                          placement.device_sets, placement.per_row)
    try:
        seen = [_environ(p).get("CUDA_VISIBLE_DEVICES") for p in procs]
        commands = [Path(f"/proc/{p.pid}/cmdline").read_bytes().split(b"\0") for p in procs]
    finally:
        release(procs, go=False)   # never told to go: killed before touching any store
    assert seen == ["0,1", "2,3"]
    assert all(cmd[cmd.index(b"--procs-per-row") + 1] == b"2" for cmd in commands)
    assert not (tmp_path / "state").exists()


def _the_run(state: Path, study: str):
    client = MlflowClient(tracking_uri(state))
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()],   # wherever the study logs
                              f"tags.`grpolab.study` = '{study}'")
    rows = [r for r in runs if "optuna.trial_number" in r.data.tags]
    assert len(rows) == 1, [(r.info.run_name, r.info.status) for r in runs]   # one MLflow run for the row
    run = rows[0]
    evals = {key: {m.step: m.value for m in client.get_metric_history(run.info.run_id, key)}
             for key in ("eval/pass_at_1", "eval/mean_length", "eval/greedy_accuracy")}
    return run, evals, set(run.data.metrics)


@pytest.mark.slow
def test_a_row_on_two_devices_runs_as_two_gloo_processes_logging_one_run_with_one_process_numbers(
        tmp_path, shared_state, record_property):
    # two studies of the same row (same seed: same model, prompts and held-out set) in the session's state
    two_path, one_path = study_file(tmp_path, "devices_k2"), study_file(tmp_path, "devices_k1")
    lines = []
    started = time.monotonic()
    assert run_study(StudyRun.of(str(two_path), shared_state,
                                 echo=lines.append, gpus_per_row=2, devices="0,1")) == 0
    record_property("two_process_row_s", round(time.monotonic() - started, 1))
    assert lines[0] == ("devices: 1 worker(s) x 2 device(s) per row from --devices: [0,1]; "
                        "each row runs as 2 processes (torch.distributed)")
    started = time.monotonic()
    assert run_study(StudyRun.of(str(one_path), shared_state, workers=1, echo=lambda s: None)) == 0   # in-process
    record_property("one_process_row_s", round(time.monotonic() - started, 1))

    two, two_evals, two_keys = _the_run(shared_state, "devices_k2")
    one, one_evals, one_keys = _the_run(shared_state, "devices_k1")
    assert two.info.status == one.info.status == "FINISHED"
    assert two.data.tags["grpolab.world_size"] == "2" and two.data.tags["grpolab.dist_backend"] == "gloo"
    assert two.data.tags["grpolab.processes"] == "2"
    assert two.data.tags["grpolab.cuda_visible_devices"] == "0,1"     # the worker's device set, seen by rank 0
    assert "grpolab.world_size" not in one.data.tags
    assert two_keys == one_keys                                      # the same curves, logged once
    for key in two_evals:
        assert sorted(two_evals[key]) == sorted(one_evals[key]) == [0, 2]   # one eval series, not one per rank
        # same model, same held-out prompts: step 0 is the same number; after training the two
        # runs sampled their groups differently (one batch of 16 vs two of 8), so within a tolerance
        assert two_evals[key][0] == one_evals[key][0]
    assert two_evals["eval/pass_at_1"][2] == pytest.approx(one_evals["eval/pass_at_1"][2], abs=0.25)
    assert two_evals["eval/mean_length"][2] == pytest.approx(one_evals["eval/mean_length"][2], rel=0.25)

    for path in (two_path, one_path):   # the row counted once
        (trial,) = create_or_load(load_study(path), default_storage(shared_state)).get_trials(deepcopy=False)
        assert trial.state == TrialState.COMPLETE
    assert os.environ.get("CUDA_VISIBLE_DEVICES") != "0,1"   # the coordinator's own environment is untouched
