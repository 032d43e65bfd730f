"""Parity with TRL 1.16's built-in paths: same inputs, same loss and gradients (<= 1e-6).

For every axis value TRL also implements (loss types grpo, dr_grpo, dapo, bnpo, cispo, sapo;
sequence-level ratio; top-entropy tokens; static entropy bonus; scale_rewards group/batch/none;
normalize_then_sum) the stock GRPOTrainer and GrpoLabTrainer are built on the same weights and
fed the same micro-batch, on-policy and off-policy, with gradient accumulation 2.
"""

import hashlib
import math

import pytest
import torch

from conftest import tiny_dataset
from grpolab.algorithms import AdvantageInputs, compute_advantages
from grpolab.method.registry import METHODS
from grpolab.method.spec import build_spec

GA, SPG, G = 2, 4, 4


def _args(tmp_path, **kw):
    from trl import GRPOConfig
    base = dict(output_dir=str(tmp_path), report_to="none", per_device_train_batch_size=8,
                gradient_accumulation_steps=GA, steps_per_generation=SPG, num_generations=G,
                max_completion_length=6, use_cpu=True, disable_tqdm=True, temperature=1.0, top_k=0)
    base.update(kw)
    return GRPOConfig(**base)


def _hash_reward(salt):
    def fn(prompts, completions, **kwargs):
        return [int(hashlib.sha256(f"{salt}{p}{c}".encode()).hexdigest()[:6], 16) / 0xFFFFFF
                for p, c in zip(prompts, completions)]
    fn.__name__ = f"hash{salt}"
    return fn


def _trainers(model_dir, tmp_path, spec, trl_kw, reward_funcs=None):
    from trl import GRPOTrainer

    from grpolab.trainer.dropin import task_correctness
    from grpolab.trainer.grpo_trainer import GrpoLabTrainer
    from grpolab.world.models import load_model
    task, train, ds = tiny_dataset()
    funcs = reward_funcs or [_hash_reward(0)]
    _, tok = load_model(model_dir)
    stock = GRPOTrainer(model=str(model_dir), reward_funcs=funcs, args=_args(tmp_path / "a", **trl_kw),
                        train_dataset=ds, processing_class=tok)
    ours = GrpoLabTrainer(model=str(model_dir), reward_funcs=funcs, args=_args(tmp_path / "b", **trl_kw),
                          train_dataset=ds, processing_class=tok, method=spec,   # None: what the GRPOConfig says
                          correctness=task_correctness(task, train))
    return stock, ours


def _inputs(trainer, off_policy: bool, with_ref: bool):
    g = torch.Generator().manual_seed(0)
    B, P, T = 8, 5, 6
    prompt_ids = torch.randint(4, 50, (B, P), generator=g)
    prompt_mask = torch.ones(B, P, dtype=torch.long)
    prompt_mask[0, :2] = 0
    completion_ids = torch.randint(4, 50, (B, T), generator=g)
    completion_mask = torch.ones(B, T, dtype=torch.long)
    completion_mask[1, 3:] = 0
    completion_mask[5, 1:] = 0
    with torch.no_grad():
        logp, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, torch.cat([prompt_ids, completion_ids], 1), torch.cat([prompt_mask, completion_mask], 1), T)
    inputs = {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "completion_ids": completion_ids,
              "completion_mask": completion_mask, "advantages": torch.randn(B, generator=g),
              "num_items_in_batch": torch.tensor(4 * int(completion_mask.sum()))}
    if off_policy:
        inputs["old_per_token_logps"] = logp + 0.3 * torch.randn(B, T, generator=g)
    if with_ref:
        inputs["ref_per_token_logps"] = logp + 0.2 * torch.randn(B, T, generator=g)
    return inputs


def _delta_binds(trainer, inputs, delta: float) -> int:
    """Loss tokens whose ratio pi / pi_old exceeds delta with A < 0: where the two-sided clip acts."""
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    attn = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
    with torch.no_grad():
        logp, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, attn, ids.size(1) - inputs["prompt_ids"].size(1))
    ratio = torch.exp(logp - inputs["old_per_token_logps"])
    hits = (ratio > delta) & (inputs["advantages"] < 0).unsqueeze(1) & inputs["completion_mask"].bool()
    return int(hits.sum())


