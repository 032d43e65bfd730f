"""Slurm as clusters set it up (`grpolab study --launcher slurm` with --account, --qos, --mem,
--constraint, --exclude, --setup, --slurm-param, or the study file's launcher.slurm): bad names
exit 2 before anything is submitted; every option reaches the sbatch script submitit writes; and
a study runs on the loopback Slurm cluster (tests/slurm_cluster.py) with either storage the jobs
can share: an Optuna journal on a shared folder (NFS lock) or PostgreSQL."""

import os
import time
import uuid
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState

from grpolab import cli
from grpolab.studies.definition import load_study
from grpolab.studies.launch_options import parse_slurm_param, parse_slurm_params
from grpolab.studies.slurm import SlurmLauncher
from grpolab.studies.storage import create_or_load, open_storage
from grpolab.tracking.recorder import tracking_uri
from test_study_slurm import ROW

SLURM_FILE = {"account": "proj123", "qos": "normal", "mem": "8G", "constraint": "a100", "exclude": "node[01-02]",
              "setup": ["module load cuda/12.4", "conda activate grpolab"], "params": {"comment": "from-the-file"}}


def study_file(folder: Path, name: str = "slurm_opts", rows: int = 1, **extra) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"kind": "ladder", "name": name, "base": ROW, "seeds": list(range(rows)),
                                    "rungs": [{"name": "base"}], **extra}))
    return path


@pytest.mark.parametrize("flags, message", [
    (["--slurm-param", "mail_tpye=END"], "--slurm-param mail_tpye: not a submitit Slurm parameter (did you mean 'mail_type'?)"),
    (["--slurm-param", "time=10"], "--slurm-param time: set by grpolab; use --time / launcher.slurm.time"),
    (["--slurm-param", "slurm_account=x"], "--slurm-param slurm_account: set by grpolab; use --account"),
    (["--slurm-param", "novalue"], "--slurm-param: expected key=value, got 'novalue'"),
    (["--slurm-param", "additional_parameters={gpu-bind: closest}"],
     "--slurm-param additional_parameters: expected a JSON mapping such as"),
    (["--slurm-param", "cpus_per_gpu=four"], "--slurm-param cpus_per_gpu: expected an integer, got 'four'"),
    (["--slurm-param", "srun_args=--cpu-bind=none"], "--slurm-param srun_args: expected a list of strings"),
])
def test_bad_slurm_parameters_exit_2_before_anything_is_submitted(tmp_path, capsys, flags, message):
    state = tmp_path / "state"
    code = cli.main(["--state", str(state), "study", str(study_file(tmp_path)), "--launcher", "slurm", *flags])
    err = capsys.readouterr().err
    assert code == 2 and message in err, err
    assert not state.exists()


def test_slurm_options_need_the_slurm_launcher_and_the_file_section_is_checked(tmp_path, capsys):
    assert cli.main(["study", str(study_file(tmp_path)), "--account", "x"]) == 2
    assert "--account: only with --launcher slurm" in capsys.readouterr().err
    assert cli.main(["study", str(study_file(tmp_path, launcher={"slurm": {"acount": "x"}}))]) == 2
    assert "launcher.slurm.acount: unknown key (did you mean 'account'?)" in capsys.readouterr().err
    assert cli.main(["study", str(study_file(tmp_path, launcher={"slurm": {"setup": "module load x"}}))]) == 2
    assert "launcher.slurm.setup: expected a list of shell lines" in capsys.readouterr().err
    assert parse_slurm_param("exclusive=true") == ("exclusive", True)
    assert parse_slurm_param("gres=gpu:a100:2") == ("gres", "gpu:a100:2")


@pytest.mark.parametrize("key, value", [("time", "30:00"), ("time", "4:00:00"), ("mem", "64")])
def test_unquoted_times_and_memory_in_the_file_are_refused(tmp_path, capsys, key, value):
    """YAML reads time: 30:00 as 1800 (base 60) and Slurm reads mem: 64 as 64 MB."""
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"kind": "ladder", "name": "s", "base": ROW, "rungs": [{"name": "base"}]})
                    + f"launcher:\n  slurm:\n    {key}: {value}\n")
    assert cli.main(["study", str(path)]) == 2
    assert f"launcher.slurm.{key}: expected a quoted string such as" in capsys.readouterr().err


