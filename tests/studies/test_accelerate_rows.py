"""Study rows launched through accelerate (`--gpus-per-row K --accelerate-config FILE`): a bad file
is refused before anything is written; the row's processes start as one `accelerate launch` with
the file and K; accelerate gives each rank its torch.distributed environment; a real 2-process
row (gloo on CPU) logs one MLflow run. The shipped DeepSpeed files load in accelerate's own
config class; DeepSpeed itself is not installed here, so no ZeRO row runs in these tests."""

import json
import os
import subprocess
import time
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from grpolab import cli
from grpolab.errors import ConfigError
from grpolab.studies import ranks
from grpolab.studies.launch_options import check_accelerate_config
from grpolab.tracking.recorder import tracking_uri
from test_study_devices import study_file

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "studies" / "accelerate"


def _bad(tmp_path: Path, what: str) -> tuple[str, str]:
    """(path, the message's tail) of a bad accelerate config."""
    if what == "missing":
        return str(tmp_path / "nope.yaml"), "does not exist"
    if what == "directory":
        return str(tmp_path), "is not a file"
    path = tmp_path / f"{what}.yaml"
    path.write_text({"not_yaml": "a: [1, 2\n", "not_mapping": "- 1\n- 2\n",
                     "disagrees": "distributed_type: MULTI_GPU\nnum_processes: 4\n",
                     "precision": "distributed_type: DEEPSPEED\nmixed_precision: bf16\n",
                     "gpu_ids": "distributed_type: MULTI_GPU\ngpu_ids: 0,1\n",
                     "no_distribution": "distributed_type: 'NO'\n",
                     "machines": "distributed_type: MULTI_GPU\nnum_machines: 2\n"}[what])
    return str(path), {"not_yaml": "is not YAML or JSON", "not_mapping": "is not an accelerate config",
                       "disagrees": "says num_processes: 4, but --gpus-per-row is 2",
                       "precision": "sets mixed_precision: bf16; each row's train.dtype decides it",
                       "gpu_ids": "sets gpu_ids: 0,1; a row runs on its worker's devices",
                       "no_distribution": "says distributed_type: NO; a row on K processes runs with MULTI_GPU",
                       "machines": "says use_cpu: None, num_machines: 2; a row runs on its worker's node"}[what]


@pytest.mark.parametrize("what", ["missing", "directory", "not_yaml", "not_mapping", "disagrees", "precision",
                                  "gpu_ids", "no_distribution", "machines"])
def test_a_bad_accelerate_config_exits_2_naming_it_before_anything_is_written(tmp_path, capsys, what):
    config, tail = _bad(tmp_path, what)
    state = tmp_path / "state"
    code = cli.main(["--state", str(state), "study", str(study_file(tmp_path)), "--gpus-per-row", "2",
                     "--devices", "0,1", "--accelerate-config", config])
    err = capsys.readouterr().err
    assert code == 2 and f"--accelerate-config: {config} {tail}" in err, err
    assert not state.exists()


def test_the_study_file_key_is_checked_and_needs_k_of_two_or_more(tmp_path, capsys):
    path = study_file(tmp_path, launcher={"accelerate_config": "missing.yaml"})
    assert cli.main(["--state", str(tmp_path / "s"), "study", str(path), "--gpus-per-row", "2", "--devices", "0,1"]) == 2
    assert f"launcher.accelerate_config: {tmp_path / 'missing.yaml'} does not exist" in capsys.readouterr().err
    path = study_file(tmp_path, launcher={"accelerate_conifg": "x.yaml"})
    assert cli.main(["study", str(path)]) == 2
    assert "launcher.accelerate_conifg: unknown key (did you mean 'accelerate_config'?)" in capsys.readouterr().err
    with pytest.raises(ConfigError, match=r"--accelerate-config: only with --gpus-per-row K >= 2"):
        check_accelerate_config(str(EXAMPLES / "zero2.yaml"), 1, "--accelerate-config")
    assert check_accelerate_config(str(EXAMPLES / "zero3.yaml"), 8, "x") == str((EXAMPLES / "zero3.yaml").resolve())


def test_the_plan_checks_the_file_against_plan_devices_per_row(tmp_path, capsys):
    config = tmp_path / "four.yaml"
    config.write_text("distributed_type: DEEPSPEED\nnum_processes: 4\n")
    path = study_file(tmp_path, launcher={"accelerate_config": str(config)}, plan={"devices_per_row": 2})
    assert cli.main(["study", str(path), "--plan"]) == 2
    assert "says num_processes: 4, but --gpus-per-row is 2" in capsys.readouterr().err
    assert cli.main(["study", str(path), "--plan", "--gpus-per-row", "4"]) == 0
    assert f"(--gpus-per-row; launched by accelerate with {config.resolve()})" in capsys.readouterr().out


