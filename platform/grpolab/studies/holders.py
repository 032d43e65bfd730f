"""Who holds a study trial, and whether that holder is gone or hung.

Detail: docs/clusters-and-gpus.md, "grpolab.studies.holders".
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

WORKER_ATTR, HEARTBEAT_ATTR, PROGRESS_ATTR = "worker", "heartbeat", "progress"
SLURM_JOB_KEY = "slurm_job"       # in a trial's worker record: the Slurm job its worker runs in


def heartbeat_interval() -> float:
    return float(os.environ.get("GRPOLAB_HEARTBEAT_INTERVAL", "10"))


def heartbeat_grace() -> float:
    return float(os.environ.get("GRPOLAB_HEARTBEAT_GRACE", "120"))


def host_identity() -> str:
    """hostname/boot id/pid namespace: a rebooted host is another host (its old pids mean
    nothing), and so is a container with its own pid namespace (its pids are not ours to check)."""
    boot = Path("/proc/sys/kernel/random/boot_id")
    suffix = boot.read_text().strip()[:8] if boot.exists() else "noboot"
    try:
        namespace = os.readlink("/proc/self/ns/pid").split("[")[-1].rstrip("]")
    except OSError:
        namespace = "nons"
    return f"{socket.gethostname()}/{suffix}/{namespace}"


def _proc_stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()   # fields from 'state' on (field 3)


def process_start(pid: int) -> str | None:
    fields = _proc_stat(pid)
    return fields[19] if fields else None           # field 22: start time in clock ticks since boot


def process_alive(pid: int, start: str | None) -> bool:
    if not Path("/proc/self/stat").exists():         # no procfs: signal 0 says whether the pid exists
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    fields = _proc_stat(pid)
    if fields is None or fields[0] in ("Z", "X"):    # gone, or dead but not yet waited for
        return False
    return start is None or fields[19] == start


def worker_record() -> dict:
    """Who holds a trial; a Slurm job's worker also names its job, so that the coordinator hands
    its row back as soon as Slurm ends the job (slurm.py), without waiting for the heartbeat grace."""
    pid = os.getpid()
    job = {SLURM_JOB_KEY: os.environ["SLURM_JOB_ID"]} if os.environ.get("SLURM_JOB_ID") else {}
    return {"host": host_identity(), "pid": pid, "pid_start": process_start(pid), **job}


def stalled_reason(trial, now: float, row_timeout: float | None) -> str | None:
    """Why a RUNNING trial whose holder may be alive is hung: no progress for ``row_timeout`` s
    (progress and start times are wall clock: hosts need clocks in sync, as for the grace)."""
    if not row_timeout:
        return None
    last = trial.user_attrs.get(PROGRESS_ATTR)
    if last is None and trial.datetime_start is not None:
        last = trial.datetime_start.timestamp()
    if last is None or now - last <= row_timeout:
        return None
    return f"no progress for {now - last:.0f} s (row_timeout_s {row_timeout:g})"


def holder_gone(trial, here: str, now: float, grace: float) -> str | None:
    """Why a trial's holder is gone, or None while it may still be working: the one rule that
    decides both whether a RUNNING row is handed back and whether an interrupted run may be
    continued by another worker. On this host, its process is gone (or a newer one has its pid);
    elsewhere, no heartbeat for ``grace`` s, counted from its start before the first heartbeat.
    No time to count from: it may still be working."""
    worker = trial.user_attrs.get(WORKER_ATTR)
    if worker and worker.get("host") == here:
        if process_alive(int(worker["pid"]), worker.get("pid_start")):
            return None
        return f"its worker process {worker['pid']} on this host is gone"
    last = trial.user_attrs.get(HEARTBEAT_ATTR)
    if last is None and trial.datetime_start is not None:
        last = trial.datetime_start.timestamp()
    if last is None or now - last <= grace:
        return None
    who = f"worker {worker['pid']} on {worker['host']}" if worker else "a worker that never reported"
    return f"no heartbeat from {who} for {now - last:.0f} s (grace {grace:.0f} s)"
