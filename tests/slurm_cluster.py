"""A real single-node Slurm cluster (Debian's slurm-wlm + munge) on loopback, for tests that
submit jobs through submitit. Each cluster has its own munged, ports, state and spool, so two can
run at once (pytest -n 2) or one after another in a session. Install with scripts/install_slurm.sh."""

import contextlib
import importlib.util
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

BINARIES = ("munged", "mungekey", "slurmctld", "slurmd", "sinfo", "sbatch", "squeue", "scancel")
KILL_WAIT_S = 2   # SIGTERM -> SIGKILL grace when a job is cancelled; small so cancel tests are quick
# FirstJobId and the ports come from the OS, not the random module, which a training run's set_seed
# earlier in the same process seeds: two clusters in one process get different job ids, since
# submitit's watcher (one per process, used directly by the smoke tests) keeps finished states by id
_RANDOM = random.SystemRandom()
STARTUP_S = 120   # for the node to come up: ~1.5 s on an idle machine, far more on a loaded 2-core one

# submitit reads job states only from `sacct`, which needs slurmdbd (and a MySQL) to answer.
# Without one, this stand-in answers submitit's query from the controller's memory (squeue -t all
# keeps finished jobs for MinJobAge) in sacct's --parsable2 layout.
SACCT_SHIM = """#!/bin/sh
ids=""
while [ $# -gt 0 ]; do
  case "$1" in -j|--jobs) ids="$ids,$2"; shift;; esac
  shift
done
echo "JobID|State|NodeList"
exec squeue -h -t all -j "${ids#,}" -o "%i|%T|%N"
"""


@dataclass
class SlurmCluster:
    conf: Path
    env: dict            # os.environ plus SLURM_CONF and the sacct stand-in on PATH
    logs: Path
    startup_s: float
    name: str = ""       # the ClusterName, unique to this cluster: its processes are found by it
    procs: dict = field(default_factory=dict)

    def run(self, *cmd: str, check: bool = True) -> str:
        return subprocess.run(cmd, env=self.env, check=check, capture_output=True, text=True).stdout


def _missing() -> list:
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    return [b for b in BINARIES if not shutil.which(b, path=path)] + (
        ["submitit"] if importlib.util.find_spec("submitit") is None else [])


def why_unavailable() -> str | None:
    """Why no test cluster can run on this machine (its tests skip, saying so), or None. Slurm or
    submitit merely not installed yet is no reason where they can be (root with apt-get, as
    `make install-test` does): the tests fail then, naming the install step."""
    if not Path("/proc/self/environ").exists():
        return "the Slurm test cluster needs Linux (/proc)"
    if os.geteuid() != 0:
        return ("the Slurm test cluster needs root: slurmd starts each job as its owner, and "
                "scripts/install_slurm.sh installs Slurm and munge with apt-get")
    if _missing() and not shutil.which("apt-get"):
        return (f"Slurm is not installed ({', '.join(_missing())} missing) and cannot be here: "
                "scripts/install_slurm.sh installs Debian's slurm-wlm and munge with apt-get, which this machine lacks")
    return None


def _free_ports(count: int) -> list:
    """``count`` distinct free loopback ports below Linux's ephemeral range (32768+), so no
    outgoing connection can take one before its daemon binds it (the daemons retry a taken port
    for ~40 s before giving up)."""
    ports: list = []
    while len(ports) < count:
        port = _RANDOM.randrange(10000, 32768)
        with socket.socket() as s, contextlib.suppress(OSError):
            s.bind(("127.0.0.1", port))
            if port not in ports:
                ports.append(port)
    return ports


def _slurm_conf(name: str, state: Path, run: Path, logs: Path, munge_socket: Path) -> str:
    mem_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
    host = socket.gethostname().split(".")[0]
    ctld_port, slurmd_port = _free_ports(2)
    return f"""ClusterName={name}
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket}
StateSaveLocation={state}
SlurmdSpoolDir={run}/spool
SlurmctldPidFile={run}/slurmctld.pid
SlurmdPidFile={run}/slurmd.pid
SlurmctldLogFile={logs}/slurmctld.log
SlurmdLogFile={logs}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
SchedulerParameters=batch_sched_delay=0
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
ReturnToService=2
KillWait={KILL_WAIT_S}
MinJobAge=600
FirstJobId={_RANDOM.randrange(10**5, 6 * 10**7)}
NodeName=localhost NodeAddr=127.0.0.1 CPUs={os.cpu_count()} RealMemory={mem_mb * 9 // 10} State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
"""
# NoCtldInAddrAny,NoInAddrAny: the daemons listen on 127.0.0.1 (their addresses above), not on every interface.
# batch_sched_delay=0: start batch jobs on submit, not up to 3 s later (measured: 2-3 s -> 1-2 s).


