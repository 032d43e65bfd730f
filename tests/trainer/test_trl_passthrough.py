"""``train.trl:``: any GRPOConfig field grpolab does not own reaches TRL unchanged; owned, unknown
and mistyped fields exit 2 at parse time (without importing TRL), naming the key."""

from __future__ import annotations

import subprocess
import sys

import pytest
import vllm_double
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
    ({"trackio_static_space_id": 3}, "train.trl.trackio_static_space_id: expected str | null | bool, got int 3"),
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
    from grpolab.experiment.overrides import apply_overrides
    cfg = build_config(apply_overrides(_data({"top_p": 1.0}), ["train.trl.top_p=0.9", "train.trl.min_p=0.05"]))
    assert cfg.train.trl == {"top_p": 0.9, "min_p": 0.05}
    with pytest.raises(ConfigError, match="train.trl.epsilon: grpolab sets this GRPOConfig field; use method"):
        build_config(apply_overrides(_data(), ["train.trl.epsilon=0.3"]))


def _owned_values(args) -> dict:
    from grpolab.trainer.trl_passthrough import OWNED
    return {name: getattr(args, name, None) for name in OWNED}


def test_every_field_grpolab_sets_or_an_alias_copies_into_is_owned_or_overridable(tmp_path, monkeypatch):
    """A field the runner sets is owned (train.trl refuses it) or one of its overridable defaults;
    and no unowned field changes an owned one (a deprecated alias __post_init__ copies)."""
    import dataclasses
    import warnings

    from trl import GRPOConfig

    from grpolab.experiment.runner import _grpo_args
    from grpolab.tasks import make_task
    from grpolab.trainer.trl_passthrough import refusal
    vllm_double.install(monkeypatch)
    task = make_task("addition", digits=2)
    data = _data()
    data["train"]["gradient_checkpointing"] = True
    data["generation"] = {"backend": "vllm", "is_correction": "token_truncate", "is_max": 5.0}
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)   # grpolab passes no deprecated field
        args = _grpo_args(build_config(data), task, tmp_path)
    overridable = {"lr_scheduler_type", "warmup_steps", "top_k", "disable_tqdm", "log_completions"}
    defaults = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False)   # owned: any machine
    changed = [f.name for f in dataclasses.fields(GRPOConfig) if f.init
               and getattr(args, f.name) != getattr(defaults, f.name)]
    assert "activation_checkpointing_kwargs" in changed and "vllm_importance_sampling_clip_max" in changed
    assert [n for n in changed if refusal(n) is None and n not in overridable] == []
    probes = {"bool": True, "float": 0.5, "int": 3, "dict": {"use_reentrant": True}}
    aliases = set()
    for checkpointing in (True, False):
        data["train"]["gradient_checkpointing"] = checkpointing
        cfg = build_config(data)
        base = _owned_values(_grpo_args(cfg, task, tmp_path))
        for name, (_, kinds, _) in grpo_config_fields.GRPO_CONFIG_FIELDS.items():
            kind = next((k for k in kinds if k in probes), None)
            if kind is None or name in cfg.train.trl or getattr(defaults, name) is not None:   # an alias is unset
                continue
            cfg.train.trl.clear()
            cfg.train.trl[name] = probes[kind]   # as if train.trl had set it, past the parse-time check
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    probed = _grpo_args(cfg, task, tmp_path)
            except Exception:   # a value the field refuses cannot change anything either
                continue
            if _owned_values(probed) != base:
                aliases.add(name)
        cfg.train.trl.clear()
    assert {"gradient_checkpointing_kwargs", "vllm_importance_sampling_cap"} <= aliases
    assert [n for n in aliases if refusal(n) is None] == []


@pytest.mark.parametrize("trl, message", [
    ({"activation_checkpointing": True}, "use train.gradient_checkpointing"),
    ({"activation_checkpointing_kwargs": {"use_reentrant": True}}, "use train.gradient_checkpointing"),
    ({"vllm_importance_sampling_cap": 5.0}, "use generation.is_max"),
    ({"model_init_kwargs": {"dtype": "bfloat16"}}, "use model.* for model loading"),
    ({"trust_remote_code": True}, "use model.* for model loading"),
    ({"chat_template_kwargs": {"enable_thinking": False}}, "the prompt format is task.*"),
    ({"hub_token": "hf_secret"}, "set the HF_TOKEN environment variable"),
    ({"eval_delay": 1.0}, "use eval.*"), ({"load_best_model_at_end": True}, "use eval.*"),
    ({"num_generations_eval": 2}, "use eval.*"), ({"per_device_eval_batch_size": 2}, "use eval.*"),
    ({"auto_find_batch_size": True}, "global batch"), ({"enable_jit_checkpoint": True}, "stop signals"),
])
def test_half_applied_inert_and_secret_fields_are_refused(trl, message):
    with pytest.raises(ConfigError) as err:
        build_config(_data(trl))
    assert f"train.trl.{next(iter(trl))}: " in str(err.value) and message in str(err.value)


def test_a_credential_named_field_is_refused_and_token_counts_are_not():
    from grpolab.trainer.trl_passthrough import refusal
    assert "secret" in refusal("wandb_api_secret") and "secret" in refusal("db_password")
    assert refusal("average_tokens_across_devices") is None and refusal("include_num_input_tokens_seen") is None


def test_report_to_mlflow_is_refused_with_advice_that_holds():
    from grpolab.trainer.trl_passthrough import check_report_to
    with pytest.raises(ConfigError) as err:
        check_report_to(["mlflow"])
    assert "leave it out" in str(err.value) and "tracking.enabled" not in str(err.value)


@pytest.mark.parametrize("study, expected", [
    # Oat (Dr. GRPO's trainer): AdamW betas (0.9, 0.95), no weight decay, a constant schedule without warm-up
    ("dr_grpo_length_qwen.yaml", {"adam_beta2": 0.95, "warmup_steps": 0, "lr_scheduler_type": "constant"}),
    # the DAPO paper (not verl's recipe): 20 rollouts x 16 updates of warm-up, no weight decay stated
    ("dapo_table1_qwen.yaml", {"warmup_steps": 320, "lr_scheduler_type": "constant_with_warmup"}),
])
def test_paper_scale_studies_set_their_sources_optimiser(study, expected):
    import yaml

    from grpolab.trainer.trl_passthrough import check_trl_settings
    trl = yaml.safe_load((REPO / "studies" / study).read_text())["base"]["train"]["trl"]
    assert {k: trl.get(k) for k in expected} == expected and "weight_decay" not in trl
    check_trl_settings(trl)
