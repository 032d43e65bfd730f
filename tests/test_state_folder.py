"""The state folder holds everything: a command run from an empty folder with an empty HOME leaves
both empty, and a state folder moved to a new path still opens its runs' artifacts (and new runs
write under the new path), also with a user-chosen `sqlite:` tracking URI."""

import json
import os
import subprocess
import sys
from pathlib import Path

from grpolab.config import load_experiment
from grpolab.runner import run_experiment
from grpolab.tracking import ARTIFACTS_DIR, client_for

from conftest import REPO

FAST = ["train.steps=2", "eval.every=0", "eval.prompts=4", "eval.k=1", "train.prompts_per_rollout=2",
        "train.group_size=4", "warm_start.enabled=false"]


def grpolab(args, cwd, home, extra_env=None):
    env = {k: v for k, v in os.environ.items() if k not in ("GRPOLAB_STATE", "MLFLOW_TRACKING_URI")}
    env.update({"HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache"), **(extra_env or {})})
    env.pop("HF_HOME", None)
    done = subprocess.run([sys.executable, "-m", "grpolab.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_nothing_outside_the_state_folder_and_a_moved_state_still_opens(tmp_path, monkeypatch):
    cwd, home = tmp_path / "cwd", tmp_path / "home"
    cwd.mkdir()
    home.mkdir()
    first = tmp_path / "first-state"
    out = grpolab(["run", str(REPO / "experiments/smoke.yaml"), "--state", str(first), *FAST], cwd, home)
    summary = json.loads(out.stdout)
    assert summary["state"] == str(first.resolve()) and summary["mlflow"]["run_id"] == summary["run_id"]
    assert summary["mlflow"]["experiment_runs_url"].endswith(f"#/experiments/{summary['mlflow']['experiment_id']}/runs")
    assert list(cwd.iterdir()) == [] and list(home.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cwd", "first-state", "home"]

    moved = tmp_path / "moved" / "state"
    moved.parent.mkdir()
    first.rename(moved)
    client = client_for(moved)       # any grpolab entry point re-points the stored artifact paths
    run = client.get_run(summary["run_id"])
    assert run.info.artifact_uri.startswith((moved.resolve() / ARTIFACTS_DIR).as_uri())
    config = json.loads(Path(client.download_artifacts(summary["run_id"], "config.json", str(tmp_path))).read_text())
    assert config["name"] == "smoke"

    # A user-chosen sqlite: URI (the moved state's own database), in-process from the empty folder:
    # the new run's artifacts land in the moved state folder, nothing in the current folder.
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{moved.resolve() / 'mlflow.db'}")
    result = run_experiment(load_experiment(REPO / "experiments/smoke.yaml", FAST), moved)
    new_run = client.get_run(result.run_id)
    assert new_run.info.artifact_uri.startswith((moved.resolve() / ARTIFACTS_DIR).as_uri())
    assert (moved / ARTIFACTS_DIR / result.run_id / "artifacts" / "config.json").exists()
    assert not first.exists() and list(cwd.iterdir()) == []
