"""Real short runs, read back from the MLflow store: every curve, tags, params, artifacts, and
honest statuses (FINISHED, FAILED with the reason, KILLED on SIGTERM and SIGINT)."""

import math
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml
from mlflow.tracking import MlflowClient

from grpolab.experiment.config import build_config
from grpolab.tracking.metric_catalog import required_keys
from grpolab.experiment.runner import run_experiment
from grpolab.tracking.naming import clean_metric_name
from grpolab.tracking.recorder import tracking_uri
from conftest import REPO, share_models


def small_cfg(name, **train):
    data = {"name": name, "method": {"base": "grpo", "eps_low": 0.02, "eps_high": 0.02},
            "task": {"name": "addition", "digits": 2}, "model": {"preset": "tiny"},
            "train": {"steps": 4, "group_size": 8, "prompts_per_rollout": 8, "minibatches": 2,
                      "learning_rate": 0.002, **train},
            "eval": {"every": 2, "prompts": 16, "k": 4}, "tracking": {"flush_every": 2}}
    return build_config(data)


def client(state):
    return MlflowClient(tracking_uri(state))


def runs_named(state, name):
    c = client(state)
    exp = c.get_experiment_by_name("grpolab")
    return c.search_runs([exp.experiment_id], f"attributes.run_name = '{name}'") if exp else []


def test_short_run_records_every_curve_tag_param_and_artifact(shared_state):
    result = run_experiment(small_cfg("readback"), shared_state)
    c = client(shared_state)
    run = c.get_run(result.run_id)
    assert run.info.status == "FINISHED"
    metrics = run.data.metrics
    for key in required_keys():
        assert clean_metric_name(key) in metrics, key
    # clipping binds because the second minibatch of each rollout is off-policy
    # loss-side curves: once per generation batch (both passes, fresh and reused), so no zigzag
    history = c.get_metric_history(result.run_id, "clip/region_fraction")
    assert [m.step for m in history] == [2, 4] and min(m.value for m in history) > 0
    assert "clip/high_old_prob" in metrics or "clip/low_fraction" in metrics
    kl = c.get_metric_history(result.run_id, "kl")
    assert [m.step for m in kl] == [2, 4] and min(m.value for m in kl) > 0
    assert metrics["entropy"] > 0 and metrics["trained/entropy"] > 0
    tokens = c.get_metric_history(result.run_id, "tokens/cumulative")
    # one rollout per two optimizer steps (minibatches=2): every curve of a rollout, rollout-side and
    # loss-side, is logged at the rollout's last optimizer step (docs/metrics.md, "One step axis")
    assert [m.step for m in tokens] == [2, 4] and tokens[-1].value > tokens[0].value
    evals = c.get_metric_history(result.run_id, "eval/pass_at_1")
    assert [m.step for m in evals] == [0, 2, 4]
    # the parameters' distance from their start, at each evaluation: 0 before the first step, then growing
    moved = [(m.step, m.value) for m in c.get_metric_history(result.run_id, "policy/param_change")]
    assert [s for s, _ in moved] == [0, 2, 4] and moved[0][1] == 0.0 and 0 < moved[1][1] < moved[2][1] < 1
    assert result.train_curves["policy/param_change"] == moved
    tags = run.data.tags
    for key in ("grpolab.method", "grpolab.spec_hash", "grpolab.git_commit", "grpolab.seed", "versions.torch",
                "versions.trl", "versions.transformers", "grpolab.overrides"):
        assert tags.get(key), key
    assert tags["grpolab.method"] == "grpo + eps_low=0.02, eps_high=0.02" and tags["grpolab.method_base"] == "grpo"
    assert tags["versions.trl"] == "1.16.0" and tags["mlflow.source.git.commit"] == tags["grpolab.git_commit"]
    assert run.data.params["method.eps_high"] == "0.02" and run.data.params["train.minibatches"] == "2"
    artifacts = {a.path for a in c.list_artifacts(result.run_id)}
    assert {"config.json", "samples.json", "warm_start.json", "completions.jsonl", "eval_completions.jsonl"} <= artifacts
    assert result.final_eval["eval/pass_at_1"] >= 0 and result.steps == 4
    from test_completions import check_time_curves_and_tables
    check_time_curves_and_tables(c, result.run_id, shared_state)


def test_reward_function_error_ends_failed_with_reason(shared_state, monkeypatch):
    from grpolab.world import generated

    def boom(self, example, completion):
        raise RuntimeError("reward service exploded")
    monkeypatch.setattr(generated.GeneratedTask, "score", boom)
    with pytest.raises(RuntimeError, match="exploded"):
        run_experiment(small_cfg("fails"), shared_state)
    (run,) = runs_named(shared_state, "fails-s0")
    assert run.info.status == "FAILED"
    assert "reward service exploded" in run.data.tags["grpolab.error"]


