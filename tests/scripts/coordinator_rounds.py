"""One of several `grpolab study` coordinators started together by tests/studies/test_faults.py.

For each round it waits at a file barrier (so every coordinator starts that round at the same
moment), points MLflow at the round's fresh store and runs the real CLI entry point on the
round's fresh study storage. Imports are paid once per process, not once per round, and the
process's collector is the command line's (``startup.own_process``), as in a `grpolab` process.
On PostgreSQL rounds every coordinator has its own state folder (as on separate machines), so the
state-folder file lock cannot serialise them: the PostgreSQL advisory locks are what is tested.
Prints ``CODES [exit codes]`` as its last line.
"""

import json
import os
import sys
import time
import traceback
from pathlib import Path

from grpolab.cli import main
from grpolab.startup import own_process


def barrier(folder: Path, name: str, parties: int) -> None:
    (folder / f"{name}.{os.getpid()}").touch()
    while len(list(folder.glob(f"{name}.*"))) < parties:
        time.sleep(0.02)


def run(spec: dict) -> list[int]:
    codes = []
    for i, (tracking, storage) in enumerate(spec["rounds"]):
        barrier(Path(spec["barrier"]), f"round{i}", spec["parties"])
        os.environ["MLFLOW_TRACKING_URI"] = tracking
        state = spec["state"] + (f"-{os.getpid()}" if tracking.startswith("postgresql") else "")
        try:
            codes.append(main(["--state", state, "study", spec["study"], "--storage", storage]))
        except SystemExit as exc:   # keep meeting the others at the barriers: the test shows the code
            codes.append(exc.code if isinstance(exc.code, int) else 1)
        except BaseException:  # noqa: BLE001 - printed (the test fails on "Traceback"), rounds go on
            traceback.print_exc()
            sys.stdout.flush()
            codes.append(-1)
    return codes


if __name__ == "__main__":
    own_process()
    print("CODES " + json.dumps(run(json.loads(sys.argv[1]))), flush=True)
