"""Nothing inert at run time, and TRL's own behaviour kept where grpolab adds to it (issue 25, parts 3-4):
empty or gradient-free update batches warn, then fail the run; no reward source raises as in TRL;
TRL's all-None warning still reaches the user; MoE models get TRL's router auxiliary loss; an
environment dataset needs no prompt column; one reward processing class works; TRL's loss-side
metric names are logged beside grpolab's. Tiny random models, a few steps each."""

import logging
import math
import warnings

import pytest
import torch

from grpolab import GrpoLabTrainer
from grpolab.errors import EmptyUpdatesError, EmptyUpdateWarning

from test_dropin import _args, _dataset, reward_num_unique_chars


def constant_reward(completions, **kwargs):
    return [1.0 for _ in completions]


def none_reward(completions, **kwargs):
    return [None for _ in completions]


def test_dapo_run_that_never_emits_eos_warns_then_fails_with_the_cause(shared_state):
    """DAPO's overlong filter masks every truncated completion: a model that never ends its answer
    inside the cap trains on nothing. The CLI run warns at the first such update, fails at the
    second (train.max_empty_updates: 2), and its MLflow run is FAILED with the cause."""
    from mlflow.tracking import MlflowClient

    from grpolab.experiment.config import build_config
    from grpolab.experiment.runner import run_experiment
    from grpolab.tracking.recorder import tracking_uri
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = build_config({"name": "never-eos", "method": {"base": "dapo", "sampling_filter": "reward"},
                            "task": {"name": "random_reward"}, "model": {"preset": "tiny"},
                            "warm_start": {"enabled": False}, "eval": {"every": 0, "prompts": 4, "k": 1},
                            "train": {"steps": 4, "group_size": 4, "prompts_per_rollout": 4, "max_empty_updates": 2},
                            "tracking": {"experiment": "guards"}})

    def never_eos(trainer):   # the EOS logit forced to -inf in training generation
        trainer.generation_config.suppress_tokens = [trainer.processing_class.eos_token_id]

    # recorded, then checked: an unexpected error in the run surfaces as itself (pytest.warns would
    # report it as "DID NOT WARN", as a device-mixing error did on CUDA)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(EmptyUpdatesError, match=r"2 update batches in a row .*max_empty_updates=2.*"
                                                    r"overlong filter \(method.overlong_filter"):
            run_experiment(cfg, shared_state, on_trainer=never_eos)
    empty = [str(w.message) for w in caught if issubclass(w.category, EmptyUpdateWarning)]
    assert len(empty) == 1 and "overlong filter" in empty[0]   # once, at the first
    client = MlflowClient(tracking_uri(shared_state))
    (run,) = client.search_runs([client.get_experiment_by_name("guards").experiment_id],
                                "attributes.run_name = 'never-eos-s0'")
    assert run.info.status == "FAILED"
    error = run.data.tags["grpolab.error"]
    assert error.startswith("EmptyUpdatesError") and "mask_truncated_completions" in error
    assert "8 of 8 completions hit max_completion_length" in error or "completions hit max_completion_length" in error
    assert [m.step for m in client.get_metric_history(run.info.run_id, "loss")] == [1]   # one step, then the stop


def test_zero_variance_static_groups_warn_once_and_fail_unless_disabled(tiny_model_dir, tmp_path):
    """A constant reward: every group has zero variance, Dr. GRPO (no KL) has no gradient at all."""
    kw = dict(model=str(tiny_model_dir), reward_funcs=constant_reward, train_dataset=_dataset(), method="dr_grpo")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = GrpoLabTrainer(**kw, args=_args(tmp_path, max_steps=2), max_empty_updates=0)
        trainer.train()   # 0: never fails
    assert trainer.state.global_step == 2
    empty = [w for w in caught if issubclass(w.category, EmptyUpdateWarning)]
    assert len(empty) == 1 and "2 of 2 groups have equal rewards" in str(empty[0].message)
    assert "method.sampling=static" in str(empty[0].message)
    trainer = GrpoLabTrainer(**kw, args=_args(tmp_path, max_steps=4), max_empty_updates=2)
    with pytest.warns(EmptyUpdateWarning), pytest.raises(EmptyUpdatesError, match="2 update batches in a row"):
        trainer.train()
    assert trainer.state.global_step == 1
    with pytest.raises(ValueError, match="max_empty_updates"):
        GrpoLabTrainer(**kw, args=_args(tmp_path), max_empty_updates=-1)


def test_no_reward_source_raises_as_trl_does_even_when_the_method_adds_a_reward(tiny_model_dir, tmp_path):
    for method in ("dapo", "grpo"):   # dapo brings its overlong reward: TRL's check must not count it
        with pytest.raises(ValueError, match="No reward source provided"):
            GrpoLabTrainer(model=str(tiny_model_dir), args=_args(tmp_path), train_dataset=_dataset(), method=method)


def test_trls_all_none_warning_reaches_the_user(tiny_model_dir, tmp_path, caplog):
    trainer = GrpoLabTrainer(model=str(tiny_model_dir), reward_funcs=none_reward, args=_args(tmp_path, max_steps=1),
                             train_dataset=_dataset(), method={"name": "dapo", "sampling": "static"})
    assert trainer._own_reward_columns == [1]   # overlong: never None, so TRL's own check never fires
    with caplog.at_level(logging.WARNING, logger="trl.trainer.grpo_trainer"):
        trainer.train()
    assert any("All reward functions returned None" in r.getMessage() for r in caplog.records)