def _start_munged(root: Path, run: Path, logs: Path) -> tuple:
    """munged on a private key and socket, so it neither needs nor disturbs a system munged."""
    key, sock = root / "munge" / "munge.key", run / "munge.socket"
    key.parent.mkdir(mode=0o700)
    subprocess.run(["mungekey", "--create", "--keyfile", str(key)], check=True, capture_output=True)
    # --force: munged refuses a socket dir that is not world-searchable, and mkdtemp makes 0700.
    proc = subprocess.Popen(
        ["munged", "--foreground", "--force", f"--socket={sock}", f"--key-file={key}",
         f"--pid-file={run}/munged.pid", f"--seed-file={root}/munge/seed", f"--log-file={logs}/munged.log"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    _wait(sock.exists, 10, "munged socket", (logs / "munged.log",))
    return proc, sock


def _wait(ready, timeout: float, what: str, logs: tuple = (), every: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            tail = "".join(f"--- {log}\n{log.read_text()[-1500:]}" for log in logs if log.exists())
            raise RuntimeError(f"Slurm test cluster: {what} not ready after {timeout}s\n{tail}")
        time.sleep(every)


def _node_idle(env: dict) -> bool:
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], env=env, capture_output=True, text=True, check=False)
    return out.returncode == 0 and out.stdout.strip() == "idle"


MARK = "GRPOLAB_SLURM_TEST_CLUSTER"   # in the daemons' environment only (slurmstepd inherits it)


def _strays(name: str) -> list:
    """Processes of this cluster and only them: its daemons and slurmstepds (started with
    MARK=<cluster name> in their environment, which no other process is given) and its jobs'
    processes (Slurm sets SLURM_CLUSTER_NAME=<cluster name> in every job; the name is unique to
    this cluster). Not SLURM_CONF: the tests put that into the test process's own environment
    (submitit runs sbatch with it), so a server the test process starts meanwhile (a session's
    PostgreSQL) carries it too, and must survive this cluster's teardown."""
    marks, pids = {f"{MARK}={name}".encode(), f"SLURM_CLUSTER_NAME={name}".encode()}, []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with contextlib.suppress(OSError):
                if marks.intersection((entry / "environ").read_bytes().split(b"\0")):
                    pids.append(int(entry.name))
    return pids


def _stop(cluster: SlurmCluster) -> None:
    """Cancel what is left and wait for it (slurmstepd outlives slurmd), then stop the daemons."""
    if cluster.startup_s:   # it came up, so jobs may be running
        cluster.run("scancel", "--partition=debug", check=False)
        with contextlib.suppress(RuntimeError):
            _wait(lambda: not cluster.run("squeue", "-h", "-t", "PD,R,CG,S", check=False).strip(),
                  KILL_WAIT_S + 15, "job teardown")
    for proc in reversed(list(cluster.procs.values())):   # slurmd, slurmctld, then munged
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    if not cluster.name:   # it never got a name (munged failed): no daemon or job of its own to find
        return
    with contextlib.suppress(RuntimeError):
        _wait(lambda: not _strays(cluster.name), 5, "slurmstepd exit")
    for pid in _strays(cluster.name):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _start_daemons(cluster: SlurmCluster) -> None:
    """slurmctld and slurmd in the foreground (-D), as our children; ready once the node is idle."""
    env = {**cluster.env, MARK: cluster.name}   # teardown finds the daemons' slurmstepds by it (_strays)
    for daemon, extra in (("slurmctld", []), ("slurmd", ["-N", "localhost"])):
        with open(cluster.logs / f"{daemon}.out", "w") as out:
            cluster.procs[daemon] = subprocess.Popen(
                [daemon, "-D", "-f", str(cluster.conf), *extra], env=env,
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    logs = (cluster.logs / "slurmctld.log", cluster.logs / "slurmd.log")
    _wait(lambda: _node_idle(cluster.env), STARTUP_S, "node idle in sinfo", logs, every=0.2)


@contextlib.contextmanager
def slurm_cluster(tmp_path: Path):
    """Start munged, slurmctld and slurmd; yield a SlurmCluster once the node is idle; stop all."""
    if why_unavailable():
        raise RuntimeError(f"Slurm test cluster: {why_unavailable()}")
    if _missing():
        raise RuntimeError(f"Slurm test cluster needs {_missing()}: run `make install-test` "
                           "(scripts/install_slurm.sh installs Debian's slurm-wlm and munge, and submitit)")
    start = time.monotonic()
    # Unix socket paths are capped at 108 bytes: sockets and spool live in a short /tmp dir.
    run = Path(tempfile.mkdtemp(prefix="slurm-", dir="/tmp"))
    root = tmp_path / "slurm"
    for d in (root / "logs", root / "state", run / "spool", run / "bin"):
        d.mkdir(parents=True)
    (run / "bin" / "sacct").write_text(SACCT_SHIM)
    (run / "bin" / "sacct").chmod(0o755)
    cluster = SlurmCluster(root / "slurm.conf", {}, root / "logs", 0.0)
    try:
        cluster.procs["munged"], sock = _start_munged(root, run, cluster.logs)
        # unique: slurmctld checks it against its state, and teardown finds this cluster's processes by it
        cluster.name = name = "t" + run.name.removeprefix("slurm-").lower()
        cluster.conf.write_text(_slurm_conf(name, root / "state", run, cluster.logs, sock))
        cluster.env = {**os.environ, "SLURM_CONF": str(cluster.conf),
                       "PATH": f"{run / 'bin'}:{os.environ.get('PATH', '')}:/usr/sbin"}
        _start_daemons(cluster)
        cluster.startup_s = time.monotonic() - start
        yield cluster
    finally:
        _stop(cluster)
        shutil.rmtree(run, ignore_errors=True)


def until(ready, timeout: float, every: float = 0.1):
    """``ready()``'s first truthy value, polled every ``every`` s; fails after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not (value := ready()):
        assert time.monotonic() < deadline, f"not reached in {timeout}s"
        time.sleep(every)
    return value


@contextlib.contextmanager
def cluster_for_test(tmp_path: Path, monkeypatch, record_property):
    """The cluster as a test uses it: skipped (with the reason) where Slurm cannot run, its start-up
    time recorded, and submitit's sbatch/sacct/scancel pointed at it (it runs them with os.environ)."""
    import pytest
    if why_unavailable():
        pytest.skip(why_unavailable())
    with slurm_cluster(tmp_path) as c:
        record_property("cluster_startup_s", round(c.startup_s, 2))
        for name in ("SLURM_CONF", "PATH"):
            monkeypatch.setenv(name, c.env[name])
        yield c