def test_zero3_is_refused_unless_every_row_generates_with_vllm(tmp_path, capsys):
    """Under ZeRO-3 model.generate needs every rank; the evaluation runs on rank 0 alone."""
    zero3 = str(EXAMPLES / "zero3.yaml")
    path = study_file(tmp_path, launcher={"accelerate_config": zero3}, plan={"devices_per_row": 2})
    state = tmp_path / "state"
    assert cli.main(["--state", str(state), "study", str(path), "--gpus-per-row", "2", "--devices", "0,1"]) == 2
    assert ("launcher.accelerate_config: " + zero3 + " is DeepSpeed ZeRO-3, which needs generation.backend: vllm "
            "in every row (rows here use transformers") in capsys.readouterr().err
    assert not state.exists()
    assert cli.main(["study", str(path), "--plan"]) == 2
    assert "is DeepSpeed ZeRO-3, which needs generation.backend: vllm" in capsys.readouterr().err
    zero2 = study_file(tmp_path, launcher={"accelerate_config": str(EXAMPLES / "zero2.yaml")},
                       plan={"devices_per_row": 2})
    assert cli.main(["study", str(zero2), "--plan"]) == 0


@pytest.mark.parametrize("name", ["zero2.yaml", "zero3.yaml", "multi_cpu_gloo.yaml"])
def test_the_shipped_configs_load_in_accelerates_own_config_class(name):
    from accelerate.commands.config.config_args import load_config_from_file
    config = load_config_from_file(str(EXAMPLES / name))
    stage = {"zero2.yaml": 2, "zero3.yaml": 3}.get(name)
    assert config.distributed_type == ("DEEPSPEED" if stage else "MULTI_GPU")
    assert (config.deepspeed_config or {}).get("zero_stage") == stage


def test_a_row_on_k_processes_starts_one_accelerate_launch_with_the_file_and_k(tmp_path, monkeypatch):
    started = []

    class Captured:
        def __init__(self, cmd, env, **kwargs):
            started.append((cmd, env, kwargs))
    monkeypatch.setattr(ranks.subprocess, "Popen", Captured)
    monkeypatch.setenv("GRPOLAB_WORKER_THREADS", "8")
    zero3 = str(EXAMPLES / "zero3.yaml")
    procs = ranks.start_ranks(4, tmp_path, zero3, "bf16")
    assert len(procs) == len(started) == 1   # accelerate's launcher starts the 4 ranks
    (cmd, env, kwargs), = started
    port = cmd[cmd.index("--main_process_port") + 1]
    assert cmd == [sys.executable, "-m", "accelerate.commands.launch", "--config_file", zero3, "--num_processes", "4",
                   "--num_machines", "1", "--machine_rank", "0", "--main_process_ip", "127.0.0.1",
                   "--main_process_port", port, "--gpu_ids", "all", "--mixed_precision", "bf16",
                   "-m", "grpolab.cli", "study-rank", str(tmp_path / ranks.SPEC)]
    assert env[ranks.PARENT_ENV] == ranks.VIA_LAUNCHER and env["OMP_NUM_THREADS"] == "2"   # 8 threads / 4 ranks
    assert "RANK" not in env and "WORLD_SIZE" not in env   # accelerate sets them per rank
    assert kwargs["preexec_fn"] is not None   # the launcher dies with its worker
    started.clear()
    ranks.start_ranks(2, tmp_path)   # without a file: the ranks themselves, as torchrun would start them
    assert [e["RANK"] for _, e, _ in started] == ["0", "1"] and all(c[1:3] == ["-m", "grpolab.cli"] for c, _, _ in started)


def test_workers_and_slurm_jobs_are_told_the_file(tmp_path):
    from grpolab.studies.definition import load_study
    from grpolab.studies.slurm import worker_command
    zero2 = str(EXAMPLES / "zero2.yaml")
    cmd = worker_command(load_study(study_file(tmp_path)), "postgresql://u@h/db", tmp_path, 2, zero2)
    assert cmd[-4:] == ["--procs-per-row", "2", "--accelerate-config", zero2]


