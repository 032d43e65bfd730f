"""``train.trl:``: any GRPOConfig field grpolab does not own reaches TRL unchanged; owned, unknown
and mistyped fields exit 2 at parse time (without importing TRL), naming the key."""

from __future__ import annotations

import subprocess
import sys

import pytest
from mlflow.tracking import MlflowClient

from conftest import REPO
from grpolab.errors import ConfigError
from grpolab.experiment.config import build_config
from grpolab.experiment.runner import run_experiment
from grpolab.tracking.recorder import tracking_uri
from grpolab.trainer import grpo_config_fields
from grpolab.trainer.trl_passthrough import generate_fields, generate_report_to

PASSED = {"warmup_steps": 0.05, "lr_scheduler_type": "cosine", "top_p": 0.95, "weight_decay": 0.1}


def _data(trl=None, tracking=None):
    return {"name": "passthrough", "method": "grpo", "task": {"name": "addition", "digits": 2},
            "model": {"preset": "tiny"}, "warm_start": {"enabled": False}, "seed": 0,
            "train": {"steps": 2, "group_size": 4, "prompts_per_rollout": 4, "learning_rate": 0.002,
                      **({"trl": trl} if trl is not None else {})},
            "eval": {"every": 0, "prompts": 4, "k": 2}, "tracking": {"flush_every": 2, **(tracking or {})}}


def test_committed_field_list_matches_the_installed_trl():
    assert grpo_config_fields.GRPO_CONFIG_FIELDS == generate_fields(), (
        "regenerate: python -m grpolab.trainer.trl_passthrough")
    assert grpo_config_fields.REPORT_TO_NAMES == generate_report_to()
    assert grpo_config_fields.GRPO_CONFIG_FIELDS["top_p"] == ("float", ("float",), ())
    assert "constant_with_warmup" in grpo_config_fields.GRPO_CONFIG_FIELDS["lr_scheduler_type"][2]


@pytest.mark.parametrize("trl, message", [
    ({"loss_type": "dapo"}, "train.trl.loss_type: grpolab sets this GRPOConfig field; use method"),
    ({"beta": 0.1}, "train.trl.beta: grpolab sets this GRPOConfig field; use method"),
    ({"max_steps": 10}, "train.trl.max_steps: grpolab sets this GRPOConfig field; use train.steps"),
    ({"report_to": ["wandb"]}, "use tracking.report_to"),
    ({"logging_first_step": True}, "use one log window per rollout"),
    ({"top_pp": 0.9}, "train.trl.top_pp: not a field of TRL 1.16's GRPOConfig / TrainingArguments (did you mean 'top_p'?)"),
    ({"warmup_ratio": 0.05}, "train.trl.warmup_ratio: not a field of TRL 1.16's GRPOConfig / TrainingArguments; use "
                             "warmup_steps"),
    ({"top_p": "high"}, "train.trl.top_p: expected float, got str 'high'"),
    ({"weight_decay": True}, "train.trl.weight_decay: expected float, got bool True"),
    ({"lr_scheduler_type": "cosnie"}, "train.trl.lr_scheduler_type: unknown value 'cosnie' (did you mean 'cosine'?)"),
])
def test_owned_unknown_and_mistyped_fields_are_refused(trl, message):
    with pytest.raises(ConfigError) as err:
        build_config(_data(trl))
    assert message in str(err.value)


def test_int_for_a_float_field_and_a_dict_field_are_accepted():
    cfg = build_config(_data({"warmup_steps": 3, "generation_kwargs": {"repetition_penalty": 1.1}, "min_p": None}))
    assert cfg.train.trl["warmup_steps"] == 3


def test_cli_refuses_a_misspelled_field_with_exit_2_without_importing_trl(tmp_path):
    import yaml
    exp = tmp_path / "exp.yaml"
    exp.write_text(yaml.safe_dump(_data({"lr_sheduler_type": "cosine"})))
    code = ("import sys; from grpolab.cli import main\n"
            "code = main(['--state', sys.argv[2], 'run', sys.argv[1]])\n"
            "print('EXIT', code, 'trl' in sys.modules, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(exp), str(tmp_path / "state")], capture_output=True, text=True, cwd=REPO)
    assert "train.trl.lr_sheduler_type" in out.stderr and "did you mean 'lr_scheduler_type'?" in out.stderr, out.stderr
    assert "EXIT 2 False False" in out.stdout, (out.stdout, out.stderr)


def test_values_reach_trls_args_unchanged_and_are_logged(shared_state):
    seen = {}
    cfg = build_config(_data(PASSED))
    result = run_experiment(cfg, shared_state, on_trainer=lambda trainer: seen.update(args=trainer.args))
    args = seen["args"]
    assert (args.warmup_steps, args.lr_scheduler_type.value, args.top_p, args.weight_decay) == (0.05, "cosine", 0.95, 0.1)
    assert args.top_k == 0 and result.steps == 2   # grpolab's default where train.trl says nothing
    params = MlflowClient(tracking_uri(shared_state)).get_run(result.run_id).data.params
    assert {k: params[f"train.trl.{k}"] for k in PASSED} == {k: str(v) for k, v in PASSED.items()}


def test_grpolab_defaults_yield_to_train_trl(tmp_path):
    from grpolab.experiment.runner import _grpo_args
    from grpolab.tasks import make_task
    cfg = build_config(_data({"top_k": 50, "lr_scheduler_type": "linear", "warmup_steps": 2}))
    args = _grpo_args(cfg, make_task("addition", digits=2), tmp_path)
    assert (args.top_k, args.lr_scheduler_type.value, args.warmup_steps) == (50, "linear", 2)
    default = _grpo_args(build_config(_data()), make_task("addition", digits=2), tmp_path)
    assert (default.top_k, default.lr_scheduler_type.value, default.warmup_steps) == (0, "constant", 0)


def test_dotted_override_keys_reach_train_trl():
    """Ladder rung changes, search-space keys and --set all name train.trl.<field> as a dotted key."""
    from grpolab.experiment.config import apply_overrides
    cfg = build_config(apply_overrides(_data({"top_p": 1.0}), ["train.trl.top_p=0.9", "train.trl.min_p=0.05"]))
    assert cfg.train.trl == {"top_p": 0.9, "min_p": 0.05}
    with pytest.raises(ConfigError, match="train.trl.epsilon: grpolab sets this GRPOConfig field; use method"):
        build_config(apply_overrides(_data(), ["train.trl.epsilon=0.3"]))