def test_non_finite_loss_stops_the_run_as_failed(shared_state, monkeypatch):
    from grpolab.world import generated
    # an infinite reward (NaN is TRL's "None: unscorable", which is skipped, not a failure)
    monkeypatch.setattr(generated.GeneratedTask, "score", lambda self, e, c: {"correct": math.inf})
    from grpolab.errors import NonFiniteLossError
    with pytest.raises(NonFiniteLossError):
        run_experiment(small_cfg("nan"), shared_state)
    (run,) = runs_named(shared_state, "nan-s0")
    assert run.info.status == "FAILED" and "non-finite loss" in run.data.tags["grpolab.error"]


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["SIGTERM", "SIGINT"])
def test_signal_ends_killed(tmp_path, tmp_path_factory, sig, code):
    # its own state folder (in the full suite a SIGINTed run in the session's shared state once kept
    # going past the 120 s below), with the session's model cache: the warm start is not retrained
    shared_state = share_models(tmp_path / "state", tmp_path_factory)
    from grpolab.tracking.stores import prepare_stores
    prepare_stores(shared_state)   # created before the child and this test's reader race to create it
    name = f"kill-{sig.name}"
    env = {**os.environ, "GRPOLAB_STATE": str(shared_state)}
    proc = subprocess.Popen([sys.executable, "-m", "grpolab.cli", "run", str(REPO / "experiments/smoke.yaml"),
                             "train.steps=100000", f"name={name}", "eval.every=0"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=interactive_signals)
    deadline = time.time() + 240
    while time.time() < deadline:
        runs = runs_named(shared_state, f"{name}-s0") if (shared_state / "mlflow.db").exists() else []
        if runs and c_metric(shared_state, runs[0].info.run_id):
            break
        time.sleep(1)
    else:
        proc.kill()
        pytest.fail("run never started training")
    proc.send_signal(sig)
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"still running 120 s after {sig.name}; its stderr ends: {err[-3000:]}")
    assert proc.returncode == code, err[-2000:]
    (run,) = runs_named(shared_state, f"{name}-s0")
    assert run.info.status == "KILLED"
    assert "grpolab.error" in run.data.tags


def interactive_signals():
    """The child starts with SIGINT at its default, as a program run from a terminal does. An
    ignored SIGINT is inherited (and Python keeps it ignored, as for background jobs), and in the
    full suite the children of this test were seen ignoring it: a Ctrl-C test must not depend on
    what earlier tests' libraries did to this process (conftest reports any such test)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def c_metric(state, run_id):
    return client(state).get_metric_history(run_id, "tokens/cumulative")


def test_platform_is_a_source_root_not_a_package():
    import platform
    assert not (REPO / "platform" / "__init__.py").exists()
    assert platform.system() in ("Linux", "Darwin", "Windows")
    import grpolab
    assert "platform/grpolab" in grpolab.__file__.replace(os.sep, "/")


def test_readme_commands_are_the_ci_commands():
    readme = (REPO / "README.md").read_text()
    ci = (REPO / ".ci" / "run").read_text()
    assert "make test" in readme and "make run" in readme and "make test" in ci
    for exp in (REPO / "experiments").glob("*.yaml"):
        data = yaml.safe_load(exp.read_text())
        build_config({**data, "name": data.get("name", exp.stem)})  # every shipped experiment validates


def test_local_model_directory_and_local_dataset(shared_state, tiny_model_dir, tmp_path):
    import json
    rows = tmp_path / "rows.jsonl"
    rows.write_text("\n".join(json.dumps({"prompt": f"{i}+{i}=", "answer": str(2 * i)}) for i in range(60)))
    cfg = build_config({"name": "local", "method": "dr_grpo", "task": {"name": "local_dataset", "path": str(rows)},
                        "model": {"path": str(tiny_model_dir)},
                        "train": {"steps": 2, "group_size": 4, "prompts_per_rollout": 4},
                        "eval": {"every": 0, "prompts": 6, "k": 2, "param_change": False}})
    result = run_experiment(cfg, shared_state)
    run = client(shared_state).get_run(result.run_id)
    assert run.info.status == "FINISHED" and result.warm_start == {"source": "path"}
    assert run.data.params["model.path"] == str(tiny_model_dir) and run.data.params["task.name"] == "local_dataset"
    # eval.param_change false (theta_0 not kept in host memory): the curve is absent and the tag says why
    assert "policy/param_change" not in run.data.metrics and "policy/param_change" not in result.train_curves
    assert run.data.tags["grpolab.param_change"] == "not measured: eval.param_change is false"