def test_slurm_param_values_stay_as_written_except_booleans_and_decimal_integers(tmp_path):
    params = parse_slurm_params(["wckey=007", "comment=10:30", "mail_user=0x1F", "cpus_per_gpu=4", "exclusive=true",
                                 "additional_parameters.gpu-bind=closest",
                                 'additional_parameters={"hint": "nomultithread"}'])
    assert params == {"wckey": "007", "comment": "10:30", "mail_user": "0x1F", "cpus_per_gpu": 4, "exclusive": True,
                      "additional_parameters": {"gpu-bind": "closest", "hint": "nomultithread"}}
    launcher = SlurmLauncher(params={**params, "comment": 10})   # an integer for a string parameter: written as is
    launcher.check(load_study(study_file(tmp_path)), "postgresql://u@h/db")
    text = _script(launcher, load_study(study_file(tmp_path)), tmp_path / "state").splitlines()
    for line in ("#SBATCH --wckey=007", "#SBATCH --comment=10", "#SBATCH --cpus-per-gpu=4", "#SBATCH --exclusive",
                 "#SBATCH --gpu-bind=closest", "#SBATCH --hint=nomultithread"):
        assert line in text, (line, text)


def _script(launcher: SlurmLauncher, cfg, state: Path) -> str:
    executor = launcher._executor(cfg, state)
    return executor._executor._make_submission_file_text("python -m grpolab.cli study-worker", "uid")


def test_every_option_reaches_the_sbatch_script_the_command_line_over_the_file(tmp_path):
    cfg = load_study(study_file(tmp_path, launcher={"slurm": SLURM_FILE}))
    launcher = SlurmLauncher(qos="high", setup=("source /etc/profile",), params={"gres": "gpu:a100:2"},
                             partition="gpu", time="2:00:00", gpus_per_row=2)
    launcher.check(cfg, "postgresql://u@h/db")
    text = _script(launcher, cfg, tmp_path / "state")
    for line in ("#SBATCH --account=proj123", "#SBATCH --qos=high", "#SBATCH --mem=8G", "#SBATCH --constraint=a100",
                 "#SBATCH --exclude='node[01-02]'", "#SBATCH --partition=gpu", "#SBATCH --time=120",
                 "#SBATCH --gpus-per-node=2", "#SBATCH --gres=gpu:a100:2", "#SBATCH --comment=from-the-file",
                 "#SBATCH --job-name=grpolab-slurm_opts"):
        assert line in text.splitlines(), (line, text)   # (submitit quotes a value with shell characters)
    setup = text.split("# setup\n")[1].split("\n\n")[0].splitlines()
    assert setup == ["source /etc/profile"]   # the command line's setup lines replace the file's
    assert launcher.jobs == 1


def test_the_journal_storage_uses_optunas_nfs_lock(tmp_path):
    from optuna.storages.journal import JournalFileOpenLock
    storage = open_storage(f"journal:{tmp_path}/shared/optuna.journal")
    assert isinstance(storage._backend._lock, JournalFileOpenLock)
    study = create_or_load(load_study(study_file(tmp_path)), f"journal:{tmp_path}/shared/optuna.journal")
    assert study.study_name == "slurm_opts"


@pytest.fixture
def cluster(tmp_path, monkeypatch, record_property):
    from slurm_cluster import cluster_for_test
    with cluster_for_test(tmp_path, monkeypatch, record_property) as c:
        yield c


@pytest.mark.slow
@pytest.mark.parametrize("storage_kind", ["journal", "postgresql"])
def test_a_study_runs_on_slurm_with_either_shared_storage_and_the_jobs_options(
        cluster, tmp_path, postgres_server, record_property, storage_kind):
    """Two rows over two jobs; a setup line each job runs writes a marker, so the setup reached the
    job, not only the script."""
    from grpolab.studies.coordinator import run_study
    from grpolab.studies.study_run import StudyRun
    shared = tmp_path / "shared"   # one node: every folder is shared; on a cluster, an NFS mount
    storage = (f"journal:{shared}/optuna.journal" if storage_kind == "journal"
               else postgres_server.database(f"slurm_opts_{uuid.uuid4().hex[:8]}"))
    row = {**ROW, "train": {**ROW["train"], "steps": 2}, "eval": {"every": 2, "prompts": 4, "k": 2}}
    path = tmp_path / "slurm_opts.yaml"
    path.write_text(yaml.safe_dump({"kind": "ladder", "name": "slurm_opts", "base": row, "seeds": [0, 1],
                                    "rungs": [{"name": "base"}],
                                    "launcher": {"slurm": {"mem": "1G", "jobs": 2, "params": {"comment": "grpolab"},
                                                           "setup": [f"echo $SLURM_JOB_ID >> {shared}/setup_ran"]}}}))
    shared.mkdir()
    launcher = SlurmLauncher(partition="debug", cpus_per_job=1, time="20", poll_s=0.5, folder=str(shared / "jobs"))
    lines, started = [], time.monotonic()
    code = run_study(StudyRun.of(str(path), shared / "state",
                                 storage_url=storage, echo=lines.append, launcher=launcher))
    record_property("study_s", round(time.monotonic() - started, 1))
    assert code == 0, "\n".join(lines)
    jobs = [j.job_id for j in launcher.submitted]
    assert len(jobs) == 2 and sorted((shared / "setup_ran").read_text().split()) == sorted(jobs)
    script = (shared / "jobs" / f"{jobs[0]}_submission.sh").read_text().splitlines()
    assert "#SBATCH --mem=1G" in script and "#SBATCH --comment=grpolab" in script
    study = create_or_load(load_study(path), storage)
    trials = study.get_trials(deepcopy=False)
    assert sorted(t.user_attrs["row"] for t in trials) == ["r0-s0", "r0-s1"]
    assert all(t.state == TrialState.COMPLETE for t in trials)
    assert {t.user_attrs["worker"]["slurm_job"] for t in trials} <= set(jobs)
    client = MlflowClient(tracking_uri(shared / "state"))
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()],
                              "tags.`grpolab.study` = 'slurm_opts'")
    assert sorted(r.info.status for r in runs if "optuna.trial_number" in r.data.tags) == ["FINISHED"] * 2
    assert os.environ.get("SLURM_JOB_ID") is None   # the coordinator itself is no job


