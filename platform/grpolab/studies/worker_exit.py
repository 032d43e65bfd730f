"""How study worker processes end and how the coordinator waits for them.

Measured by per-phase accounting of `grpolab study --workers 2` on 2 cores: a worker
process that returns normally spends ~1.8 CPU-s tearing the interpreter down (torch,
transformers and MLflow module finalisation and a full garbage collection) after its last row
is reported, on top of ~5.5 CPU-s of imports at start. A worker has nothing left to write at
that point (every row was told to the Optuna storage, every MLflow run was closed and its
metrics written synchronously by ``RunRecorder.end``), so it flushes its streams and leaves
with ``os._exit``. The coordinator notices a worker's exit within a tenth of a second instead
of at its next 2 s poll.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from typing import NoReturn


def exit_now(code: int) -> NoReturn:
    """Flush what a normal exit would flush (stdio, logging), then end the process without
    interpreter teardown. MLflow has nothing queued: ``RunRecorder`` writes through its own
    thread and waits for it when a run ends (and ``mlflow.flush_async_logging()`` must not be
    called here: with no tracking URI set it creates ./mlflow.db in the working folder)."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):   # a closed pipe or stream: nothing more can reach it
            pass
    os._exit(code)


def wait_any(procs: list[subprocess.Popen], seconds: float, step: float = 0.1, until_all: bool = False) -> None:
    """Sleep up to ``seconds``, returning as soon as one of the still running ``procs`` exits
    (ones that had already exited do not cut the wait short), or with ``until_all`` once all have."""
    running = [p for p in procs if p.poll() is None]
    deadline = time.monotonic() + seconds
    while running and time.monotonic() < deadline:
        ended = [p.poll() is not None for p in running]
        if all(ended) if until_all else any(ended):
            return
        time.sleep(step)
