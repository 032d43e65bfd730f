"""The README's drop-in quickstart ("A grpolab method in your TRL script") runs as written on a
machine without network, and its MLflow run reads as a CLI run's: named ``<method>-s<seed>``, the
CLI's trimmed params, no ``None`` logged, grpolab's warnings at the user's line."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MARK = "<!-- tests/house/test_readme_quickstart.py executes the next code block as written -->"
WARNING_LINE = re.compile(r"^(?P<file>.+?):(?P<line>\d+): (?P<category>\w+): (?P<message>.*)$")


def quickstart_block() -> str:
    text = (REPO / "README.md").read_text()
    assert text.count(MARK) == 1, "the README marks exactly one block as the tested quickstart"
    block = re.match(r"\s*```python\n(.*?)```", text.split(MARK, 1)[1], flags=re.S)
    assert block, "the marked quickstart is a python code block"
    return block.group(1)


def _offline_env() -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    for key in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_RUN_ID", "MLFLOW_FLATTEN_PARAMS",
                "MLFLOW_MAX_LOG_PARAMS", "MLFLOW_TAGS"):
        env.pop(key, None)   # the script as a user runs it: its own store, nothing inherited
    return env


def _cli_params(method: str) -> dict:
    """The params a CLI run of ``method`` logs (flattened as its recorder writes them)."""
    import grpolab
    from grpolab.tracking.naming import run_params
    from grpolab.tracking.recorder import flatten
    return flatten(run_params(grpolab.load({"method": method, "task": {"name": "addition"}, "model": {"preset": "tiny"}})))


def test_readme_quickstart_runs_offline_as_written_and_its_run_reads_like_a_cli_run(tmp_path):
    import json

    from mlflow.tracking import MlflowClient
    code = quickstart_block()
    script = tmp_path / "quickstart.py"
    script.write_text(code)
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=_offline_env(), capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    said = done.stdout + done.stderr

    # no None reaches a logger: transformers' MLflowCallback says 'log a value of "None"' per key and step
    assert 'value of "None"' not in said, [l for l in said.splitlines() if '"None"' in l][:3]

    # grpolab's warnings name the user's line that built the trainer, not sys:1 or grpolab's code
    built_at = 1 + next(i for i, line in enumerate(code.splitlines()) if line.startswith("trainer = GrpoLabTrainer("))
    warned = [m.groupdict() for m in map(WARNING_LINE.match, done.stderr.splitlines()) if m]
    ours = [w for w in warned if w["category"].startswith("Method") or "GrpoLabTrainer" in w["message"]]
    assert [(w["file"], int(w["line"]), w["category"]) for w in ours] == [
        (str(script), built_at, "MethodSettingsWarning")], warned
    assert "loss_type: 'dapo' -> 'grpo', beta: 0.0 -> 0.04" in ours[0]["message"]
    assert not [w for w in warned if w["file"] == "sys" or "/grpolab/" in w["file"]], warned

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    [run] = client.search_runs([client.get_experiment_by_name("grpolab-quickstart").experiment_id])
    assert run.info.status == "FINISHED"
    assert run.info.run_name == "grpo-s0"            # <method>-s<seed>, as a CLI run is <experiment>-s<seed>
    params = run.data.params
    cli = _cli_params("grpo")
    # the CLI's method axes and training knobs, under its names, with the same method values
    core = ("method.", "train.")
    assert {k for k in params if k.startswith(core)} == {k for k in cli if k.startswith(core)}
    assert {k: params[k] for k in params if k.startswith("method.")} == {k: v for k, v in cli.items()
                                                                        if k.startswith("method.")}
    assert {k for k in params if not k.startswith(core)} == {"model.path", "task.reward_funcs", "task.correctness",
                                                              "seed"}
    assert len(params) == len([k for k in cli if k.startswith(core)]) + 4 <= 32   # transformers logged 224
    # the GRPOConfig read back into the CLI's knobs: 8 rows per rollout = 2 prompts x 4 completions
    assert {k: params[k] for k in ("train.steps", "train.group_size", "train.prompts_per_rollout", "train.minibatches",
                                   "train.num_iterations", "train.grad_accum", "train.max_completion_length",
                                   "train.learning_rate", "seed")} == {
        "train.steps": "4", "train.group_size": "4", "train.prompts_per_rollout": "2", "train.minibatches": "1",
        "train.num_iterations": "1", "train.grad_accum": "1", "train.max_completion_length": "16",
        "train.learning_rate": "1e-06", "seed": "0"}
    assert (params["model.path"], params["task.reward_funcs"], params["task.correctness"]) == (
        "tiny-model", "['digits']", "answer")
    assert "output_dir" not in params and "adam_beta1" not in params and "vocab_size" not in params
    assert run.data.tags["grpolab.method"] == "grpo" and run.data.tags["grpolab.seed"] == "0"
    # TRL's full config is not lost: it is the trl_config.json artifact (the trainer's copy: grpo's beta)
    full = json.loads(Path(client.download_artifacts(run.info.run_id, "trl_config.json", str(tmp_path))).read_text())
    assert full["args"]["output_dir"] == "quickstart-out" and full["args"]["beta"] == 0.04
    assert full["model_config"]["model_type"] == "llama"

    # every step logged; the untrained model is never right, so length/correct has no value and no point
    history = client.get_metric_history(run.info.run_id, "reward/mean")
    assert [p.step for p in history] == [1, 2, 3, 4]
    assert float(done.stdout.strip().splitlines()[-1]) == pytest.approx(history[-1].value, rel=1e-3)
    assert [p.value for p in client.get_metric_history(run.info.run_id, "accuracy")] == [0.0] * 4
    assert "length/correct" not in run.data.metrics and "trained/length/correct" not in run.data.metrics
    assert run.data.metrics["length/incorrect"] > 0


def length(completions, **kwargs):
    return [float(len(c)) for c in completions]


def never(completions, **kwargs):
    return [False] * len(completions)


def test_mlflow_settings_act_on_a_dropin_run_and_run_name_wins(tiny_model_dir, tmp_path, monkeypatch):
    """transformers' MLflow environment settings still act under grpolab's callback: MLFLOW_MAX_LOG_PARAMS
    cuts the params, MLFLOW_TAGS adds tags; MLFLOW_FLATTEN_PARAMS, with nothing to flatten, says so."""
    import datasets
    from mlflow.tracking import MlflowClient
    from trl import GRPOConfig

    from grpolab import GrpoLabTrainer
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.chdir(tmp_path)   # MLflow's default artifact root (trl_config.json) is ./mlruns
    for key, value in {"MLFLOW_TRACKING_URI": uri, "MLFLOW_EXPERIMENT_NAME": "settings", "MLFLOW_MAX_LOG_PARAMS": "5",
                       "MLFLOW_TAGS": '{"team": "rl"}', "MLFLOW_FLATTEN_PARAMS": "true"}.items():
        monkeypatch.setenv(key, value)
    args = GRPOConfig(output_dir=str(tmp_path / "out"), report_to="mlflow", run_name="mine", max_steps=1,
                      per_device_train_batch_size=4, num_generations=4, max_completion_length=4, use_cpu=True,
                      bf16=False, save_strategy="no", disable_tqdm=True)
    trainer = GrpoLabTrainer(model=str(tiny_model_dir), reward_funcs=length, args=args,
                             train_dataset=datasets.Dataset.from_dict({"prompt": ["1+1=", "2+2="]}), correctness=never)
    with pytest.warns(UserWarning, match="MLFLOW_FLATTEN_PARAMS has no effect on a GrpoLabTrainer run") as record:
        trainer.train()
    assert [Path(w.filename) for w in record if "MLFLOW_FLATTEN_PARAMS" in str(w.message)] == [Path(__file__)]
    client = MlflowClient(uri)
    [run] = client.search_runs([client.get_experiment_by_name("settings").experiment_id])
    assert run.info.run_name == "mine" and run.data.tags["team"] == "rl"
    assert len(run.data.params) == 5 and run.data.params["method.name"] == "trl:dapo"


def test_a_run_attached_through_mlflow_run_id_keeps_its_name(tiny_model_dir, tmp_path, monkeypatch):
    """MLFLOW_RUN_ID attaches the trainer to an existing run, as in transformers: MLflow would
    rename that run to any name it is given, so grpolab gives none (the orchestrator's name stays).
    MLFLOW_FLATTEN_PARAMS=false asks for nothing and draws no warning."""
    import warnings

    import datasets
    from mlflow.tracking import MlflowClient
    from trl import GRPOConfig

    from grpolab import GrpoLabTrainer
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.chdir(tmp_path)
    client = MlflowClient(uri)
    experiment = client.create_experiment("attached")
    run_id = client.create_run(experiment, run_name="orchestrator-run-42").info.run_id
    client.set_terminated(run_id)
    for key, value in {"MLFLOW_TRACKING_URI": uri, "MLFLOW_EXPERIMENT_NAME": "attached", "MLFLOW_RUN_ID": run_id,
                       "MLFLOW_FLATTEN_PARAMS": "false"}.items():
        monkeypatch.setenv(key, value)
    args = GRPOConfig(output_dir=str(tmp_path / "out"), report_to="mlflow", max_steps=1,
                      per_device_train_batch_size=4, num_generations=4, max_completion_length=4, use_cpu=True,
                      bf16=False, save_strategy="no", disable_tqdm=True)
    trainer = GrpoLabTrainer(model=str(tiny_model_dir), reward_funcs=length, args=args,
                             train_dataset=datasets.Dataset.from_dict({"prompt": ["1+1=", "2+2="]}), correctness=never)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    assert not [w for w in caught if "MLFLOW_FLATTEN_PARAMS" in str(w.message)]
    run = client.get_run(run_id)
    assert run.info.run_name == "orchestrator-run-42"
    assert run.data.params["method.name"] == "trl:dapo" and "reward/mean" in run.data.metrics


def test_tiny_model_writes_a_local_model_and_refuses_a_folder_it_did_not_write(tmp_path):
    import grpolab
    from grpolab.world.models import load_model
    path = grpolab.tiny_model(tmp_path / "m", seed=3)
    model, tokenizer = load_model(Path(path))
    assert sum(p.numel() for p in model.parameters()) < 200_000 and tokenizer.decode(tokenizer("12+3=")["input_ids"]) == "12+3="
    assert grpolab.tiny_model(path, seed=3) == path                    # its own folder: rewritten
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "weights.bin").write_text("x")
    with pytest.raises(grpolab.ConfigError, match=r"exists and is not a folder tiny_model wrote"):
        grpolab.tiny_model(tmp_path / "mine")
    with pytest.raises(grpolab.ConfigError, match=r"unknown preset 'huge'; valid: tiny, small, medium"):
        grpolab.tiny_model(tmp_path / "n", preset="huge")
