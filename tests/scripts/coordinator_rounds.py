"""One of several `grpolab study` coordinators started together by tests/test_faults.py.

For each round it waits at a file barrier (so every coordinator starts that round at the same
moment), points MLflow at the round's fresh store and runs the real CLI entry point on the
round's fresh study storage. Imports are paid once per process, not once per round.
Prints ``CODES [exit codes]`` as its last line.
"""

import json
import os
import sys
import time
from pathlib import Path

from grpolab.cli import main


def barrier(folder: Path, name: str, parties: int) -> None:
    (folder / f"{name}.{os.getpid()}").touch()
    while len(list(folder.glob(f"{name}.*"))) < parties:
        time.sleep(0.02)


def run(spec: dict) -> list[int]:
    codes = []
    for i, (tracking, storage) in enumerate(spec["rounds"]):
        barrier(Path(spec["barrier"]), f"round{i}", spec["parties"])
        os.environ["MLFLOW_TRACKING_URI"] = tracking
        codes.append(main(["--state", spec["state"], "study", spec["study"], "--storage", storage]))
    return codes


if __name__ == "__main__":
    print("CODES " + json.dumps(run(json.loads(sys.argv[1]))), flush=True)
