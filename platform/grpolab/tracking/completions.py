"""A run's completions tables: JSON lines appended and flushed as the run goes.

- ``completions.jsonl``: each logged rollout's kept completions (``tracking.samples`` rows), one
  row each: step, prompt, completion, every reward component (``reward/<name>``), the combined
  reward, the advantage, the length in tokens, the truncated and correct flags, the group index.
- ``eval_completions.jsonl``: each held-out evaluation's samples, with the benchmark's name.

Detail: docs/runs.md, "grpolab.tracking.completions".
"""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path

TRAIN_TABLE = "completions.jsonl"
EVAL_TABLE = "eval_completions.jsonl"
HELD_OUT = "held_out"   # the benchmark column of the run's own held-out set


def _plain(value):
    """JSON without NaN or infinity (strict readers refuse them): a non-finite number is null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value if isinstance(value, (str, int, float, bool)) or value is None else str(value)


class CompletionsTable:
    """One append-only JSON-lines table. ``keep_upto``: a resumed run first drops the rows past
    its checkpoint's step, which it trains again (the table then holds each step once)."""

    def __init__(self, path: Path, keep_upto: int | None = None):
        self.path = Path(path)
        self.seconds = 0.0   # time spent encoding and writing
        if self.path.exists():
            _drop_cut_line(self.path)   # a crash's half-written row: the next append would run on from it
        if keep_upto is not None and self.path.exists():
            kept = [row for row in read_table(self.path) if row.get("step", 0) <= keep_upto]
            self.path.write_text("".join(json.dumps(row) + "\n" for row in kept))

    def append(self, rows: list[dict], **columns) -> None:
        """``rows``, each with ``columns`` added (``step``, ``benchmark``), as lines at the end. The
        file is opened for each append: a process that runs many rows holds no file open."""
        if not rows:
            return
        start = time.perf_counter()
        text = "".join(json.dumps({**columns, **{k: _plain(v) for k, v in row.items()}}) + "\n" for row in rows)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(text)
        self.seconds += time.perf_counter() - start


def _drop_cut_line(path: Path) -> None:
    """Truncate the file after its last newline (nothing when it ends with one)."""
    with open(path, "r+b") as f:
        size = f.seek(0, 2)
        chunk = 65536
        while size:
            start = max(0, size - chunk)
            f.seek(start)
            data = f.read(size - start)
            if data.endswith(b"\n"):
                return
            cut = data.rfind(b"\n")
            if cut >= 0 or start == 0:
                f.truncate(start + cut + 1)
                return
            chunk *= 4


def read_table(path: Path, step: int | None = None) -> list[dict]:
    """Every complete row of a table (a last line cut short by a crash is left out); ``step``:
    only that step's rows, picked by their line's start (``{"step": N,``, as ``append`` writes a
    rollout's rows) before any is parsed, so one step of a long run's table reads fast."""
    rows, start = [], None if step is None else f'{{"step": {int(step)},'
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.endswith("\n"):
                break
            if start is None or line.startswith(start):
                rows.append(json.loads(line))
    return rows


def last_step(path: Path) -> int | None:
    """The step of a table's last complete row, read from the file's end: only its head
    (``{"step": N,``) is parsed, whatever the row's length (None: no complete row)."""
    with open(path, "rb") as f:
        size, chunk = f.seek(0, 2), 65536
        while True:
            start = max(0, size - chunk)
            f.seek(start)
            data = f.read(size - start)
            end = data.rfind(b"\n")
            begin = data.rfind(b"\n", 0, max(end, 0)) + 1
            if end >= 0 and (begin > 0 or start == 0):
                head = re.match(rb'\{"step": (-?\d+),', data[begin:end])
                return int(head.group(1)) if head else None
            if start == 0:
                return None
            chunk *= 4



def open_tables(folder: Path, recorder=None, keep_upto: int | None = None) -> tuple[CompletionsTable, CompletionsTable]:
    """(rollout table, evaluation table) of the run folder ``folder``; with a ``recorder`` both are
    copied to the MLflow run when it ends, whatever its status."""
    tables = CompletionsTable(Path(folder) / TRAIN_TABLE, keep_upto), CompletionsTable(Path(folder) / EVAL_TABLE, keep_upto)
    if recorder is not None:
        recorder.log_on_end(*(t.path for t in tables))
    return tables


def accelerator_tags(device_seconds: float, gpu: bool, processes: int) -> dict:
    """A run's measured compute as tags: accelerator-hours = processes x wall seconds of training
    / 3600 (the held-out evaluations at step 0 and at the end included, the warm start and model
    loading not; a resumed run adds its checkpoint's), labelled by what the processes ran on (CPU
    hours on a machine without a GPU). Tagged here beside the tables: both are what a run leaves
    for the study's reports."""
    return {"grpolab.accelerator_hours": f"{device_seconds / 3600:.6g}", "grpolab.accelerator": "GPU" if gpu else "CPU",
            "grpolab.processes": processes}
