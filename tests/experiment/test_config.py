"""Bad input fails before any model is loaded, names the key and the valid choices, exits 2,
and creates no MLflow run."""

import subprocess
import sys

import pytest
import yaml

from grpolab.experiment.config import build_config, load_experiment
from grpolab.errors import ConfigError, NotImplementedMethodError

BASE = {"name": "t", "method": "grpo", "task": {"name": "addition"}, "model": {"preset": "tiny"}}


def cfg(**over):
    data = yaml.safe_load(yaml.safe_dump(BASE))
    for key, value in over.items():
        section, _, sub = key.partition("__")
        if sub:
            data.setdefault(section, {})[sub] = value
        else:
            data[section] = value
    return build_config(data)


@pytest.mark.parametrize("over, needle", [
    ({"bogus": 1}, "bogus: unknown key; valid: name, seed, method"),
    ({"train__stepz": 3}, "train.stepz: unknown key (did you mean 'steps'?); valid: steps"),
    ({"method": "grpoo"}, "unknown method 'grpoo' (did you mean 'grpo'?); valid: grpo, dr_grpo"),
    ({"task": {"name": "division"}}, "unknown task 'division'; valid: addition"),
    ({"task": {"name": "addition", "digitz": 2}}, "task.digitz: not a parameter of task 'addition'; valid: digits"),
    ({"model": {"preset": "huge"}}, "unknown preset 'huge'; valid: tiny, small, medium"),
    ({"train__steps": "ten"}, "train.steps: expected int, got str"),
    ({"train__group_size": 1}, "train.group_size: must be >= 2, got 1"),
    ({"method": {"base": "grpo", "eps_low": 0.3, "eps_high": 0.2}}, "eps_high (0.2) < method.eps_low (0.3)"),
    ({"method": {"base": "grpo", "advantage": "magic"}}, "method.advantage: unknown value 'magic'; valid: group_std"),
    ({"method": {"base": "grpo", "kl_coef": "lots"}}, "method.kl_coef: expected float"),
    ({"method": "gdpo"}, "has 1 component; use e.g. task.name=addition_format"),
    ({"method": {"base": "gdpo", "kl_coef": 0.01, "kl_placement": "reward"}, "task": {"name": "addition_format"}},
     "a reward-side KL would be one more component"),
    ({"method": {"base": "reinforce_pp", "kl_placement": "loss"}}, "folds the KL into the reward"),
    ({"method": {"base": "dapo", "sampling": "zero_variance_filter", "aggregation": "seq_mean_token_mean"}},
     "zero_variance_filter drops completions from the token normaliser"),
    ({"train__prompts_per_rollout": 3, "train__minibatches": 5}, "must split evenly into minibatches x grad_accum"),
    ({"method": {"base": "group_dpo"}, "train__minibatches": 2}, "group_dpo pairs completions within a group"),
    ({"warm_start__band": [0.7, 0.2]}, "warm_start.band: need 0 <= low < high <= 1"),
    ({"seed": -1}, "seed: expected an integer from 0 to 4294967295, got -1"),
    ({"seed": 2 ** 32}, "seed: expected an integer from 0 to 4294967295, got 4294967296"),
    ({"model": {"path": "/nonexistent/model"}, "train__steps": 2}, "model.path: '/nonexistent/model' is not a local model directory"),
])
def test_validation_messages(over, needle):
    with pytest.raises(ConfigError) as err:
        cfg(**over)
    assert needle in str(err.value)


def test_planned_methods_raise_never_run_something_else():
    from grpolab.method.registry import Method
    planned = Method("planned", "Planned", "nowhere yet", missing="needs an axis that does not exist")
    with pytest.raises(NotImplementedMethodError, match="not implemented yet"):
        planned.spec()


def test_user_defined_method_from_axes_and_overrides():
    c = cfg(method={"name": "mine", "advantage": "group_mean", "aggregation": "token_mean", "eps_high": 0.28})
    assert c.method_name == "mine" and c.spec.advantage == "group_mean" and c.spec.eps_high == 0.28
    c2 = cfg(method={"base": "dr_grpo", "eps_high": 0.28})
    assert c2.spec.aggregation == "seq_mean_token_sum_norm" and c2.spec.eps_high == 0.28
    with pytest.raises(ConfigError, match="is a registered method"):
        cfg(method={"name": "grpo", "advantage": "group_mean"})


def test_method_regime_defaults_apply_and_can_be_overridden():
    assert cfg(method="gspo").train.minibatches == 2
    assert cfg(method="gspo", train__minibatches=1).train.minibatches == 1


def test_no_reuse_warns_that_clip_has_no_effect():
    with pytest.warns(UserWarning, match="eps_low/eps_high have no effect"):
        c = cfg()
    assert c.warnings
    c2 = cfg(train__minibatches=2)
    assert not any("no effect" in w for w in c2.warnings)


def test_cli_overrides(tmp_path):
    path = tmp_path / "e.yaml"
    path.write_text(yaml.safe_dump(BASE))
    c = load_experiment(path, ["train.steps=7", "method.eps_high=0.28", "seed=3"])
    assert c.train.steps == 7 and c.spec.eps_high == 0.28 and c.seed == 3 and c.method_name == "grpo"


@pytest.mark.parametrize("override, needle", [
    ("train.group_size=1", "train.group_size"), ("method=nope", "unknown method 'nope'"),
    ("task.name=nope", "unknown task"), ("bogus=1", "bogus: unknown key"),
])
def test_cli_bad_input_exit_2_one_line_no_mlflow_run(tmp_path, override, needle):
    state = tmp_path / "state"
    proc = subprocess.run([sys.executable, "-m", "grpolab.cli", "--state", str(state), "run",
                           "experiments/smoke.yaml", override], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    error_lines = [l for l in proc.stderr.splitlines() if l.startswith("error:")]
    assert len(error_lines) == 1 and needle in error_lines[0]
    assert not (state / "mlflow.db").exists()          # no MLflow run (not even a store) was created
    assert not (state / "models").exists()             # no model was built or loaded
