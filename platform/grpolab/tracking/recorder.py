"""MLflow: run layout, tags, batched logging and honest statuses.

Detail: docs/runs.md, "grpolab.tracking.recorder".
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import subprocess
import tempfile
import time
import traceback
from pathlib import Path
from typing import NamedTuple

import mlflow
from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from grpolab.signals import RunKilled
from grpolab.state import confine_caches
from grpolab.tracking.figures import curves_figure
from grpolab.tracking.metric_catalog import dropped_keys, dropped_prefixes
from grpolab.tracking.naming import clean_metric_name, flat_keys, resolve_path_tag, standard_tags
from grpolab.tracking.sqlite_schema import create_from_schema

MAX_BATCH = 1000        # MLflow's limit of metrics per log_batch call
MAX_PARAM_LEN = 6000
# TRL keys that duplicate grpolab's curves or mislead, and TRL's end-of-train summary (one point at
# the last step, not a curve): the catalog's records with stored=False, each saying why.
DROPPED = dropped_keys()
DROPPED_PREFIXES = dropped_prefixes()   # completions/*: they repeat length/*
ARTIFACTS_DIR = "mlartifacts"


def stored_name(key: str) -> str | None:
    """The name MLflow stores a logged key under, or None for a key grpolab does not store
    (``DROPPED``, ``DROPPED_PREFIXES``). The one definition of a run's history keys: the recorder
    writes under it, a live run keys its curves by it, and a resumed run reads the stored names
    back unchanged, so a resumed row and a live one name every metric alike."""
    if key in DROPPED or key.startswith(DROPPED_PREFIXES):
        return None
    return clean_metric_name(key)


LOCATION_MARK = ".artifact-root"      # in the state folder: the artifact root URI last written

# log_dataset's retries after a concurrent insert of the same dataset (see log_dataset)
DATASET_RACE_RETRIES = 2


def tracking_uri(state_dir: Path) -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path(state_dir).resolve()}/mlflow.db"


def is_server_uri(uri: str) -> bool:
    return uri.startswith(("http://", "https://", "databricks"))


def artifact_root(state_dir: Path) -> str:
    return (Path(state_dir).resolve() / ARTIFACTS_DIR).as_uri()


def client_for(state_dir: Path) -> MlflowClient:
    Path(state_dir).mkdir(parents=True, exist_ok=True)
    uri = tracking_uri(state_dir)
    if uri.startswith("sqlite:///"):   # a fresh store from MLflow's migrated schema
        from sqlalchemy.engine import make_url
        database = make_url(uri).database   # as SQLAlchemy reads it: %-decoded, without ?options
        if database and database != ":memory:":
            create_from_schema(Path(database))
    if uri.startswith("sqlite:"):
        relocate_artifacts(uri, state_dir)
    return MlflowClient(tracking_uri=uri)


def relocate_artifacts(uri: str, state_dir: Path) -> int:
    """Re-point artifact paths stored under a previous location of this state folder to the
    current one (MLflow keeps absolute paths). Returns the number of rows changed."""
    import sqlite3
    mark = Path(state_dir) / LOCATION_MARK
    current = artifact_root(state_dir)
    previous = _read_mark(mark) or current
    db = uri[len("sqlite:///"):] if uri.startswith("sqlite:///") else ""
    changed = 0
    if previous != current and db and Path(db).exists():
        # the root itself, or a path under it: "/" keeps /old/state from matching /old/state2/...
        with contextlib.closing(sqlite3.connect(db, timeout=60)) as conn, conn:
            for table, column in (("experiments", "artifact_location"), ("runs", "artifact_uri")):
                changed += conn.execute(
                    f"UPDATE {table} SET {column} = ? || substr({column}, ?) "
                    f"WHERE {column} = ? OR substr({column}, 1, ?) = ?",
                    (current, len(previous) + 1, previous, len(previous) + 1, previous + "/")).rowcount
    if previous != current or _read_mark(mark) is None:
        _write_mark(mark, current)
    return changed


def _read_mark(mark: Path) -> str | None:
    """The artifact root recorded in the mark; None when it is absent, empty or partial (a mark
    is complete only with its final newline), so a half-written mark never re-points paths."""
    try:
        text = mark.read_text()
    except OSError:
        return None
    return text.strip() if text.endswith("\n") and text.strip().startswith("file:") else None


def _write_mark(mark: Path, root: str) -> None:
    """Written whole or not at all: a temporary file renamed over the mark (atomic on POSIX)."""
    tmp = mark.with_name(f"{mark.name}.{os.getpid()}.tmp")
    tmp.write_text(root + "\n")
    os.replace(tmp, mark)


def ensure_experiment(client: MlflowClient, name: str, state_dir: Path) -> str:
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        return exp.experiment_id
    artifacts = None if is_server_uri(client.tracking_uri) else artifact_root(state_dir)
    try:
        return client.create_experiment(name, artifact_location=artifacts)
    except mlflow.exceptions.MlflowException:  # created concurrently by another worker
        return client.get_experiment_by_name(name).experiment_id


def flatten(d: dict, prefix: str = "") -> dict[str, str]:
    """Params as MLflow stores them: ``a.b`` keys, values as text cut at MLflow's length limit."""
    return {key: str(value)[:MAX_PARAM_LEN] for key, value in flat_keys(d, prefix).items()}