def _loss_and_grads(trainer, inputs):
    trainer.model.train()
    trainer.model.zero_grad()
    trainer.current_gradient_accumulation_steps = GA
    loss = trainer._compute_loss(trainer.model, {k: v.clone() for k, v in inputs.items()})
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in trainer.model.parameters() if p.grad is not None]


CASES = {
    "grpo+kl": (dict(loss_type="grpo", beta=0.04, use_bias_correction_kl=False),
                dict(aggregation="seq_mean_token_mean", kl_coef=0.04, kl_estimator="k3")),
    "grpo+kl_ratio_corrected": (dict(loss_type="grpo", beta=0.04, use_bias_correction_kl=True),
                                dict(kl_coef=0.04, kl_estimator="k3", kl_ratio_correction=True)),
    "dr_grpo": (dict(loss_type="dr_grpo"), dict(aggregation="seq_mean_token_sum_norm")),
    "dapo": (dict(loss_type="dapo", epsilon_high=0.28), dict(aggregation="token_mean", eps_high=0.28)),
    "bnpo": (dict(loss_type="bnpo"), dict(aggregation="token_mean_local")),
    "cispo": (dict(loss_type="cispo", epsilon_high=5.0), dict(surrogate="cispo", eps_low=1.0, eps_high=4.0, aggregation="token_mean")),
    "sapo": (dict(loss_type="sapo"), dict(surrogate="sapo", aggregation="seq_mean_token_mean")),
    "sequence": (dict(loss_type="grpo", importance_sampling_level="sequence", epsilon=3e-4, epsilon_high=4e-4),
                 dict(ratio="sequence", eps_low=3e-4, eps_high=4e-4)),
    "top_entropy": (dict(loss_type="grpo", top_entropy_quantile=0.5), dict(top_entropy_quantile=0.5)),
    "entropy_bonus": (dict(loss_type="dapo", entropy_coef=0.01), dict(aggregation="token_mean", entropy_coef=0.01)),
    # registered rows: INTELLECT-2's recipe as TRL names it, and the 80/20 row's loss axes (its dynamic
    # sampling and overlong shaping act outside the loss); a delta that binds on this batch is "dapo+delta" below
    "intellect2": (dict(loss_type="dapo", delta=4.0), METHODS["intellect2"].axes),
    # delta strictly above 1 + eps_high and below this batch's largest ratio (~1.48): the cap binds
    "intellect2+binding": (dict(loss_type="dapo", delta=1.3), {**METHODS["intellect2"].axes, "dual_clip_c": 1.3}),
    "top_entropy_80_20": (dict(loss_type="dapo", epsilon_high=0.28, top_entropy_quantile=0.2),
                          {k: METHODS["top_entropy_80_20"].axes[k] for k in
                           ("surrogate", "eps_low", "eps_high", "aggregation", "top_entropy_quantile", "kl_coef")}),
}


@pytest.mark.parametrize("off_policy", [False, True], ids=["on_policy", "off_policy"])
@pytest.mark.parametrize("case", list(CASES))
def test_loss_and_gradient_parity(case, off_policy, tiny_model_dir, tmp_path):
    trl_kw, spec_kw = CASES[case]
    spec = build_spec(spec_kw)
    stock, ours = _trainers(tiny_model_dir, tmp_path, spec, trl_kw)
    inputs = _inputs(stock, off_policy, with_ref=spec.kl_coef > 0)
    if case == "intellect2+binding" and off_policy:
        assert spec.dual_clip_c > 1 + spec.eps_high and _delta_binds(stock, inputs, spec.dual_clip_c) > 0
    loss_a, grads_a = _loss_and_grads(stock, inputs)
    loss_b, grads_b = _loss_and_grads(ours, inputs)
    assert abs(loss_a.item() - loss_b.item()) <= 1e-6
    assert len(grads_a) == len(grads_b) > 0
    assert max((a - b).abs().max().item() for a, b in zip(grads_a, grads_b)) <= 1e-6
    if off_policy and case in ("dapo", "grpo+kl"):  # the off-policy batch really clips
        num, den = ours.loss_curves.window.sums["clip/region_fraction"]   # accumulated for the generation batch's curve
        assert den > 0 and num / den > 0


