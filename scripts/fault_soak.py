#!/usr/bin/env python3
"""Long fault soak, outside `make test`: a toy ladder (2 rungs x 12 seeds = 24 rows, tiny preset, no
warm start, 6 steps, a checkpoint every 2) run undisturbed by `grpolab study FILE --workers 2`,
then again in a fresh state folder with fresh stores under a seeded schedule of faults.

    python3 scripts/fault_soak.py --store journal|postgresql [--seed N] [--kills K] [--keep]

Stores: ``journal``: the study in the state folder's Optuna journal, tracking through a loopback
``mlflow server`` (SQLite backend), the server restarted once; ``postgresql``: the study in a
loopback PostgreSQL of its own (initdb as ``postgres`` when root), restarted once, tracking in
the state folder.

Faults, in a drawn order, one in each equal stretch of the study: K kill -9 of a worker holding a
row, one SIGTERM of the coordinator (its command started again at once), one store restart. Each
fires a drawn delay after a drawn number of rows is complete: the schedule follows the study, not
the machine's speed, and ``--seed`` repeats it. A command left with rows (its workers killed) is
started again.

Checks (exit 1 when one fails): every row COMPLETE exactly once, no trial waiting or running, no
failed row with an error, no MLflow run left RUNNING, no traceback in the commands' output; and
against the undisturbed run: the `grpolab table` CSV, each row's trial value and each row's last
value of every metric identical, but for wall-clock measures, which two runs never share (the
table's CPU-hours column; step_time, time/*, system/*). Rows compare exactly: a row's numbers
depend on its seed alone, and a resumed row restores the trainer's whole state (docs/notes.md).
The last line printed is the run's figures as JSON.
"""

from __future__ import annotations

import argparse
import csv
import glob
import io
import json
import os
import random
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

import optuna
import yaml
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "platform"))   # this checkout, whatever an editable install points at
from grpolab.studies.holders import WORKER_ATTR  # noqa: E402
from grpolab.studies.storage import default_storage, open_storage  # noqa: E402
from grpolab.trainer.metrics import MEASURED_TIME  # noqa: E402

