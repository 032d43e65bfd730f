"""A study's coordinator of worker processes never imports the training stack: its validation,
queueing, results and last line (where the runs are in MLflow) are torch-free, so it leaves the
cores to the workers' imports and answers fast."""

import json
import subprocess
import sys

import yaml

from conftest import run_study_data, tiny_two_rung_ladder

PROBE = """
import json, sys
from grpolab.cli import main
sys.argv = ["grpolab", *sys.argv[1:]]
code = main()
heavy = sorted(m for m in ("torch", "transformers", "trl", "peft") if m in sys.modules)
print(json.dumps({"code": code, "heavy": heavy}))
"""


def test_the_coordinator_of_a_finished_two_worker_study_imports_no_training_stack(tmp_path):
    state = tmp_path / "state"
    data = tiny_two_rung_ladder(name="coordinator_imports", seeds=[0])
    run_study_data(tmp_path, data, state)                   # every row done, results written
    path = tmp_path / "study.yaml"
    assert yaml.safe_load(path.read_text()) == data
    done = subprocess.run([sys.executable, "-c", PROBE, "--state", str(state), "study", str(path), "--workers", "2"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"code": 0, "heavy": []}, report
    assert "MLflow: mlflow ui --backend-store-uri" in done.stderr and "(parent run " in done.stderr, done.stderr[-2000:]
