"""Study workers as Slurm jobs (``grpolab study FILE --launcher slurm``), submitted through submitit.

The coordinator validates the study, creates it and queues its rows as always, then submits
``--jobs N`` jobs; each runs ``grpolab study-worker`` (the same worker loop as local workers)
against the shared storage: PostgreSQL, or an Optuna journal file on a file system every node
mounts (opened with the O_EXCL lock Optuna documents for NFS, storage.py); SQLite is refused
before anything is submitted. MLflow must be reachable from
the jobs too: a state folder on a shared file system, or a tracking server (MLFLOW_TRACKING_URI,
which the jobs inherit with the rest of the environment).

Detail: docs/clusters-and-gpus.md, "grpolab.studies.slurm".
"""

from __future__ import annotations

import collections.abc
import contextlib
import importlib.util
import logging
import re
import shutil
import subprocess
import sys
import time
import typing
from dataclasses import dataclass, field
from pathlib import Path

from optuna.trial import TrialState

from grpolab.errors import ConfigError, did_you_mean
from grpolab.studies.coordinator import has_pending_rows
from grpolab.studies.study_config import StudyConfig
from grpolab.studies.hand_back import reap_job_trials
from grpolab.studies.processes import row_flags
from grpolab.studies.rows import row_states
from grpolab.validation import MISMATCH, as_kind, refusal

log = logging.getLogger(__name__)

SUBMITIT_VERSION = "1.5.4"
# a job in one of these may still run a worker (sacct's names; ``CANCELLED by 0`` is read as CANCELLED)
ACTIVE = {"RUNNING", "COMPLETING", "CONFIGURING", "STAGE_OUT", "SIGNALING"}
QUEUED = {"PENDING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESIZING", "SUSPENDED", "UNKNOWN", "READY"}
DEFAULT_TIME = "24:00:00"


# submitit parameters grpolab sets itself, and the option to use instead
OWNED_PARAMS = {"job_name": "the study's name", "time": "--time / launcher.slurm.time", "nodes": "one node per job",
                "ntasks_per_node": "one task per job", "gpus_per_node": "--gpus-per-row",
                "cpus_per_task": "--cpus-per-job / launcher.slurm.cpus_per_job", "partition": "--partition",
                "account": "--account", "qos": "--qos", "mem": "--mem", "constraint": "--constraint",
                "exclude": "--exclude", "setup": "--setup"}


def is_postgres(url: str | None) -> bool:
    return bool(url) and re.match(r"postgres(ql)?(\+\w+)?://", url) is not None


def check_params(params: dict) -> dict:
    """``--slurm-param`` / ``launcher.slurm.params``: submitit's SlurmExecutor parameters (``slurm_``
    prefixed, as AutoExecutor spells them, is accepted), not those grpolab sets, each of the type
    submitit's sbatch writer declares for it. Returns them with integers given for string
    parameters written as strings (``--slurm-param comment=10``)."""
    import inspect
    from submitit.slurm.slurm import SlurmExecutor, _make_sbatch_string
    valid = sorted(SlurmExecutor._valid_parameters() - set(OWNED_PARAMS))
    declared = inspect.signature(_make_sbatch_string).parameters
    checked = {}
    for name, value in params.items():
        key = name[len("slurm_"):] if name.startswith("slurm_") else name
        if key in OWNED_PARAMS:
            raise ConfigError(f"--slurm-param {name}: set by grpolab; use {OWNED_PARAMS[key]}")
        if key not in valid:
            raise ConfigError(f"--slurm-param {name}: not a submitit Slurm parameter{did_you_mean(key, valid)}; "
                              f"valid: {', '.join(valid)} (any sbatch option: additional_parameters)")
        checked[name] = _typed(name, value, declared[key].annotation) if key in declared else value
    return checked


_TYPE_NAMES = {str: "a string", int: "an integer", bool: "true or false", list: "a list of strings",
               dict: "a mapping of sbatch options (additional_parameters.KEY=VALUE)"}


