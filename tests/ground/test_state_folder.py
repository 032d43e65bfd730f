"""The state folder holds everything: every command run from an empty folder, with an empty HOME
and empty XDG and temporary folders, leaves all of them empty (the file system is walked before
and after each command), and a state folder moved to a new path still opens its runs' artifacts
and final model (and new runs write under the new path), also with a user-chosen `sqlite:`
tracking URI."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from grpolab.experiment.config import load_experiment
from grpolab.tracking.recorder import final_model_dir
from grpolab.experiment.runner import run_experiment
from grpolab.tracking.recorder import ARTIFACTS_DIR, client_for

from conftest import REPO

FAST = ["train.steps=2", "eval.every=0", "eval.prompts=4", "eval.k=1", "train.prompts_per_rollout=2",
        "train.group_size=4", "warm_start.enabled=false"]
TINY_LADDER = {"kind": "ladder", "name": "tiny_state_ladder", "seeds": [0], "metric": "final:eval/pass_at_1",
               "base": {"task": {"name": "addition", "digits": 2}, "model": {"preset": "tiny"},
                        "warm_start": {"enabled": False}, "method": {"base": "grpo"},
                        "train": {"group_size": 4, "prompts_per_rollout": 2}, "eval": {"prompts": 4, "k": 1},
                        "tracking": {"experiment": "state-test"}},
               "budget": {"train.steps": 1, "eval.every": 0},
               "rungs": [{"name": "GRPO"}, {"name": "clip higher", "changes": {"method.eps_high": 0.28}}]}
TINY_CLAIM = {"source": "test", "statement": "clip higher helps", "published": "n/a", "study": "tiny_state_ladder.yaml",
              "treatment": {"rung": "clip higher"}, "control": {"rung": "GRPO"}, "metric": "final:eval/pass_at_1",
              "direction": "increase", "smallest_effect": 0.05}


def empty_world(root: Path) -> dict:
    """Empty cwd, HOME, XDG and temporary folders under ``root``, and the environment that uses them."""
    for name in ("cwd", "home", "xdg-cache", "xdg-config", "xdg-data", "tmp"):
        (root / name).mkdir(parents=True)
    env = {k: v for k, v in os.environ.items()
           if k not in ("GRPOLAB_STATE", "MLFLOW_TRACKING_URI", "HF_HOME", "MPLCONFIGDIR") and "CACHE" not in k}
    env.update({"HOME": str(root / "home"), "XDG_CACHE_HOME": str(root / "xdg-cache"),
                "XDG_CONFIG_HOME": str(root / "xdg-config"), "XDG_DATA_HOME": str(root / "xdg-data"),
                "TMPDIR": str(root / "tmp")})
    return env


def grpolab(args, cwd, env):
    done = subprocess.run([sys.executable, "-m", "grpolab.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def written_outside(root: Path, allowed: tuple[str, ...]) -> list[str]:
    """Every path under ``root`` but the allowed top-level entries and the empty folders made by empty_world."""
    made = {"cwd", "home", "xdg-cache", "xdg-config", "xdg-data", "tmp"}
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                  if p.relative_to(root).parts[0] not in allowed and str(p.relative_to(root)) not in made)


def test_a_run_writes_only_its_state_folder_and_a_moved_state_still_opens(tmp_path, monkeypatch):
    env = empty_world(tmp_path)
    cwd, first = tmp_path / "cwd", tmp_path / "first-state"
    out = grpolab(["run", str(REPO / "experiments/smoke.yaml"), "--state", str(first), *FAST], cwd, env)
    summary = json.loads(out.stdout)
    assert f"held-out pass@1 at step 2: {summary['eval_final']['eval/pass_at_1']:.3g}" in out.stderr   # progress
    assert summary["state"] == str(first.resolve()) and summary["mlflow"]["run_id"] == summary["run_id"]
    assert summary["mlflow"]["experiment_runs_url"].endswith(f"#/experiments/{summary['mlflow']['experiment_id']}/runs")
    assert written_outside(tmp_path, ("first-state",)) == []
    tags = client_for(first).get_run(summary["run_id"]).data.tags
    assert tags["grpolab.final_model"] == f"runs/{summary['run_id']}/final"   # relative: moves with the folder
    assert tags["grpolab.run_dir"] == f"runs/{summary['run_id']}"

    moved = tmp_path / "moved" / "state"
    moved.parent.mkdir()
    first.rename(moved)
    client = client_for(moved)       # any grpolab entry point re-points the stored artifact paths
    run = client.get_run(summary["run_id"])
    assert run.info.artifact_uri.startswith((moved.resolve() / ARTIFACTS_DIR).as_uri())
    config = json.loads(Path(client.download_artifacts(summary["run_id"], "config.json", str(tmp_path))).read_text())
    assert config["name"] == "smoke"
    # The final model opens from the moved folder and is the one trained (same weights file).
    from grpolab.world.models import load_model
    model_dir = final_model_dir(summary["run_id"], moved)
    assert model_dir == moved.resolve() / "runs" / summary["run_id"] / "final"
    model, tokenizer = load_model(model_dir)
    assert model.config.model_type == "llama" and tokenizer("1+2=")["input_ids"]
    # A tag written before path tags were relative (absolute) is still read as stored.
    from grpolab.tracking.naming import resolve_path_tag
    assert resolve_path_tag(str(model_dir), tmp_path / "elsewhere") == model_dir

    # A user-chosen sqlite: URI (the moved state's own database), in-process from the empty folder:
    # the new run's artifacts land in the moved state folder, nothing in the current folder.
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{moved.resolve() / 'mlflow.db'}")
    result = run_experiment(load_experiment(REPO / "experiments/smoke.yaml", FAST), moved)
    new_run = client.get_run(result.run_id)
    assert new_run.info.artifact_uri.startswith((moved.resolve() / ARTIFACTS_DIR).as_uri())
    assert (moved / ARTIFACTS_DIR / result.run_id / "artifacts" / "config.json").exists()
    assert not first.exists() and list(cwd.iterdir()) == []


@pytest.mark.slow
def test_every_command_writes_only_the_state_folder(tmp_path):
    """study (2 rows), table, dashboard, verdicts on a claim, methods and bench --what cli, each
    from the empty folder; after each, nothing but the state folder (and the inputs) changed."""
    env = empty_world(tmp_path)
    cwd, state, inputs = tmp_path / "cwd", tmp_path / "state", tmp_path / "inputs"
    (inputs / "claims").mkdir(parents=True)
    study = inputs / "tiny_state_ladder.yaml"
    study.write_text(yaml.safe_dump(TINY_LADDER, sort_keys=False))
    (inputs / "claims" / "tiny_claim.yaml").write_text(yaml.safe_dump(TINY_CLAIM, sort_keys=False))
    commands = [["study", str(study)], ["table", str(study), "--format", "latex"], ["dashboard", str(study)],
                ["verdicts", "--no-run", str(inputs / "claims" / "tiny_claim.yaml")], ["methods"],
                ["bench", "--what", "cli", "--repeats", "3"]]
    outputs = {}
    for args in commands:
        outputs[args[0]] = grpolab(["--state", str(state), *args], cwd, env).stdout
        assert written_outside(tmp_path, ("state", "inputs")) == [], args
    assert sorted(p.name for p in inputs.rglob("*")) == ["claims", "tiny_claim.yaml", "tiny_state_ladder.yaml"]
    assert "clip higher" in outputs["table"] and (state / "dashboards").is_dir()
    assert json.loads(outputs["bench"])["typo_exit"] == 2
