"""Smoke tests of the loopback Slurm cluster (tests/slurm_cluster.py) driven through submitit: jobs
run and return, and a cancelled job gets SIGTERM before SIGKILL and is reported CANCELLED."""

import os
import signal
import time
from pathlib import Path

import pytest

from slurm_cluster import KILL_WAIT_S, cluster_for_test, until


@pytest.fixture
def cluster(tmp_path, monkeypatch, record_property):
    with cluster_for_test(tmp_path, monkeypatch, record_property) as c:
        # the jobs import this module by name, and it imports slurm_cluster from tests/
        here = Path(__file__).resolve().parent
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(here), str(here.parent), os.environ.get("PYTHONPATH", "")]))
        yield c


def _executor(folder: Path):
    import submitit  # scripts/install_slurm.sh installs it, with Slurm itself
    executor = submitit.AutoExecutor(folder=folder, cluster="slurm")
    executor.update_parameters(timeout_min=5, slurm_partition="debug", cpus_per_task=1)
    return executor


def _identity() -> tuple:
    return os.getpid(), os.environ["SLURM_JOB_ID"], time.time()


def _hold_until_killed(marker: str) -> None:
    """Write the SIGTERM time to ``marker`` and keep running, so only SIGKILL ends the job."""
    signal.signal(signal.SIGTERM, lambda *_: Path(marker).write_text(str(time.time())))
    Path(marker + ".started").write_text(str(os.getpid()))
    while True:
        time.sleep(0.05)


def test_submitit_runs_two_jobs(cluster, tmp_path, record_property):
    submitted = time.time()
    jobs = [_executor(tmp_path / "jobs").submit(_identity) for _ in range(2)]
    results = [job.result() for job in jobs]
    assert sorted(r[1] for r in results) == sorted(job.job_id for job in jobs)
    assert len({r[0] for r in results}) == 2
    record_property("submit_to_start_s", round(max(r[2] for r in results) - submitted, 2))
    record_property("submit_to_results_s", round(time.time() - submitted, 2))


def test_scancel_mid_run_sends_sigterm_then_reports_cancelled(cluster, tmp_path, record_property):
    marker = tmp_path / "sigterm"
    job = _executor(tmp_path / "jobs").submit(_hold_until_killed, str(marker))
    started = Path(f"{marker}.started")
    pid = int(until(lambda: started.exists() and started.read_text(), 180))   # python starting on a loaded machine
    cancelled = time.time()
    job.cancel()   # scancel <id>
    state = until(lambda: (s := job.watcher.get_state(job.job_id, mode="force")) == "CANCELLED" and s, 30)
    record_property("cancel_to_cancelled_s", round(time.time() - cancelled, 2))
    assert state == job.state == "CANCELLED" and job.done()
    job._results_timeout_s = 0   # else result() waits 15 s for a result file a cancelled job never writes
    from submitit.core.utils import UncompletedJobError
    with pytest.raises(UncompletedJobError, match="CANCELLED"):
        job.result()
    termed = float(until(lambda: marker.exists() and marker.read_text(), 5))
    assert cancelled <= termed < cancelled + KILL_WAIT_S
    with pytest.raises(ProcessLookupError):   # it ignored SIGTERM, so SIGKILL ended it
        os.kill(pid, 0)