def git_commit() -> str:
    try:
        here = Path(__file__).resolve().parent
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True,
                              timeout=5).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


class RunLink(NamedTuple):
    """Where a recorded run sits: a new run (a child of ``parent_run_id`` when set) or, with
    ``resume_run_id``, that existing run continued."""
    parent_run_id: str | None = None
    resume_run_id: str | None = None


class RunRecorder:
    """One MLflow run. Use as a context manager: the exit decides the final status."""

    def __init__(self, state_dir: Path, experiment: str, run_name: str, tags: dict, params: dict,
                 flush_every: int = 20, link: RunLink = RunLink()):
        parent_run_id, resume_run_id = link
        self.client = client_for(state_dir)
        self.experiment_id = ensure_experiment(self.client, experiment, state_dir)
        self.stored_points: dict[tuple[str, int], float] = {}   # resumed run: points already in the store
        self.skipped_points = self.differing_points = 0
        if resume_run_id is not None:  # continue a run from its checkpoint (checkpoints.py): same id, same params
            self.run_id, self.flush_every = resume_run_id, flush_every
            self._buffer, self._pending, self._last_flush_step, self.log_seconds = [], [], 0, 0.0
            self.client.update_run(resume_run_id, status="RUNNING")
            # the resuming process owns the run now: its trial number (a re-queued row's new trial,
            # which the reaper looks runs up by) and no stale error from the interruption
            for key, value in tags.items():
                if not key.startswith("mlflow."):
                    self.client.set_tag(resume_run_id, key, str(value)[:5000])
            if "grpolab.error" in self.client.get_run(resume_run_id).data.tags:
                self.client.delete_tag(resume_run_id, "grpolab.error")
            from grpolab.tracking.recorder import stored_points
            self.stored_points = {(k, step): v for k, pts in stored_points(self.client, resume_run_id).items()
                                  for step, v in pts}
            return
        all_tags = {**standard_tags(git_commit()), **tags}
        if parent_run_id:
            all_tags["mlflow.parentRunId"] = parent_run_id
        run = self.client.create_run(self.experiment_id, run_name=run_name,
                                     tags={k: str(v)[:5000] for k, v in all_tags.items()})
        self.run_id = run.info.run_id
        self.flush_every = flush_every
        self._buffer: list[Metric] = []
        self._pending: list = []     # futures of asynchronous log_batch calls
        self._last_flush_step = 0
        self.log_seconds = 0.0       # time spent writing to MLflow (reported by the benchmark)
        items = [Param(k, v) for k, v in flatten(params).items()]
        for i in range(0, len(items), 100):
            self.client.log_batch(self.run_id, params=items[i:i + 100])

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        now = int(time.time() * 1000)
        for key, value in metrics.items():
            name = stored_name(key)
            if name is None:
                continue
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                stored = self.stored_points.get((name, step))
                if stored is not None:  # first write wins (checkpoints.py); count re-computed values that differ
                    self.skipped_points += 1
                    self.differing_points += "time" not in key and not math.isclose(  # wall-clock keys differ
                        stored, float(value), rel_tol=1e-5, abs_tol=1e-7)
                    continue
                self._buffer.append(Metric(name, float(value), now, step))
        if step - self._last_flush_step >= self.flush_every:
            self.flush()
            self._last_flush_step = step

    def flush(self, wait: bool = False) -> None:
        """Hand the buffer to this recorder's writer thread (one ``log_batch`` per chunk, in
        order); ``wait`` blocks until everything queued so far is stored. Not MLflow's own
        asynchronous queue: closing a run drains that queue through a thread that polls once a
        second, which stalled every run's end by up to 1 s (measured in study workers)."""
        start = time.perf_counter()
        while self._buffer:
            chunk, self._buffer = self._buffer[:MAX_BATCH], self._buffer[MAX_BATCH:]
            self._pending.append(self._writer().submit(self.client.log_batch, self.run_id, metrics=chunk))
        if wait:
            for future in self._pending:
                future.result()   # a failed write raises here, as MLflow's own future did
            self._pending.clear()
        self.log_seconds += time.perf_counter() - start

    def _writer(self):
        if getattr(self, "_executor", None) is None:
            from concurrent.futures import ThreadPoolExecutor
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="grpolab-mlflow-writer")
        return self._executor

    def set_tags(self, tags: dict) -> None:
        self.client.log_batch(self.run_id, tags=[RunTag(k, str(v)[:5000]) for k, v in tags.items()])

    def log_dataset(self, name: str, rows: list[dict], context: str, source_tags: dict) -> None:
        """The examples a run used as an MLflow dataset input (MLflow's Datasets column and the
        run's Inputs), with a digest of their content: two runs on the same prompts show the same
        dataset. ``context``: training or evaluation."""
        import pandas as pd
        from mlflow.data.code_dataset_source import CodeDatasetSource
        from mlflow.entities import DatasetInput, InputTag
        dataset = mlflow.data.from_pandas(pd.DataFrame(rows), name=name,
                                          source=CodeDatasetSource(tags={k: str(v) for k, v in source_tags.items()}))
        tag = InputTag(key="mlflow.data.context", value=context)
        inputs = [DatasetInput(dataset._to_mlflow_entity(), tags=[tag])]
        for attempt in range(DATASET_RACE_RETRIES + 1):
            try:
                self.client.log_inputs(self.run_id, datasets=inputs)
                return
            except mlflow.exceptions.MlflowException as exc:
                # Two workers logging the same dataset (experiment, name, digest) at once: both see it
                # missing, both insert, the second hits the store's unique constraint (measured: a
                # 2-worker study on SQLite). Retried, the dataset exists and only the input is linked.
                if "unique constraint" not in str(exc).lower() or attempt == DATASET_RACE_RETRIES:
                    raise

    def log_json(self, obj, name: str) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / name
            path.write_text(json.dumps(obj, indent=2, default=str))
            self.client.log_artifact(self.run_id, str(path))

    def log_table(self, rows: list[dict], name: str) -> None:
        """Rows as an MLflow table (the UI's artifact view and ``mlflow.load_table`` read it)."""
        import pandas as pd
        self.client.log_table(self.run_id, data=pd.DataFrame(rows), artifact_file=name)

    def log_folder(self, folder: Path, artifact_path: str) -> None:
        """Every file under ``folder`` as the run's artifacts under ``artifact_path`` (a remote
        server stores them in its own artifact store, not as a local path)."""
        self.client.log_artifacts(self.run_id, str(folder), artifact_path)

    def log_text(self, text: str, name: str) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / name
            path.write_text(text)
            self.client.log_artifact(self.run_id, str(path))

    def start_system_metrics(self, resumed: bool = False) -> None:
        """MLflow's system metrics (``system/*``: the whole machine's CPU, memory, disk, network
        and GPU use) sampled by a background thread until ``end`` (``tracking.system_metrics``;
        interval: ``$MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL`` s, default 10)."""
        from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor  # imports psutil
        self.system_monitor = SystemMetricsMonitor(self.run_id, resume_logging=resumed,
                                                   tracking_uri=self.client.tracking_uri)
        self.system_monitor.start()

    def log_curves_figure(self, curves: dict, evals: dict, state_dir: Path, name: str = "curves.png") -> None:
        """The run's main curves as one image on the run (``tracking/figures.py``)."""
        confine_caches(state_dir)   # matplotlib's font cache in the state folder, not $HOME
        import matplotlib.pyplot as plt
        figure = curves_figure(curves, evals)
        try:
            self.client.log_figure(self.run_id, figure, name)
        finally:
            plt.close(figure)

    def end(self, status: str, error: BaseException | None = None) -> None:
        monitor = getattr(self, "system_monitor", None)
        if monitor is not None:   # stopped (and its last samples written) before the run is closed
            monitor.finish()
            self.system_monitor = None
        try:
            self.flush(wait=True)
        finally:
            if getattr(self, "_executor", None) is not None:
                self._executor.shutdown(wait=False)
                self._executor = None
            if error is not None:
                self.set_tags({"grpolab.error": f"{type(error).__name__}: {error}",
                               "grpolab.traceback": "".join(traceback.format_exception(error))[-4000:]})
            try:
                for path in getattr(self, "_end_files", ()):
                    if Path(path).exists():
                        self.client.log_artifact(self.run_id, str(path))
            finally:
                self.client.set_terminated(self.run_id, status=status)

    def log_on_end(self, *paths: Path) -> None:
        """Files copied to the run's artifacts when it ends, whatever its status (the completions
        tables, written as the run goes: tracking/completions.py)."""
        self._end_files = [*getattr(self, "_end_files", ()), *paths]

    def __enter__(self) -> "RunRecorder":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc is None:
            self.end("FINISHED")
        elif getattr(exc, "grpolab_status", None):  # e.g. a pruned study trial: KILLED, reason tagged
            self.end(exc.grpolab_status, exc)
        elif isinstance(exc, (KeyboardInterrupt, RunKilled)):
            self.end("KILLED", exc)
        else:
            self.end("FAILED", exc)
        return False


def final_model_dir(run_id: str, state):
    """The folder of a finished run's final model, wherever its state folder now is."""
    from grpolab.tracking.recorder import client_for
    return resolve_path_tag(client_for(state).get_run(run_id).data.tags["grpolab.final_model"], state)


def stored_points(client, run_id: str) -> dict[str, list[tuple[int, float]]]:
    """Every stored metric point of a run: key -> [(step, value)] in step order."""
    run = client.get_run(run_id)
    return {key: sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))
            for key in run.data.metrics}