ADV_CASES = {
    "group": (dict(scale_rewards="group"), dict(advantage="group_std"), 1),
    "batch": (dict(scale_rewards="batch"), dict(advantage="batch_std"), 1),
    "none": (dict(scale_rewards="none"), dict(advantage="group_mean"), 1),
    "normalize_then_sum": (dict(multi_objective_aggregation="normalize_then_sum"), dict(advantage="decoupled"), 2),
}


@pytest.mark.parametrize("case", list(ADV_CASES))
def test_advantage_parity_with_trl_generation(case, tiny_model_dir, tmp_path):
    """TRL generates, scores and computes its advantages; ours on the same rewards must match."""
    trl_kw, spec_kw, n_funcs = ADV_CASES[case]
    spec = build_spec(spec_kw)
    stock, _ = _trainers(tiny_model_dir, tmp_path, spec, trl_kw, [_hash_reward(i) for i in range(n_funcs)])
    captured = {}
    original = stock._calculate_rewards

    def capture(*a, **k):
        captured["rewards"] = original(*a, **k)
        return captured["rewards"]

    stock._calculate_rewards = capture
    _, train, _ = tiny_dataset()
    batch = [{"prompt": e.prompt, "idx": i} for i, e in enumerate(train[:8]) for _ in range(G)]
    stock.model.train()
    out = stock._generate_and_score_completions(batch)
    rewards = captured["rewards"] if n_funcs > 1 else captured["rewards"][:, 0]
    ours = compute_advantages(spec, AdvantageInputs(rewards, G)).advantages
    assert torch.allclose(out["advantages"], ours, atol=1e-6)
    assert out["advantages"].abs().max() > 0


# Every TRL 1.16 loss type through GrpoLabTrainer WITHOUT method=: both trainers get the same
# GRPOConfig; grpolab reads its axes from trl_fields.TRL_FIELDS. Off-policy micro-batch (old
# log-probs != current), random non-zero advantages, gradient accumulation 2.
LOSS_TYPE_CASES = {
    "grpo": dict(loss_type="grpo"),
    "grpo+beta": dict(loss_type="grpo", beta=0.04),        # TRL's default use_bias_correction_kl=True
    "dapo": dict(),                                         # GRPOConfig's default loss_type
    "dr_grpo": dict(loss_type="dr_grpo"),
    "bnpo": dict(loss_type="bnpo"),
    "cispo": dict(loss_type="cispo"),                       # epsilon_high unset: weight capped at 0.2
    "cispo+eps5": dict(loss_type="cispo", epsilon_high=5.0),
    "sapo": dict(loss_type="sapo", sapo_temperature_neg=2.0),
    "luspo": dict(loss_type="luspo", importance_sampling_level="sequence"),
    "vespo": dict(loss_type="vespo"),
    "grpo+sequence": dict(loss_type="grpo", importance_sampling_level="sequence"),
    "dapo+delta": dict(delta=1.25, epsilon_high=0.25),      # TRL's two-sided clip = grpolab's dual clip
    # DeepSeek-V3.2's off-policy sequence mask (TRL's own mask; the KL term is not masked)
    "grpo+off_policy_mask": dict(loss_type="grpo", off_policy_mask_threshold=0.05),
    "dapo+beta+off_policy_mask": dict(beta=0.04, off_policy_mask_threshold=0.05),
    # TRL's adaptive entropy control (entropy_mode=adaptive_gated); its first step applies no bonus, the
    # controller test below and the end-to-end test cover the later ones
    "dapo+adaptive_entropy": dict(use_adaptive_entropy=True, entropy_coef=0.05, entropy_target=15.0,
                                  entropy_coef_delta=0.01),
}


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(a), 1e-12)