def test_a_worker_that_does_not_see_the_journal_says_so_and_creates_nothing(tmp_path, capsys):
    """A job on a node where the coordinator's journal folder is not mounted: no new empty journal."""
    journal = tmp_path / "not-mounted" / "optuna.journal"
    path = study_file(tmp_path)
    assert cli.main(["--state", str(tmp_path / "state"), "study-worker", str(path), "--storage", f"journal:{journal}"]) == 2
    assert (f"study slurm_opts is not in journal {journal} — is its folder on a file system every node mounts?"
            in capsys.readouterr().err)
    assert not journal.parent.exists()
    other = tmp_path / "shared" / "optuna.journal"   # a journal the coordinator made for another study
    create_or_load(load_study(study_file(tmp_path, name="another")), f"journal:{other}")
    assert cli.main(["--state", str(tmp_path / "state"), "study-worker", str(path), "--storage", f"journal:{other}"]) == 2
    assert f"study slurm_opts is not in journal {other}" in capsys.readouterr().err


def test_job_states_are_read_afresh_until_each_job_ends_then_kept(tmp_path, monkeypatch):
    """The launcher asks sacct about the jobs not yet ended at every poll, so a job that only passes
    through a state in which it still runs or waits (CONFIGURING while a node boots, SUSPENDED) is
    followed to its end (submitit's watcher files those as ended and stops asking); an ended job is
    not asked about again, its step lines (``101.batch``) are not jobs, and a sacct that does not
    answer leaves the last states read."""
    from types import SimpleNamespace
    answer, calls = tmp_path / "answer", tmp_path / "calls"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sacct").write_text(f'#!/bin/sh\necho "$@" >> {calls}\n[ -s {answer} ] || exit 1\n'
                                   f'echo "JobID|State|NodeList"\ncat {answer}\n')
    (bin_dir / "sacct").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    launcher = SlurmLauncher(jobs=2)
    launcher.submitted.extend(SimpleNamespace(job_id=j) for j in ("101", "102"))

    answer.write_text("101|CONFIGURING|node1\n102|PENDING|\n")
    assert launcher.states() == {"101": "CONFIGURING", "102": "PENDING"}
    answer.write_text("101|RUNNING|node1\n101.batch|RUNNING|node1\n102|CANCELLED by 0|\n")
    assert launcher.states() == {"101": "RUNNING", "102": "CANCELLED"}
    answer.write_text("101|COMPLETED|node1\n")   # 102 is not asked about any more
    assert launcher.states() == {"101": "COMPLETED", "102": "CANCELLED"}
    assert [line.split()[-1] for line in calls.read_text().splitlines()] == ["101,102", "101,102", "101"]
    answer.write_text("")                        # sacct fails from now on: nothing left to ask
    assert launcher.states() == {"101": "COMPLETED", "102": "CANCELLED"}
    assert len(calls.read_text().splitlines()) == 3

    launcher.submitted.append(SimpleNamespace(job_id="103"))
    assert launcher.states()["103"] == "UNKNOWN"   # sacct failed: not known yet, so still watched
    answer.write_text("103|PREEMPTED|\n")
    assert launcher.states()["103"] == "PREEMPTED"
    answer.write_text("103|PENDING|\n")          # requeued after its preemption: followed again
    assert launcher.states()["103"] == "PENDING"
