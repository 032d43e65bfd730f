"""Fail loudly when TRL changes under us: grpolab.trainer.grpo_trainer overrides private GRPOTrainer methods."""

import inspect

import trl
from trl import GRPOConfig, GRPOTrainer


def _params(fn):
    return list(inspect.signature(fn).parameters)


def test_trl_is_the_pinned_version():
    assert trl.__version__ == "1.16.0", "grpolab.trainer.grpo_trainer is written against TRL 1.16.0 internals; re-check them"


def test_private_override_points_keep_their_signatures():
    assert _params(GRPOTrainer._calculate_rewards) == ["self", "inputs", "prompts", "completions", "completion_ids_list"]
    assert _params(GRPOTrainer._generate_and_score_completions) == ["self", "inputs"]
    assert _params(GRPOTrainer._compute_loss) == ["self", "model", "inputs"]
    # GrpoLabTrainer times these for step_times.StepTimes, and reads TRL's micro-step counter after training_step
    assert _params(GRPOTrainer._generate) == ["self", "prompts"]
    assert _params(GRPOTrainer.training_step) == ["self", "model", "inputs", "num_items_in_batch"]
    assert "self._step += 1" in inspect.getsource(GRPOTrainer.training_step)
    logps = _params(GRPOTrainer._get_per_token_logps_and_entropies)
    assert logps[:5] == ["self", "model", "input_ids", "attention_mask", "logits_to_keep"] and "compute_entropy" in logps


def test_behaviours_the_trainer_relies_on():
    src = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    for needle in ('"num_items_in_batch": num_items_in_batch', "self._calculate_rewards(", "mask_truncated_completions",
                   'output["old_per_token_logps"]', 'output["ref_per_token_logps"]'):
        assert needle in src, needle
    # GrpoLabTrainer._outside_the_rollout (ReMax's greedy scoring) swaps the reward-log buffers TRL flushes here; the
    # greedy completion (EstimatorInputs) starts from TRL's generation settings and end tokens
    assert "self._pending_extra_logs.clear()" in src and "self._pending_metrics.clear()" in src
    init = inspect.getsource(GRPOTrainer.__init__)
    assert "self.eos_token_ids = eos_token_ids" in init and "self.generation_kwargs = generation_kwargs" in init
    prep = inspect.getsource(GRPOTrainer._prepare_inputs)
    assert "shuffle_sequence_dict" in prep and "split_tensor_dict" in prep  # rows are shuffled, then split
    assert GRPOTrainer.loss_is_scaled_for_ga is True  # so grpolab divides by gradient accumulation itself
    cfg = GRPOConfig(output_dir="/tmp/x", use_cpu=True, report_to="none")
    assert cfg.use_bias_correction_kl is True  # TRL's default KL gradient differs from the GRPO paper's
    assert cfg.loss_type == "dapo" and cfg.beta == 0.0  # defaults a "naive GRPO" row must override
    # GrpoLabTrainer.log drops the curves TRL would log as None (mean of no non-NaN value)
    assert _params(GRPOTrainer.log) == ["self", "logs", "start_time"]
    assert "if valid else None" in inspect.getsource(GRPOTrainer.log)
    # mlflow_report.GrpoLabMlflowCallback hands MLflowCallback.setup grpolab's run name and params
    from transformers.integrations import MLflowCallback
    setup = inspect.getsource(MLflowCallback.setup)
    assert "run_name=args.run_name" in setup and "args.to_dict()" in setup and "model.config.to_dict()" in setup


def test_every_grpo_config_field_is_classified():
    """Every GRPOConfig field (TrainingArguments' included) is in grpolab's one table
    (``trl_fields.TRL_FIELDS``: an axis, passed through to TRL, or refused): a TRL upgrade that adds
    a field fails here until grpolab decides what it means (a new loss-only knob would otherwise be
    silently inert under grpolab's loss)."""
    import dataclasses

    from transformers import TrainingArguments

    from grpolab.trainer.trl_fields import AXIS, REFUSED, TRL, TRL_FIELDS, trl_field
    fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    unclassified = sorted(name for name in fields if trl_field(name) is None)
    assert unclassified == [], f"new GRPOConfig fields: classify them in trl_fields.TRL_FIELDS: {unclassified}"
    own = fields - {f.name for f in dataclasses.fields(TrainingArguments)}
    assert own - set(TRL_FIELDS) == set(), "GRPOConfig's own fields are each listed explicitly"
    assert set(TRL_FIELDS) - fields == set(), "fields TRL no longer has"
    assert {AXIS, TRL} <= {e.kind for e in TRL_FIELDS.values()} <= {AXIS, TRL, REFUSED}
    assert all(e.note for e in TRL_FIELDS.values())
    assert all(callable(e.to_axes) for e in TRL_FIELDS.values() if e.kind == AXIS)
