"""`grpolab study --launcher slurm` on the loopback Slurm cluster (tests/slurm_cluster.py: one
node, CPU only, a sacct stand-in) with a real PostgreSQL storage: four rows over two worker jobs,
one job cancelled (scancel) in the middle of its row, held there by a flag file. Its row is
handed back at once, by its worker (SIGTERM) or, when the worker ignores SIGTERM and Slurm kills
it, by the coordinator from the job's state; every row completes exactly once, the cancelled
row's run ends KILLED with the reason and no MLflow run is left RUNNING. Storage the jobs could
not share (SQLite) is refused before anything is submitted. The journal storage on a shared
folder, and the cluster options, are tested in tests/studies/test_slurm_options.py."""

import os
import threading
import time
import uuid
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState

from grpolab import cli
from grpolab.errors import ConfigError
from grpolab.studies.definition import load_study
from grpolab.studies.slurm import SlurmLauncher, job_state, parse_time
from grpolab.tracking.recorder import tracking_uri

ROW = {"method": {"base": "grpo", "kl_coef": 0.0}, "task": {"name": "addition", "digits": 2},
       "model": {"preset": "tiny"}, "warm_start": {"enabled": False},
       "train": {"steps": 4, "group_size": 4, "prompts_per_rollout": 4, "minibatches": 2},
       "eval": {"every": 4, "prompts": 4, "k": 2}}


def study_file(folder: Path) -> Path:
    path = folder / "slurm_ladder.yaml"
    path.write_text(yaml.safe_dump({"kind": "ladder", "name": "slurm_ladder", "base": ROW, "seeds": [0, 1],
                                    "rungs": [{"name": "base"}, {"name": "+ lr", "changes": {"train.learning_rate": 2e-3}}]}))
    return path


def test_storage_the_jobs_cannot_share_is_refused_before_anything_is_submitted(tmp_path, capsys):
    state = tmp_path / "state"
    code = cli.main(["--state", str(state), "study", str(study_file(tmp_path)), "--launcher", "slurm", "--jobs", "2",
                     "--storage", f"sqlite:///{tmp_path}/optuna.db"])
    err = capsys.readouterr().err
    assert code == 2 and "--launcher slurm: the jobs need a storage they all reach: PostgreSQL" in err, err
    assert "SQLite is not safe across machines" in err
    assert not state.exists() and not (tmp_path / "optuna.db").exists()


def test_slurm_flags_are_checked(tmp_path, capsys):
    assert cli.main(["study", str(study_file(tmp_path)), "--jobs", "2"]) == 2
    assert "--jobs: only with --launcher slurm" in capsys.readouterr().err
    cfg = load_study(study_file(tmp_path))
    with pytest.raises(ConfigError, match="--workers: not with --launcher slurm"):
        SlurmLauncher(jobs=2).check(cfg, "postgresql+psycopg2://u@h/db", workers=2)
    with pytest.raises(ConfigError, match="--jobs: must be an integer >= 1"):
        SlurmLauncher(jobs=0).check(cfg, "postgresql+psycopg2://u@h/db")
    with pytest.raises(ConfigError, match="not a Slurm time"):
        parse_time("1:xx")
    assert [parse_time(t) for t in ("30", "1:30", "2:00:00", "1-00", "1-2:03:04")] == [30, 2, 120, 1440, 1564]
    assert job_state("CANCELLED by 0") == "CANCELLED"


@pytest.fixture
def cluster(tmp_path, monkeypatch, record_property):
    from slurm_cluster import cluster_for_test
    with cluster_for_test(tmp_path, monkeypatch, record_property) as c:
        yield c


# The held rows' reward (replacing fault_helpers' HOLD_REWARD): it holds its row while the flag
# file exists, and says which worker process is inside it (flag.held-<pid>), so the scancel lands
# inside the row's first reward call, not in its set-up. When deaf, it ignores SIGTERM: Slurm's
# SIGKILL (KillWait later) ends the worker, and only the coordinator can hand its row back.
HOLD_REWARD = '''
import os, signal, threading, time

def reward(*, completion, flag, **kwargs):
    if DEAF:
        assert threading.current_thread() is threading.main_thread()
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    open(f"{flag}.held-{os.getpid()}", "w").close()
    while os.path.exists(flag):
        time.sleep(0.05)
    return 0.0
'''