@pytest.mark.parametrize("case", list(LOSS_TYPE_CASES))
def test_trl_loss_types_without_method(case, tiny_model_dir, tmp_path):
    trl_kw = LOSS_TYPE_CASES[case]
    stock, ours = _trainers(tiny_model_dir, tmp_path, None, trl_kw)
    assert ours.method_name == f"trl:{trl_kw.get('loss_type', 'dapo')}"
    inputs = _inputs(stock, off_policy=True, with_ref="beta" in trl_kw)
    if "delta" in trl_kw:
        assert _delta_binds(stock, inputs, trl_kw["delta"]) > 0
    loss_a, grads_a = _loss_and_grads(stock, inputs)
    loss_b, grads_b = _loss_and_grads(ours, inputs)
    norm_a = torch.sqrt(sum((g ** 2).sum() for g in grads_a)).item()
    norm_b = torch.sqrt(sum((g ** 2).sum() for g in grads_b)).item()
    print(f"{case}: loss {loss_a.item():.6g} vs {loss_b.item():.6g} (rel {_rel(loss_a.item(), loss_b.item()):.1e}), "
          f"grad norm {norm_a:.6g} vs {norm_b:.6g} (rel {_rel(norm_a, norm_b):.1e})")
    assert abs(loss_a.item()) > 1e-4 and norm_a > 1e-4       # informative: the step moves the model
    assert loss_b.item() == pytest.approx(loss_a.item(), rel=1e-5, abs=1e-7)
    assert norm_b == pytest.approx(norm_a, rel=1e-5)
    assert max((a - b).abs().max().item() for a, b in zip(grads_a, grads_b)) <= 1e-6


@pytest.mark.parametrize("case", ["dapo", "grpo+beta", "luspo", "dapo+adaptive_entropy"])   # ~20 s each
def test_trl_loss_types_without_method_train_like_stock(case, tiny_model_dir, tmp_path):
    """End to end: TRL generates, scores and computes advantages, grpolab its own; step 2 reuses
    step 1's rollout (steps_per_generation 4 = two optimizer steps, a large learning rate), so its
    ratio is far from 1. Logged loss and grad norm of step 2 agree."""
    trl_kw = {**LOSS_TYPE_CASES[case], "max_steps": 2, "learning_rate": 0.05, "logging_steps": 1, "seed": 0}
    stock, ours = _trainers(tiny_model_dir, tmp_path, None, trl_kw)
    logs = {}
    from transformers import set_seed
    for name, trainer in (("stock", stock), ("grpolab", ours)):
        set_seed(trainer.args.seed)   # the same sampling for both: built together, trained one after the other
        trainer.train()
        logs[name] = [e for e in trainer.state.log_history if "loss" in e and "train_runtime" not in e]
    a, b = logs["stock"][1], logs["grpolab"][1]
    print(f"{case} step 2: loss {a['loss']:.6g} vs {b['loss']:.6g} (rel {_rel(a['loss'], b['loss']):.1e}), "
          f"grad_norm {a['grad_norm']:.6g} vs {b['grad_norm']:.6g} (rel {_rel(a['grad_norm'], b['grad_norm']):.1e})")
    assert a["step"] == b["step"] == 2 and a["grad_norm"] > 1e-4
    assert b["loss"] == pytest.approx(a["loss"], rel=1e-5, abs=1e-7)
    assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-5)


def test_off_policy_mask_parity_case_is_informative(tiny_model_dir, tmp_path):
    """The off-policy mask cases above drop some rows and keep others on the parity batch."""
    stock, ours = _trainers(tiny_model_dir, tmp_path, None, LOSS_TYPE_CASES["grpo+off_policy_mask"])
    inputs = _inputs(stock, off_policy=True, with_ref=False)
    with torch.no_grad():
        logp, _, _ = stock._get_per_token_logps_and_entropies(
            stock.model, torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1),
            torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1), inputs["completion_ids"].size(1))
    keep = stock.get_off_policy_mask(inputs["advantages"].unsqueeze(1), logp, inputs["old_per_token_logps"],
                                     inputs["completion_mask"], 0.05)
    assert 0 < int(keep.sum()) < keep.numel()
    _loss_and_grads(ours, inputs)
    num, den = ours.loss_curves.window.sums["off_policy/kept_fraction"]
    assert 0 < num / den < 1