NAME, EXPERIMENT, STEPS, SAVE_EVERY = "fault_soak", "fault_soak", 6, 2
ENV = {**{k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"},
       "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "platform"), os.environ.get("PYTHONPATH")])),
       "MLFLOW_DISABLE_TELEMETRY": "true", "TOKENIZERS_PARALLELISM": "false", "PYTHONFAULTHANDLER": "1"}
optuna.logging.set_verbosity(optuna.logging.ERROR)


def study_data(seeds: int) -> dict:
    """The soak's ladder. ``random_reward`` (a coin keyed by prompt and completion) gives every group
    reward variance, so rows train and differ by seed; the metric is the trailing policy entropy,
    which moves with every weight update (a held-out pass@1 of a random-init model is 0 everywhere)."""
    base = {"method": {"base": "grpo", "kl_coef": 0.0}, "task": {"name": "random_reward"},
            "model": {"preset": "tiny"}, "warm_start": {"enabled": False},
            "train": {"group_size": 4, "prompts_per_rollout": 2, "learning_rate": 0.003,
                      "save_every": SAVE_EVERY, "keep_checkpoints": 2},
            "eval": {"prompts": 4, "k": 2, "every": 0}, "tracking": {"experiment": EXPERIMENT, "flush_every": 1}}
    return {"kind": "ladder", "name": NAME, "metric": "tail:entropy", "base": base,
            "budget": {"train.steps": STEPS}, "seeds": list(range(seeds)),
            "rungs": [{"name": "base"}, {"name": "lr 0.01", "changes": {"train.learning_rate": 0.01}}]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Postgres:
    """A PostgreSQL server on 127.0.0.1 in its own temporary folder (trust auth, user grpolab)."""

    def __init__(self):
        bins = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
        if not bins:
            sys.exit("error: PostgreSQL is not installed (`make install-test` installs it)")
        self.bin, self.root = Path(bins[-1]), Path(tempfile.mkdtemp(prefix="grpolab-soak-pg-"))
        self.as_pg = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        (self.root / "sock").mkdir()
        for path in (self.root, self.root / "sock") if self.as_pg else ():   # root's 0700 folder: closed to postgres
            shutil.chown(path, "postgres")
        subprocess.run(self.as_pg + [str(self.bin / "initdb"), "-D", str(self.root / "data"), "-U", "grpolab",
                                     "--auth=trust"], check=True, capture_output=True)
        self.port = free_port()
        self._ctl("start", "-o", f"-p {self.port} -k {self.root / 'sock'} -c listen_addresses=127.0.0.1")
        self.url = f"postgresql+psycopg2://grpolab@127.0.0.1:{self.port}/postgres"   # a server of its own: one database

    def _ctl(self, *args: str) -> None:
        subprocess.run(self.as_pg + [str(self.bin / "pg_ctl"), "-D", str(self.root / "data"), "-l",
                                     str(self.root / "log"), "-w", *args], check=True, capture_output=True)

    def restart(self) -> None:
        self._ctl("restart", "-m", "fast")   # fast: open connections are cut, as in a real restart

    def stop(self) -> None:
        self._ctl("stop", "-m", "fast")
        shutil.rmtree(self.root, ignore_errors=True)


class MlflowServer:
    """`mlflow server` on 127.0.0.1 (SQLite backend and artifacts under ``root``); ``restart``
    stops it and starts it again on the same port and stores."""

    def __init__(self, root: Path):
        self.root, self.port, self.proc = root, free_port(), None
        self.url = f"http://127.0.0.1:{self.port}"
        root.mkdir(parents=True, exist_ok=True)
        self._start()

    def _start(self) -> None:
        cmd = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(self.port),
               "--workers", "1", "--backend-store-uri", f"sqlite:///{self.root / 'server.db'}",
               "--artifacts-destination", str(self.root / "artifacts")]
        with open(self.root / "server.log", "a") as log:
            # MLflow's job runner (huey consumers, for its GenAI jobs) is not used by grpolab: off
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=self.root,
                                         env={**ENV, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})
        deadline = time.time() + 180
        while time.time() < deadline and self.proc.poll() is None:
            try:
                if urllib.request.urlopen(f"{self.url}/health", timeout=2).status == 200:
                    return
            except OSError:
                time.sleep(0.5)
        self.stop()
        sys.exit(f"error: mlflow server did not come up: {(self.root / 'server.log').read_text()[-2000:]}")

    def restart(self) -> None:
        self.stop()
        self._start()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Stores:
    """A phase's stores: (storage URL, tracking URI, the server to restart, extra env)."""

    def __init__(self, kind: str, root: Path, state: Path):
        if kind == "postgresql":
            self.server = Postgres()
            self.storage, self.tracking, self.env = self.server.url, f"sqlite:///{state.resolve()}/mlflow.db", {}
        else:
            self.server = MlflowServer(root / "mlflow-server")
            self.storage, self.tracking = default_storage(state), self.server.url
            self.env = {"MLFLOW_TRACKING_URI": self.server.url}
        self.storage_args = ["--storage", self.storage] if kind == "postgresql" else []


class Schedule:
    """Fault events: each fires once ``at`` rows are complete, ``delay`` s after that was first seen,
    when a worker of the running command holds a row (so it lands mid-study, mid-row)."""

    def __init__(self, rng: random.Random, rows: int, kills: int):
        kinds = ["kill -9"] * kills + ["coordinator SIGTERM", "store restart"]
        rng.shuffle(kinds)
        span = (rows - 6) / len(kinds)   # one event drawn in each of equal stretches of rows 2 .. rows - 5
        slots = [2 + int(i * span) + rng.randrange(max(1, int(span))) for i in range(len(kinds))]
        self.events = [{"kind": k, "at": a, "delay": round(rng.uniform(0.0, 6.0), 1)} for k, a in zip(kinds, slots)]
        self.rng, self.fired, self.due_at = rng, [], None

    def due(self, complete: int) -> dict | None:
        if not self.events or complete < self.events[0]["at"]:
            return None
        if self.due_at is None:
            self.due_at = time.time() + self.events[0]["delay"]
        return self.events[0] if time.time() >= self.due_at else None

    def done(self, event: dict, **facts) -> None:
        self.events.pop(0)
        self.due_at = None
        self.fired.append({**event, **facts})
        print(f"[soak] {time.strftime('%H:%M:%S')} {event['kind']} at {event['at']} rows complete {facts}", flush=True)