def _typed(name: str, value, annotation):
    """``value`` as the declared type allows, or a ConfigError naming what is expected."""
    options = [o for o in (typing.get_args(annotation) if typing.get_origin(annotation) is typing.Union
                           else (annotation,)) if o is not type(None)]
    kinds = [typing.get_origin(o) or o for o in options]
    kinds = [list if k is collections.abc.Iterable else k for k in kinds]
    if str in kinds and int not in kinds and as_kind(value, int) is not MISMATCH:
        value = str(value)   # sbatch lines are text: an integer given for a string parameter is that text
    for kind in (k for k in (bool, int, str, list, dict) if k in kinds):
        got = as_kind(value, kind)
        if got is not MISMATCH and (kind is not dict or all(isinstance(key, str) for key in got)):
            return got
    if not any(k in _TYPE_NAMES for k in kinds):
        return value
    raise refusal(f"--slurm-param {name}", " or ".join(_TYPE_NAMES[k] for k in kinds if k in _TYPE_NAMES), value)


def parse_time(text: str) -> int:
    """Slurm's time formats -> whole minutes: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS."""
    match = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", str(text).strip())
    if not match:
        raise ConfigError(f"--time: {text!r} is not a Slurm time (MM, HH:MM:SS or D-HH:MM:SS)")
    days, a, b, c = match.groups()
    if days is not None:   # D-HH[:MM[:SS]]
        seconds = int(days) * 86400 + int(a) * 3600 + int(b or 0) * 60 + int(c or 0)
    elif c is not None:    # HH:MM:SS
        seconds = int(a) * 3600 + int(b) * 60 + int(c)
    elif b is not None:    # MM:SS
        seconds = int(a) * 60 + int(b)
    else:                  # MM
        seconds = int(a) * 60
    if seconds <= 0:
        raise ConfigError(f"--time: {text!r} is no time at all")
    return max(1, -(-seconds // 60))


def job_state(raw: str) -> str:
    return (raw or "UNKNOWN").split()[0].upper()


def parse_sacct(text: str) -> dict[str, str]:
    """``sacct --parsable2`` output (a ``JobID|State|...`` header, then a line per job and per job
    step) -> {job id: state}; the steps (``123.batch``, ``123.0``) are left out."""
    lines = text.splitlines()
    if len(lines) < 2:
        return {}
    names, states = lines[0].split("|"), {}
    for line in lines[1:]:
        row = dict(zip(names, line.split("|")))
        job_id = row.get("JobID", "").strip()
        if job_id and "." not in job_id:
            states[job_id] = row.get("State", "").strip()
    return states


def worker_command(cfg: StudyConfig, storage_url: str, state: Path, procs_per_row: int,
                   accelerate_config: str | None = None) -> list[str]:
    return [sys.executable, "-m", "grpolab.cli", "--state", str(Path(state).resolve()), "study-worker",
            str(Path(cfg.path).resolve()), "--storage", storage_url] + row_flags(procs_per_row, accelerate_config)


def run_worker(cmd: list[str]) -> int:
    """What a job runs: the study worker as a child process, its output in the job's log. Slurm
    signals every process of the job, so the worker gets SIGTERM (or SIGUSR2) itself and hands
    its row back; if submitit's own handler raises here meanwhile, the worker is given time to
    finish that, not killed (``subprocess.run`` would kill it)."""
    proc = subprocess.Popen(cmd)
    try:
        code = proc.wait()
    except BaseException:
        with contextlib.suppress(BaseException):
            proc.wait(timeout=60)
        raise
    if code:
        raise RuntimeError(f"the study worker exited with code {code}")
    return code


@dataclass
class SlurmLauncher:
    jobs: int | None = None                         # None: the study file's launcher.slurm.jobs, else 1
    partition: str | None = None
    gpus_per_row: int | None = None
    time: str | None = None
    folder: str | None = None
    cpus_per_job: int | None = None
    account: str | None = None
    qos: str | None = None
    mem: str | None = None
    constraint: str | None = None
    exclude: str | None = None
    setup: tuple[str, ...] = ()                     # shell lines before the worker starts (module load, conda activate)
    params: dict = field(default_factory=dict)      # any other submitit Slurm parameter
    accelerate_config: str | None = None            # the rows' accelerate config (set by the coordinator, checked)
    poll_s: float = 2.0
    submitted: list = field(default_factory=list)   # every job submitted (submitit Job objects)
    cancelled: set = field(default_factory=set)     # jobs this launcher cancelled itself (not reported)
    last_seen: dict = field(default_factory=dict)   # job id -> its state at the last sacct answer

    @property
    def timeout_min(self) -> int:
        return parse_time(self.time or DEFAULT_TIME)

    def take_file_options(self, options: dict) -> None:
        """The study file's ``launcher.slurm``, for every option the command line left unset
        (``params``: the command line's win key by key)."""
        for key, value in options.items():
            if key == "params":
                self.params = {**value, **self.params}
            elif key == "setup":
                self.setup = self.setup or tuple(value)
            elif getattr(self, key) is None:
                setattr(self, key, value)
        self.jobs = 1 if self.jobs is None else self.jobs

    def check(self, cfg: StudyConfig, storage_url: str | None, workers: int | None = None,
              devices: str | None = None) -> None:
        """Every refusal, before anything is written or submitted."""
        self.take_file_options(cfg.launcher.slurm)
        if storage_url is not None and not (is_postgres(storage_url) or storage_url.startswith("journal:")):
            raise ConfigError("--launcher slurm: the jobs need a storage they all reach: PostgreSQL "
                              "(--storage postgresql://user@host/db) or a journal file on a shared file system "
                              f"(--storage journal:/shared/path/optuna.journal), not {storage_url}: "
                              "SQLite is not safe across machines")
        for name, value in (("--jobs", self.jobs), ("--gpus-per-row", self.gpus_per_row),
                            ("--cpus-per-job", self.cpus_per_job)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigError(f"{name}: must be an integer >= 1, got {value!r}")
        if workers is not None:
            raise ConfigError("--workers: not with --launcher slurm (--jobs N sets how many worker jobs run)")
        if devices is not None:
            raise ConfigError("--devices: not with --launcher slurm (Slurm gives each job its --gpus-per-row GPUs)")
        parse_time(self.time or DEFAULT_TIME)
        if importlib.util.find_spec("submitit") is None:
            raise ConfigError(f"--launcher slurm needs submitit: pip install submitit=={SUBMITIT_VERSION} "
                              "(scripts/install_slurm.sh installs it with Slurm's client tools)")
        self.params = check_params(self.params)
        if not shutil.which("sbatch"):
            raise ConfigError("--launcher slurm: sbatch is not on PATH; run the coordinator where jobs can be "
                              "submitted (a Slurm login node)")

    def _executor(self, cfg: StudyConfig, state: Path):
        import submitit
        folder = Path(self.folder) if self.folder else Path(state).resolve() / "slurm" / "%j"
        executor = submitit.AutoExecutor(folder=folder, cluster="slurm")
        params = {"timeout_min": self.timeout_min, "name": f"grpolab-{cfg.name}", "nodes": 1, "tasks_per_node": 1}
        if self.partition:
            params["slurm_partition"] = self.partition
        if self.gpus_per_row:
            params["gpus_per_node"] = self.gpus_per_row
        if self.cpus_per_job:
            params["cpus_per_task"] = self.cpus_per_job
        for name in ("account", "qos", "mem", "constraint", "exclude"):
            if getattr(self, name):
                params[f"slurm_{name}"] = getattr(self, name)
        if self.setup:
            params["slurm_setup"] = list(self.setup)
        for name, value in self.params.items():
            params[name if name.startswith("slurm_") else f"slurm_{name}"] = value
        executor.update_parameters(**params)
        return executor

    def submit(self, executor, cmd: list[str], count: int) -> list:
        jobs = [executor.submit(run_worker, cmd) for _ in range(count)]
        self.submitted.extend(jobs)
        return jobs

    def states(self) -> dict[str, str]:
        """Each submitted job's state, from one sacct call for the jobs not yet ended; a job's end
        state is kept once seen. Read here rather than through submitit's watcher, which is one per
        process and stops asking about any job it takes for ended: states in which a job still runs
        or waits (CONFIGURING, SUSPENDED, REQUEUE_HOLD, ...) and an id an earlier cluster used."""
        open_ids = [j.job_id for j in self.submitted if not _ended(self.last_seen.get(j.job_id, "UNKNOWN"))]
        if open_ids:
            try:
                answer = subprocess.run(["sacct", "-o", "JobID,State,NodeList", "--parsable2", "-j", ",".join(open_ids)],
                                        capture_output=True, text=True, check=True, timeout=120).stdout
            except (OSError, subprocess.SubprocessError) as exc:   # a slow or restarting controller: ask again next poll
                log.warning("sacct did not answer (the job states shown are the last ones read): %s", exc)
            else:
                read = parse_sacct(answer)
                self.last_seen.update({job_id: job_state(read.get(job_id, "")) for job_id in open_ids})
        return {j.job_id: self.last_seen.get(j.job_id, "UNKNOWN") for j in self.submitted}

    def cancel(self, job_ids) -> None:
        ids = [str(j) for j in job_ids]
        self.cancelled.update(ids)
        if ids:
            subprocess.run(["scancel", *ids], check=False, capture_output=True)

    def run(self, study, cfg: StudyConfig, storage_url: str, state: Path, tick, echo, requeue) -> list[str]:
        """Submit the jobs, watch them and the rows until every job has ended; a job that did not
        complete is echoed as it ends (and its line returned). ``tick`` is the coordinator's check
        (progress, reaping; it raises a pending signal); ``requeue`` queues handed-back rows again
        under the setup lock."""
        executor, cmd = self._executor(cfg, state), worker_command(cfg, storage_url, state, self.gpus_per_row or 1,
                                                                 self.accelerate_config)
        jobs = self.submit(executor, cmd, self.jobs)
        echo(f"slurm: submitted {len(jobs)} worker job(s) {', '.join(j.job_id for j in jobs)} "
             f"(logs: {Path(str(jobs[0].paths.folder)).parent})")
        spare, seen, lines, shown = self.jobs, {}, [], None
        try:
            while True:
                tick()
                states = self.states()
                changed = {j: s for j, s in states.items() if seen.get(j) != s}
                seen.update(states)
                handed_back = False
                for job_id, s in changed.items():
                    if s not in ACTIVE | {"UNKNOWN"}:   # its worker is gone (or never started): rows handed back
                        for reason in reap_job_trials(study, state, job_id, s).values():
                            echo(reason)
                    if s not in ACTIVE | QUEUED:
                        handed_back = True
                        if s != "COMPLETED" and job_id not in self.cancelled:
                            job = next(j for j in self.submitted if j.job_id == job_id)
                            lines.append(f"slurm job {job_id} ended {s} (log: {job.paths.stderr})")
                            echo(lines[-1])
                if handed_back or _interrupted_rows(study, cfg):   # queued again once the trial is FAIL
                    requeue()
                live = [j for j, s in states.items() if s in ACTIVE | QUEUED]
                summary = ", ".join(f"{n} {s.lower()}" for s, n in sorted(_count(states).items()))
                if summary != shown:
                    shown = summary
                    echo(f"slurm: jobs {summary}")
                pending = has_pending_rows(study, cfg)
                if not live:
                    if pending and spare > 0:   # every job ended with rows still waiting: replace them
                        count = min(spare, self.jobs)
                        spare -= count
                        extra = self.submit(executor, cmd, count)
                        echo(f"slurm: rows still waiting and no job left: submitted {count} more "
                             f"({', '.join(j.job_id for j in extra)})")
                        continue
                    break
                if not pending and not study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
                    self.cancel(j for j, s in states.items() if s in QUEUED)   # nothing left for them to run
                time.sleep(self.poll_s)
        except BaseException:
            # Ctrl-C, SIGTERM or an error in the coordinator: no job is left running without it;
            # each worker gets SIGTERM from Slurm and hands its row back
            self.cancel(j.job_id for j in self.submitted if seen.get(j.job_id) in ACTIVE | QUEUED | {None})
            raise
        return lines


def _ended(state: str) -> bool:
    """A state no job leaves (its end state, never asked about again); a preempted job may be requeued."""
    return state not in ACTIVE | QUEUED | {"PREEMPTED"}


def _interrupted_rows(study, cfg: StudyConfig) -> bool:
    return cfg.study_kind.queued_rows and "INTERRUPTED" in row_states(study, cfg).values()


def _count(states: dict[str, str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in states.values():
        out[s] = out.get(s, 0) + 1
    return out
