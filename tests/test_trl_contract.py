"""Fail loudly when TRL changes under us: grpolab.trainer overrides private GRPOTrainer methods."""

import inspect

import trl
from trl import GRPOConfig, GRPOTrainer


def _params(fn):
    return list(inspect.signature(fn).parameters)


def test_trl_is_the_pinned_version():
    assert trl.__version__ == "1.16.0", "grpolab.trainer is written against TRL 1.16.0 internals; re-check them"


def test_private_override_points_keep_their_signatures():
    assert _params(GRPOTrainer._calculate_rewards) == ["self", "inputs", "prompts", "completions", "completion_ids_list"]
    assert _params(GRPOTrainer._generate_and_score_completions) == ["self", "inputs"]
    assert _params(GRPOTrainer._compute_loss) == ["self", "model", "inputs"]
    logps = _params(GRPOTrainer._get_per_token_logps_and_entropies)
    assert logps[:5] == ["self", "model", "input_ids", "attention_mask", "logits_to_keep"] and "compute_entropy" in logps


def test_behaviours_the_trainer_relies_on():
    src = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    for needle in ('"num_items_in_batch": num_items_in_batch', "self._calculate_rewards(", "mask_truncated_completions",
                   'output["old_per_token_logps"]', 'output["ref_per_token_logps"]'):
        assert needle in src, needle
    prep = inspect.getsource(GRPOTrainer._prepare_inputs)
    assert "shuffle_sequence_dict" in prep and "split_tensor_dict" in prep  # rows are shuffled, then split
    assert GRPOTrainer.loss_is_scaled_for_ga is True  # so grpolab divides by gradient accumulation itself
    cfg = GRPOConfig(output_dir="/tmp/x", use_cpu=True, report_to="none")
    assert cfg.use_bias_correction_kl is True  # TRL's default KL gradient differs from the GRPO paper's
    assert cfg.loss_type == "dapo" and cfg.beta == 0.0  # defaults a "naive GRPO" row must override


# GRPOConfig's own fields that act outside the loss and advantages grpolab replaces: TRL applies
# them as they are (model loading, generation, vLLM, reference sync, logging).
PASSED_THROUGH = {
    "model_init_kwargs", "trust_remote_code", "disable_dropout", "cast_lm_head_to_fp32", "num_generations",
    "num_generations_eval", "max_completion_length", "ds3_gather_for_generation", "shuffle_dataset",
    "pad_to_multiple_of", "temperature", "top_p", "top_k", "min_p", "generation_kwargs", "chat_template_kwargs",
    "repetition_penalty", "cache_implementation", "use_vllm", "vllm_mode", "vllm_model_impl",
    "vllm_enable_sleep_mode", "vllm_structured_outputs_regex", "vllm_server_base_url", "vllm_server_host",
    "vllm_server_port", "vllm_server_timeout", "vllm_group_port", "vllm_gpu_memory_utilization",
    "vllm_max_model_length", "vllm_tensor_parallel_size", "sync_ref_model", "ref_model_mixup_alpha",
    "ref_model_sync_steps", "max_tool_calling_iterations", "vllm_importance_sampling_correction",
    "vllm_importance_sampling_mode", "vllm_importance_sampling_clip_max", "vllm_importance_sampling_clip_min",
    "vllm_importance_sampling_cap", "log_completions", "log_multimodal", "num_completions_to_print",
    "log_unique_prompts", "log_completions_hub_repo", "use_transformers_continuous_batching",
    "transformers_continuous_batching_config", "use_transformers_paged",
}


def test_every_grpo_config_field_is_mapped_refused_or_passed_through():
    """A TRL upgrade that adds a GRPOConfig field fails here until grpolab decides what it means
    (a new loss-only knob would otherwise be silently inert under grpolab's loss)."""
    import dataclasses

    from transformers import TrainingArguments

    from grpolab.dropin import REFUSED_FIELDS, resolve_method, trl_settings
    own = {f.name for f in dataclasses.fields(GRPOConfig)} - {f.name for f in dataclasses.fields(TrainingArguments)}
    mapped = set(trl_settings(resolve_method("grpo")[1])) | {
        "num_iterations", "steps_per_generation", "generation_batch_size", "reward_weights"}
    known = {"mapped": mapped, "refused": set(REFUSED_FIELDS), "passed through": PASSED_THROUGH}
    for (a, x), (b, y) in [(p, q) for p in known.items() for q in known.items() if p[0] < q[0]]:
        assert not x & y, f"listed as both {a} and {b}: {sorted(x & y)}"
    assert own - set().union(*known.values()) == set(), "new GRPOConfig fields: map, refuse or pass them through"
    assert set().union(*known.values()) - own == set(), "fields TRL no longer has"