class Watcher:
    """The study's trials while it runs; None while the store is unreadable (restarting) or the
    study not there yet: a run folder comes first, so the coordinator, never this reader, has
    created the storage's tables and the study."""

    def __init__(self, storage: str, state: Path):
        self.storage, self.state, self.study = storage, state, None

    def trials(self) -> list | None:
        if self.study is None and not any((self.state / "runs").glob("*")):
            return None
        try:
            if self.study is None:
                self.study = optuna.load_study(study_name=NAME, storage=open_storage(self.storage))
            return self.study.get_trials(deepcopy=False)
        except Exception:  # noqa: BLE001 - a store mid-restart: open it again at the next poll
            self.study = None
            return None


def children(pid: int) -> set[int]:
    """The processes whose parent is ``pid`` (a coordinator's workers)."""
    found = set()
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            if int(Path(stat).read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.add(int(stat.split("/")[2]))
        except OSError:   # it exited meanwhile
            pass
    return found


def fire(event: dict, schedule: Schedule, proc: subprocess.Popen, trials: list, stores: Stores) -> bool:
    """Inject ``event`` if a worker of ``proc`` holds a row now; True when it was injected."""
    mine = children(proc.pid)
    held = sorted((t.user_attrs[WORKER_ATTR]["pid"], t.user_attrs.get("row")) for t in trials
                  if t.state == TrialState.RUNNING and t.user_attrs.get(WORKER_ATTR, {}).get("pid") in mine)
    if not held:
        return False
    if event["kind"] == "kill -9":
        pid, row = schedule.rng.choice(held)
        os.kill(pid, signal.SIGKILL)
        schedule.done(event, pid=pid, row=row)
    elif event["kind"] == "coordinator SIGTERM":
        proc.send_signal(signal.SIGTERM)
        schedule.done(event, pid=proc.pid, rows_held=[r for _, r in held])
    else:
        started = time.time()
        stores.server.restart()
        schedule.done(event, rows_held=[r for _, r in held], down_s=round(time.time() - started, 1))
    return True


def watch(proc: subprocess.Popen, schedule: Schedule | None, watcher: Watcher | None, stores: Stores,
          load: list) -> None:
    """Wait for the command to end, injecting each fault of the schedule when it is due; the
    machine's 1-minute load average goes into ``load`` every second (other work shares it)."""
    while proc.poll() is None:
        time.sleep(1.0)
        load.append(os.getloadavg()[0])
        trials = watcher.trials() if schedule and schedule.events else None
        event = schedule.due(sum(t.state == TrialState.COMPLETE for t in trials)) if trials else None
        if event and fire(event, schedule, proc, trials, stores) and event["kind"] == "coordinator SIGTERM":
            stopped(proc, schedule)


def stopped(proc: subprocess.Popen, schedule: Schedule, patience: float = 30.0) -> None:
    """Wait for a SIGTERMed coordinator. One still there after ``patience`` s (it stops its workers
    at once) has a stuck worker: every worker left is sent SIGABRT, so faulthandler writes each of
    its threads' stacks into the log, and the wait is reported."""
    try:
        proc.wait(timeout=patience)
        return
    except subprocess.TimeoutExpired:
        stuck = sorted(children(proc.pid))
    for pid in stuck:
        os.kill(pid, signal.SIGABRT)
    schedule.fired[-1]["stuck_workers"] = stuck
    try:
        proc.wait(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()


def run_commands(cmd: list, env: dict, log: Path, schedule: Schedule | None, watcher: Watcher | None,
                 stores: Stores, max_commands: int = 10) -> tuple[list[int], float, float]:
    """Run the study command until it exits 0 (at most ``max_commands`` times), injecting the
    schedule's faults; returns (exit codes, wall seconds, mean load). A command that exits
    non-zero although no fault was injected into it is not run again: its rows failed by themselves."""
    codes, started, load = [], time.time(), []
    while len(codes) < max_commands:
        fired_before = len(schedule.fired) if schedule else 0
        with open(log, "a") as out:
            out.write(f"\n=== command {len(codes) + 1}: {' '.join(cmd)}\n")
            out.flush()
            proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
            try:
                watch(proc, schedule, watcher, stores, load)
            finally:   # the soak itself failed (a server that does not come back): no command outlives it
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
        codes.append(proc.returncode)
        print(f"[soak] {time.strftime('%H:%M:%S')} command {len(codes)} exited {proc.returncode}", flush=True)
        if proc.returncode == 0 or (schedule is None or len(schedule.fired) == fired_before):
            break
    return codes, time.time() - started, round(sum(load) / max(1, len(load)), 1)


def table_csv(path: Path, state: Path, stores: Stores) -> tuple[str, str]:
    """(`grpolab table` CSV, the same without its measured-hours column). That column is each
    rung's training wall time (processes x seconds), which no two runs share; the rest compares."""
    out = subprocess.run([sys.executable, "-m", "grpolab.cli", "--state", str(state), "table", str(path),
                          "--format", "csv", *stores.storage_args], env={**ENV, **stores.env},
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        return (f"exit {out.returncode}: {out.stdout}{out.stderr}"[-2000:],) * 2
    lines = list(csv.reader(io.StringIO(out.stdout)))
    keep = [i for i, name in enumerate(lines[0]) if not name.endswith("-hours")] if lines else []
    return out.stdout, "\n".join(",".join(line[i] for i in keep if i < len(line)) for line in lines)


def outcome(stores: Stores, rows: list[str]) -> dict:
    """The study as it ended: per-row values and metrics, restarts, and the exactly-once problems."""
    trials = optuna.load_study(study_name=NAME, storage=open_storage(stores.storage)).get_trials(deepcopy=False)
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    counts = Counter(t.user_attrs.get("row") for t in complete)
    tries = Counter(t.user_attrs.get("row") for t in trials if "row" in t.user_attrs)
    problems = [f"row {r} COMPLETE {counts[r]} times" for r in rows if counts[r] != 1]
    problems += [f"trial {t.number} ({t.user_attrs.get('row')}) left {t.state.name}" for t in trials
                 if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    problems += [f"trial {t.number} ({t.user_attrs.get('row')}) failed with an error: {t.user_attrs.get('error')}"
                 for t in trials if t.user_attrs.get("outcome") == "error"]
    client = MlflowClient(stores.tracking)
    runs = client.search_runs([client.get_experiment_by_name(EXPERIMENT).experiment_id], max_results=1000)
    problems += [f"MLflow run {r.info.run_id} ({r.info.run_name}) left RUNNING" for r in runs
                 if r.info.status == "RUNNING"]
    ended = {t.user_attrs["row"]: client.get_run(t.user_attrs["mlflow_run_id"]).data for t in complete}
    return {"values": {t.user_attrs["row"]: t.values for t in complete},
            "metrics": {r: {k: v for k, v in d.metrics.items() if not k.startswith((*MEASURED_TIME, "system/"))}
                        for r, d in ended.items()},   # the last value of each; wall-clock ones never compare
            "restarted": {r: f"resumed from step {ended[r].tags['grpolab.resume.from_step']}"
                          if "grpolab.resume.from_step" in ended[r].tags else "fresh run"
                          for r, n in sorted(tries.items()) if n > 1 and r in ended}, "problems": problems}


def phase(kind: str, root: Path, path: Path, rows: list[str], schedule: Schedule | None) -> dict:
    """One run of the study in a fresh state folder with fresh stores (and faults when ``schedule``)."""
    state = root / "state"
    root.mkdir(parents=True)
    stores = Stores(kind, root, state)
    try:
        cmd = [sys.executable, "-m", "grpolab.cli", "--state", str(state), "study", str(path), "--workers", "2",
               *stores.storage_args]
        watcher = Watcher(stores.storage, state) if schedule else None
        codes, wall, load = run_commands(cmd, {**ENV, **stores.env}, root / "commands.log", schedule, watcher, stores)
        result = {"codes": codes, "wall_s": round(wall, 1), "load": load, **outcome(stores, rows),
                  "table": table_csv(path, state, stores)}
    finally:
        stores.server.stop()
    log = root / "commands.log"
    result["problems"] += [f"a traceback in {log}"] * ("Traceback" in log.read_text())
    result["problems"] += [f"the last command exited {codes[-1]}"] * (codes[-1] != 0)
    return result


def compare(faults: dict, reference: dict, rows: list[str]) -> tuple[list[str], dict]:
    """What differs between the disturbed and the undisturbed run, and how much was compared."""
    problems = [] if faults["table"][1] == reference["table"][1] else ["the table CSV differs from the undisturbed run's"]
    for row in rows:
        if faults["values"].get(row) != reference["values"].get(row):
            problems.append(f"row {row}: value {faults['values'].get(row)} != undisturbed {reference['values'].get(row)}")
        mine, theirs = faults["metrics"].get(row, {}), reference["metrics"].get(row, {})
        differ = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
        if differ:
            problems.append(f"row {row}: metrics differ from the undisturbed run's: {differ[:8]}")
    return problems, {"rows_compared": len(rows), "metrics_compared": sum(len(m) for m in reference["metrics"].values())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", choices=("journal", "postgresql"), required=True)
    parser.add_argument("--seed", type=int, default=0, help="seed of the fault schedule (default 0)")
    parser.add_argument("--kills", type=int, default=3, help="kill -9 of workers (default 3)")
    parser.add_argument("--seeds", type=int, default=12, help="seeds per rung (2 rungs; default 12: 24 rows)")
    parser.add_argument("--keep", action="store_true", help="keep the soak's folder (kept anyway when a check fails)")
    args = parser.parse_args()
    resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))   # SIGABRT: no core files
    root = Path(tempfile.mkdtemp(prefix=f"grpolab-soak-{args.store}-"))
    path = root / f"{NAME}.yaml"
    data = study_data(args.seeds)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    rows = [f"r{r}-s{s}" for r in range(len(data["rungs"])) for s in data["seeds"]]
    if len(rows) - 6 < args.kills + 2:
        parser.error(f"--kills {args.kills}: {len(rows)} rows leave room for at most {len(rows) - 8}")
    print(f"[soak] {args.store}: {len(rows)} rows, folder {root}; undisturbed run first", flush=True)
    reference = phase(args.store, root / "undisturbed", path, rows, None)
    schedule = Schedule(random.Random(args.seed), len(rows), args.kills)
    print(f"[soak] fault schedule (seed {args.seed}): {schedule.events}", flush=True)
    faults = phase(args.store, root / "faults", path, rows, schedule)
    differ, compared = compare(faults, reference, rows)
    problems = [f"undisturbed: {p}" for p in reference["problems"]] + faults["problems"] + differ
    problems += [f"fault not injected: {e}" for e in schedule.events]
    problems += [f"workers {e['stuck_workers']} still running 30 s after the coordinator's SIGTERM (stacks in "
                 f"{root / 'faults' / 'commands.log'})" for e in schedule.fired if e.get("stuck_workers")]
    kinds = Counter(e["kind"] for e in schedule.fired)
    figures = {"store": args.store, "seed": args.seed, "rows": len(rows), "kill9": kinds["kill -9"],
               "coordinator_sigterm": kinds["coordinator SIGTERM"], "store_restart": kinds["store restart"],
               "exit_codes": faults["codes"], "rows_restarted": len(faults["restarted"]), "restarted": faults["restarted"],
               "wall_s": faults["wall_s"], "undisturbed_wall_s": reference["wall_s"],
               "mean_load": faults["load"], "undisturbed_mean_load": reference["load"],
               "table_equal": faults["table"][1] == reference["table"][1], **compared, "faults": schedule.fired,
               "problems": problems}
    print(faults["table"][0], flush=True)
    if problems or args.keep:
        print(f"[soak] kept {root}", flush=True)
    else:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(figures), flush=True)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
