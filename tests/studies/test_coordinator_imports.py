"""A study's coordinator of worker processes never imports the training stack: its validation,
queueing, the results it writes once the rows are done (tables, dashboard) and its last line
(where the runs are in MLflow) are torch-free, so it leaves the cores to the workers' imports and
answers fast. The commands that read a finished study (table, dashboard) are torch-free too."""

import json
import subprocess
import sys

import yaml

from conftest import tiny_two_rung_ladder

PROBE = """
import json, sys
from grpolab.cli import main
sys.argv = ["grpolab", *sys.argv[1:]]
code = main()
heavy = sorted(m for m in ("torch", "transformers", "trl", "peft") if m in sys.modules)
print(json.dumps({"code": code, "heavy": heavy}))
"""


def _probe(*args) -> tuple[dict, str]:
    """(what the command imported and returned, everything else it printed)."""
    done = subprocess.run([sys.executable, "-c", PROBE, *map(str, args)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    *printed, last = done.stdout.strip().splitlines()
    return json.loads(last), "\n".join(printed) + "\n" + done.stderr


def test_a_two_worker_study_and_the_commands_reading_it_import_no_training_stack(tmp_path):
    state, path = tmp_path / "state", tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(tiny_two_rung_ladder(name="coordinator_imports", seeds=[0])))
    report, err = _probe("--state", state, "study", path, "--workers", "2")   # runs both rows, writes the results
    assert report == {"code": 0, "heavy": []}, report
    assert "rows 2/2 done" in err and "(parent run " in err, err[-2000:]   # this coordinator ran both rows
    assert "MLflow: mlflow ui --backend-store-uri" in err, err[-2000:]
    for command in (["table", path, "--format", "csv"], ["dashboard", path]):
        report, out = _probe("--state", state, *command)
        assert report == {"code": 0, "heavy": []}, (command, report, out[-2000:])
        if command[0] == "table":
            assert "\nnone,a,1," in out and "\nnone,b,1," in out, out[-2000:]   # one CSV line per rung, 1 seed each