@pytest.mark.slow
@pytest.mark.parametrize("worker_hands_back", [True, False], ids=["worker-hands-back", "worker-killed-first"])
def test_four_rows_over_two_jobs_one_cancelled_mid_row_complete_exactly_once(
        cluster, tmp_path, tiny_model_dir, postgres_server, monkeypatch, record_property, request, worker_hands_back):
    """Every row is held mid-row by a flag file (fault_helpers.held_study) until the cancelled
    job's row has been handed back, so the scancel lands mid-row however fast or slow the machine
    is: a row cannot finish before it, nor a job be cancelled before its row started (a fixed
    4-step row raced the scancel, and lost on a loaded machine). The coordinator sees the jobs as
    on another host, as from a cluster's login node: no process check or heartbeat grace can hand
    the row back within the test's 90 s, only the job's end (or its worker itself)."""
    import optuna
    from fault_helpers import held_study
    from slurm_cluster import until

    from grpolab.studies import hand_back, holders, resume, row_interrupts
    flag = tmp_path / "hold"
    flag.touch()
    path = held_study(tmp_path, tiny_model_dir, flag, name="slurm_ladder", seeds=(0, 1),
                      rungs=[{"name": "base"}, {"name": "+ lr", "changes": {"train.learning_rate": 2e-3}}])
    (tmp_path / "hold_reward.py").write_text(f"DEAF = {not worker_hands_back}\n" + HOLD_REWARD)
    for module in (holders, hand_back, resume, row_interrupts):   # the coordinator's host, wherever it is read
        monkeypatch.setattr(module, "host_identity", lambda: "login-node/00000000/0")
    # the rows' reward module lives in tmp_path: this process and the jobs (sbatch passes them this
    # process's environment) import it from there
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    storage, state = postgres_server.database(f"slurm_rows_{uuid.uuid4().hex[:8]}"), tmp_path / "state"
    launcher = SlurmLauncher(jobs=2, partition="debug", cpus_per_job=1, time="20", poll_s=0.5)
    lines, outcome = [], {}

    def coordinate():
        from grpolab.studies.coordinator import run_study
        from grpolab.studies.study_run import StudyRun
        try:
            outcome["code"] = run_study(StudyRun.of(str(path), state,
                                                    storage_url=storage, echo=lines.append, launcher=launcher))
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            outcome["error"] = exc
    started = time.monotonic()
    thread = threading.Thread(target=coordinate, daemon=True)
    thread.start()

    readers = []   # one storage (one connection pool) for every read: a new one per poll kept ~50 connections open
    request.addfinalizer(lambda: readers and readers[0].engine.dispose())

    def trials():
        if not readers:
            readers.append(optuna.storages.RDBStorage(storage))
        return optuna.load_study(study_name="slurm_ladder", storage=readers[0]).get_trials(deepcopy=False)

    def held_rows():   # a row held in each job: its MLflow run open, its worker inside the reward
        assert thread.is_alive(), f"the coordinator ended before the rows ran: {outcome} {lines}"
        if not any(line.startswith("slurm: submitted") for line in lines):
            return None   # the coordinator still creates the storage's tables: a second creator would collide
        held = {}
        for t in trials():
            worker = t.user_attrs.get("worker") or {}
            if (t.state == TrialState.RUNNING and worker.get("slurm_job") and "mlflow_run_id" in t.user_attrs
                    and Path(f"{flag}.held-{worker['pid']}").exists()):
                held[worker["slurm_job"]] = t
        return sorted(held.values(), key=lambda t: t.number) if len(held) == 2 else None
    try:
        try:   # two jobs start python, torch and a model at once: slow on a loaded 2-core machine
            victim, survivor = until(held_rows, 480, every=0.5)
        except AssertionError:
            raise AssertionError(f"no row held in each of 2 Slurm jobs: {outcome} " + " | ".join(lines)) from None
        job_id = victim.user_attrs["worker"]["slurm_job"]
        record_property("rows_held_s", round(time.monotonic() - started, 1))
        cancelled = time.monotonic()
        cluster.run("scancel", job_id)

        def handed_back():   # the victim's trial failed and its row queued again, while the flag still holds
            now = trials()
            again = [t for t in now if t.user_attrs.get("row") == victim.user_attrs["row"] and t.number != victim.number]
            return now[victim.number].state == TrialState.FAIL and again
        try:   # at once: the job's end, not a heartbeat grace (120 s), hands the row back
            (again,) = until(handed_back, 90, every=0.2)
        except AssertionError:
            raise AssertionError("the cancelled job's row was not handed back and re-queued: " + " | ".join(lines)) from None
        record_property("cancel_to_requeued_s", round(time.monotonic() - cancelled, 1))
        assert again.state == TrialState.WAITING   # for the job still running, held in its own row meanwhile
        assert trials()[survivor.number].state == TrialState.RUNNING
    finally:
        flag.unlink()   # the rows go on (and a failed test's coordinator can end)
    thread.join(timeout=600)
    record_property("study_s", round(time.monotonic() - started, 1))
    record_property("coordinator_lines", " | ".join(lines))
    assert not thread.is_alive(), "\n".join(lines)
    assert "error" not in outcome, outcome.get("error")
    assert outcome["code"] == 0, "\n".join(lines)
    assert lines[0].startswith("ladder check") and any(l.startswith("slurm: submitted 2 worker job(s)") for l in lines)
    assert any(f"slurm job {job_id} ended CANCELLED" in l for l in lines), "\n".join(lines)

    by_row = {}
    for t in trials():
        by_row.setdefault(t.user_attrs["row"], []).append(t)
    assert sorted(by_row) == ["r0-s0", "r0-s1", "r1-s0", "r1-s1"]
    for row, row_trials in by_row.items():   # each row complete exactly once
        assert [t.state for t in row_trials].count(TrialState.COMPLETE) == 1, row
    (cut,) = [t for ts in by_row.values() for t in ts if t.state == TrialState.FAIL]
    assert cut.number == victim.number and cut.user_attrs["worker"]["slurm_job"] == job_id
    assert cut.user_attrs.get("outcome") in (None, "interrupted")   # handed back by its worker or the coordinator
    assert [t.state for t in by_row[cut.user_attrs["row"]]] == [TrialState.FAIL, TrialState.COMPLETE]   # queued again once
    assert all(len(row_trials) == 1 for row, row_trials in by_row.items() if row != cut.user_attrs["row"])

    client = MlflowClient(tracking_uri(state))
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()],   # wherever the study logs
                              "tags.`grpolab.study` = 'slurm_ladder'")
    assert [r.info.run_name for r in runs if r.info.status == "RUNNING"] == []
    killed = client.get_run(cut.user_attrs["mlflow_run_id"])
    assert killed.info.status == "KILLED"
    reason = killed.data.tags["grpolab.error"]
    record_property("killed_reason", reason)
    if worker_hands_back:   # its worker's own, or the coordinator's when Slurm's SIGKILL came first (a slow worker)
        assert reason in (f"row handed back: its Slurm job {job_id} is CANCELLED",
                          f"RunKilled: received signal 15 in Slurm job {job_id} (the job was cancelled, "
                          "preempted or reached its time limit)"), reason
    else:                   # from the job's state (hand_back.reap_job_trials): no worker record could be checked
        assert reason == f"row handed back: its Slurm job {job_id} is CANCELLED", reason
        assert cut.user_attrs.get("outcome") is None
    finished = [r for r in runs if r.info.status == "FINISHED" and "optuna.trial_number" in r.data.tags]
    assert len(finished) == 4
    jobs = {(t.user_attrs.get("worker") or {}).get("slurm_job") for ts in by_row.values() for t in ts}
    assert job_id in jobs and len(jobs - {None}) >= 2   # the rows ran in the Slurm jobs