def test_one_reward_processing_class_is_accepted_as_in_trl(tiny_model_dir, tmp_path):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    trainer = GrpoLabTrainer(model=str(tiny_model_dir), reward_funcs=reward_num_unique_chars, args=_args(tmp_path),
                             train_dataset=_dataset(), method="dapo", reward_processing_classes=tok)
    assert trainer.reward_processing_classes == [tok, None]   # the user's, then the overlong reward's


def test_environment_rows_without_a_prompt_column_are_scored(tiny_model_dir, tmp_path):
    """Environment datasets may carry no ``prompt`` column (an environment's reset() supplies it, TRL
    defaults it): grpolab's reward bookkeeping takes TRL's prompt instead of raising KeyError."""
    trainer = GrpoLabTrainer(model=str(tiny_model_dir), reward_funcs=reward_num_unique_chars,
                             args=_args(tmp_path), train_dataset=_dataset(), method="dr_grpo")
    rows = [{"environment": "counter"}] * 4
    prompts = [[{"role": "user", "content": ""}]] * 4
    rewards = trainer._calculate_rewards(rows, prompts, ["ab", "abc", "a", "abcd"], [[1, 2]] * 4)
    assert rewards[:, 0].tolist() == [2.0, 3.0, 1.0, 4.0]
    assert [r.prompt for r in trainer._scored.rows] == prompts


def test_trl_metric_names_appear_beside_grpolabs(tiny_model_dir, tmp_path):
    args = _args(tmp_path, max_steps=2, steps_per_generation=2, learning_rate=0.05, entropy_coef=0.01)
    trainer = GrpoLabTrainer(model=str(tiny_model_dir), reward_funcs=reward_num_unique_chars, args=args,
                             train_dataset=_dataset(), method="dr_grpo")
    trainer.train()
    logged = {k for entry in trainer.state.log_history for k in entry}
    trl_keys = {"policy_loss", "entropy_coef", "entropy", "clip_ratio/low_mean", "clip_ratio/high_mean",
                "clip_ratio/region_mean", "clip_ratio/low_min", "clip_ratio/high_max", "reward", "reward_std",
                "frac_reward_zero_std", "completions/mean_length", "num_tokens"}
    assert trl_keys <= logged, sorted(trl_keys - logged)
    assert {"clip/low_fraction", "trained/entropy", "override/loss"} <= logged   # grpolab's, beside them
    from grpolab.tracking.metric_catalog import trl_loss_keys
    from grpolab.tracking.recorder import DROPPED
    assert trl_loss_keys() <= DROPPED    # CLI runs keep one name per curve in MLflow


def _tiny_moe(tmp_path, coef=0.02):
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    from grpolab.world.models import build_char_tokenizer
    tok = build_char_tokenizer()
    config = Qwen3MoeConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, moe_intermediate_size=8,
                            num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                            num_experts=4, num_experts_per_tok=2, router_aux_loss_coef=coef,
                            max_position_embeddings=128, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                            bos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    model = Qwen3MoeForCausalLM(config)
    model.generation_config.pad_token_id, model.generation_config.eos_token_id = tok.pad_token_id, tok.eos_token_id
    return model, tok


def test_moe_router_aux_loss_is_added_exactly_as_trl_adds_it(tmp_path):
    from trl import GRPOTrainer
    model, tok = _tiny_moe(tmp_path)
    args = _args(tmp_path, scale_rewards="none", loss_type="dr_grpo", beta=0.0)
    kw = dict(model=model, reward_funcs=reward_num_unique_chars, args=args, train_dataset=_dataset(),
              processing_class=tok)
    ours = GrpoLabTrainer(**kw, method="dr_grpo")
    stock = GRPOTrainer(**kw)
    assert ours.aux_loss_enabled and stock.aux_loss_enabled and ours.router_aux_loss_coef == 0.02
    g = torch.Generator().manual_seed(0)
    B, P, T = 4, 5, 6
    inputs = {"prompt_ids": torch.randint(3, len(tok), (B, P), generator=g), "prompt_mask": torch.ones(B, P),
              "completion_ids": torch.randint(3, len(tok), (B, T), generator=g),
              "completion_mask": torch.tensor([[1.0] * T, [1.0] * 4 + [0.0] * 2, [1.0] * T, [1.0] * 2 + [0.0] * 4]),
              "advantages": torch.tensor([0.5, -1.0, 1.5, -1.0]), "num_items_in_batch": torch.tensor(18.0)}
    model.train()
    for t in (ours, stock):
        t.current_gradient_accumulation_steps = 1
    loss_ours, loss_stock = ours._compute_loss(model, inputs), stock._compute_loss(model, inputs)
    assert loss_ours.item() == pytest.approx(loss_stock.item(), rel=1e-5, abs=1e-7)
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    attn = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
    aux = model(input_ids=ids, attention_mask=attn, output_router_logits=True).aux_loss
    ours.aux_loss_enabled = False
    without = ours._compute_loss(model, inputs)
    assert aux.item() > 0 and (loss_ours - without).item() == pytest.approx(0.02 * aux.item(), rel=1e-4)
    assert ours._metrics["train"]["aux_loss"][0] == pytest.approx(stock._metrics["train"]["aux_loss"][0], rel=1e-5)
    assert math.isfinite(ours._metrics["train"]["policy_loss"][0])