def test_accelerate_gives_each_rank_its_distributed_environment(tmp_path):
    """The launch command run for real with the gloo config: each rank records what it got. The
    file is given gpu_ids and mixed_precision (which grpolab refuses before launching) to show that
    the launch's flags beat them: the worker's devices and the row's dtype hold."""
    (tmp_path / "dump_rank_env.py").write_text(
        "import json, os, sys\n"
        "keys = ('RANK', 'LOCAL_RANK', 'WORLD_SIZE', 'LOCAL_WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT', "
        "'ACCELERATE_MIXED_PRECISION', 'OMP_NUM_THREADS', 'CUDA_VISIBLE_DEVICES')\n"
        "open(os.path.join(sys.argv[1], 'rank' + os.environ['RANK']), 'w').write("
        "json.dumps({k: os.environ.get(k) for k in keys}))\n")
    config = tmp_path / "overridden.yaml"
    config.write_text((EXAMPLES / "multi_cpu_gloo.yaml").read_text().replace("gpu_ids: all", "gpu_ids: 0,1")
                      + "mixed_precision: fp16\n")
    cmd = ranks.accelerate_command(str(config), 2, 29517, ["-m", "dump_rank_env", str(tmp_path)], "fp32")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "5,6"}
    done = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    got = [json.loads((tmp_path / f"rank{r}").read_text()) for r in (0, 1)]
    for rank, seen in enumerate(got):
        assert seen["RANK"] == seen["LOCAL_RANK"] == str(rank)
        assert seen["WORLD_SIZE"] == seen["LOCAL_WORLD_SIZE"] == "2"
        assert seen["MASTER_ADDR"] == "127.0.0.1" and seen["MASTER_PORT"] == "29517"
        assert seen["ACCELERATE_MIXED_PRECISION"] == "no"   # train.dtype fp32, not the file's fp16
        assert seen["CUDA_VISIBLE_DEVICES"] == "5,6"          # the worker's devices, not the file's 0,1


@pytest.mark.slow
def test_a_two_process_row_through_accelerate_logs_one_mlflow_run(tmp_path, shared_state):
    from grpolab.studies.coordinator import run_study
    from grpolab.studies.study_run import StudyRun
    path, lines = study_file(tmp_path, "accelerate_k2"), []
    config = str(EXAMPLES / "multi_cpu_gloo.yaml")
    assert run_study(StudyRun.of(str(path), shared_state,
                                 echo=lines.append, gpus_per_row=2, devices="0,1", accelerate_config=config)) == 0, lines
    assert lines[0].endswith(f"; launched by accelerate with {Path(config).resolve()}")
    client = MlflowClient(tracking_uri(shared_state))
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()],
                              "tags.`grpolab.study` = 'accelerate_k2'")
    rows = [r for r in runs if "optuna.trial_number" in r.data.tags]
    assert len(rows) == 1 and rows[0].info.status == "FINISHED"
    assert rows[0].data.tags["grpolab.world_size"] == "2" and rows[0].data.tags["grpolab.dist_backend"] == "gloo"
    assert rows[0].data.tags["grpolab.accelerate_config"] == str(Path(config).resolve())   # the worker's ranks got it
    assert sorted(m.step for m in client.get_metric_history(rows[0].info.run_id, "eval/pass_at_1")) == [0, 2]


def test_a_pruned_row_under_the_launcher_is_stopped_once_rank_0_wrote_its_result(tmp_path, monkeypatch):
    """Under accelerate the watched process is the launcher, which waits for every rank: a rank
    stuck after rank 0 was pruned would keep it alive, so rank 0's result file ends the watch."""
    monkeypatch.setattr(ranks, "RESULT_TO_EXIT_S", 0.5)
    launcher = subprocess.Popen([sys.executable, "-c",   # writes rank 0's pruned result, then waits as for a stuck rank
                                 f"import json, time; open({str(tmp_path / ranks.RESULT)!r}, 'w').write("
                                 "json.dumps({'pruned': 'step 2'})); time.sleep(600)"])
    deadline = time.monotonic() + 60

    def check():
        if time.monotonic() > deadline:
            raise TimeoutError("the watch did not end")
    codes = ranks.watch_ranks(ranks.LaunchedRanks([launcher]), tmp_path, check, lambda: None)
    assert codes == [-15] and launcher.poll() == -15   # stopped (SIGTERM), not waited for
    assert ranks.read_result(tmp_path) == {"pruned": "step 2"}


def test_a_deepspeed_json_the_file_names_is_passed_by_its_absolute_path(tmp_path, monkeypatch):
    folder = tmp_path / "configs"
    folder.mkdir()
    (folder / "ds.json").write_text('{"zero_optimization": {"stage": 2}}')
    config = folder / "zero2_json.yaml"
    config.write_text("distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: ds.json\n")
    monkeypatch.chdir(tmp_path)   # a worker runs elsewhere than the accelerate file's folder
    cmd = ranks.accelerate_command(str(config), 2, 29517, ["-m", "x"])
    assert cmd[cmd.index("--deepspeed_config_file") + 1] == str((folder / "ds.json").resolve())
    assert "--deepspeed_config_file" not in ranks.accelerate_command(str(EXAMPLES / "zero2.yaml"), 2, 29517, ["-m", "x"])