@pytest.mark.parametrize("last_entropy, target", [(float("inf"), 100.0), (0.1, 1.0), (5.0, 1.0), (50.0, 100.0)],
                         ids=["first_step", "below_target_then_down", "above_target_gated", "up_to_max"])
def test_trl_adaptive_entropy_controller_without_method(last_entropy, target, tiny_model_dir, tmp_path):
    """TRL's gated controller (use_adaptive_entropy) from the same state: the bonus applied (none before a first
    step or while the last step's entropy was above the target), loss and gradients, then the coefficient moved
    by entropy_coef_delta within [entropy_coef_min, entropy_coef_max] from the step's entropy."""
    trl_kw = dict(use_adaptive_entropy=True, entropy_coef=0.05, entropy_target=target, entropy_coef_delta=0.01,
                  entropy_coef_min=0.02, entropy_coef_max=0.055)
    stock, ours = _trainers(tiny_model_dir, tmp_path, None, trl_kw)
    assert ours.spec.entropy_mode == "adaptive_gated"
    stock._last_world_entropy = ours.entropy_control.last_entropy = last_entropy
    inputs = _inputs(stock, off_policy=True, with_ref=False)
    loss_a, grads_a = _loss_and_grads(stock, inputs)
    loss_b, grads_b = _loss_and_grads(ours, inputs)
    assert loss_b.item() == pytest.approx(loss_a.item(), rel=1e-5, abs=1e-7)
    assert max((a - b).abs().max().item() for a, b in zip(grads_a, grads_b)) <= 1e-6
    assert ours.entropy_control.last_entropy == pytest.approx(stock._last_world_entropy, rel=1e-5)
    assert ours.entropy_coef == ours.entropy_control.coef == pytest.approx(stock.entropy_coef, abs=1e-12)
    assert stock.entropy_coef != 0.05   # the controller moved (up to the max, or down)


def test_trl_adaptive_entropy_resumes_from_a_checkpoint_like_stock(tiny_model_dir, tmp_path):
    """TRL keeps its controller (entropy_coef, the last step's entropy) in the checkpoint's
    entropy_ctrl_state.json; a drop-in run resumed from checkpoint-1 continues from it as stock TRL's does
    (before the fix it restarted at the initial coefficient with no bonus: loss 0.136 vs stock's -0.099)."""
    import json

    from transformers import set_seed
    trl_kw = {**LOSS_TYPE_CASES["dapo+adaptive_entropy"], "max_steps": 2, "learning_rate": 0.05, "logging_steps": 1,
              "seed": 0, "save_steps": 1, "save_strategy": "steps"}
    first = _trainers(tiny_model_dir, tmp_path / "first", None, trl_kw)
    resumed = _trainers(tiny_model_dir, tmp_path / "resumed", None, trl_kw)
    steps, states = {}, {}
    for name, trainer, again in zip(("stock", "grpolab"), first, resumed):
        set_seed(0)
        trainer.train()
        checkpoint = f"{trainer.args.output_dir}/checkpoint-1"
        states[name] = json.loads(open(f"{checkpoint}/entropy_ctrl_state.json").read())
        set_seed(0)
        again.train(resume_from_checkpoint=checkpoint)
        steps[name] = [e for e in again.state.log_history if "loss" in e and "train_runtime" not in e][-1]
    assert states["grpolab"] == pytest.approx(states["stock"]) and math.isfinite(states["stock"]["last_world_entropy"])
    a, b = steps["stock"], steps["grpolab"]
    assert a["step"] == b["step"] == 2
    assert b["loss"] == pytest.approx(a["loss"], rel=1e-5, abs=1e-7)
    assert b["entropy_coef"] == pytest.approx(a["entropy_coef"])
