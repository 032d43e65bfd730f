"""Hand-computed checks for every axis value and the invariants of the method axes (docs/methods.md)."""

import math

import pytest
import torch

from grpolab.algorithms import (AdvantageInputs, compute_advantages, entropy_mask, LossInputs, policy_loss,
                                soft_overlong_penalty)
from grpolab.algorithms import advantages as adv
from grpolab.algorithms import losses as L
from grpolab.algorithms.advantages import ValueTracker
from grpolab.algorithms.kl import kl_estimate
from grpolab.algorithms.ratios import log_importance_weights
from grpolab.method.registry import METHODS
from grpolab.method.spec import MethodSpec, build_spec

ONE_OF_EIGHT = torch.tensor([1.0, 0, 0, 0, 0, 0, 0, 0])


def spec(**kw):
    return build_spec(kw)


# --- advantages ----------------------------------------------------------------------------

def test_group_std_one_correct_of_eight_is_2_47():
    a = compute_advantages(spec(advantage="group_std"), AdvantageInputs(ONE_OF_EIGHT, 8)).advantages
    # mean 0.125, unbiased std sqrt(0.125) = 0.35355; 0.875 / (0.35355 + 1e-4) = 2.4742
    assert a[0].item() == pytest.approx(0.875 / (math.sqrt(0.125) + 1e-4), rel=1e-6)
    assert round(a[0].item(), 2) == 2.47
    assert a[1].item() == pytest.approx(-0.125 / (math.sqrt(0.125) + 1e-4), rel=1e-6)


def test_group_std_biased_variant_differs():
    s = spec(advantage="group_std", std_unbiased=False, adv_eps=0.0)
    a = compute_advantages(s, AdvantageInputs(ONE_OF_EIGHT, 8)).advantages
    assert a[0].item() == pytest.approx(0.875 / math.sqrt(0.125 * 0.875), rel=1e-6)  # population std


def test_group_mean_one_correct_is_0_875():
    a = compute_advantages(spec(advantage="group_mean"), AdvantageInputs(ONE_OF_EIGHT, 8)).advantages
    assert a[0].item() == pytest.approx(0.875)
    assert a[1:].tolist() == pytest.approx([-0.125] * 7)


def test_dr_grpo_times_g_over_g_minus_1_is_rloo():
    r = torch.tensor([0.3, 1.0, 0.0, 0.7, 2.0, 2.0, 1.0, 5.0])
    for G in (2, 4, 8):
        dr = compute_advantages(spec(advantage="group_mean"), AdvantageInputs(r, G)).advantages
        rloo = compute_advantages(spec(advantage="leave_one_out"), AdvantageInputs(r, G)).advantages
        assert torch.allclose(dr * G / (G - 1), rloo, atol=1e-6)
    # leave-one-out by hand for the first group of 4: r_0 - mean(1.0, 0.0, 0.7)
    rloo = compute_advantages(spec(advantage="leave_one_out"), AdvantageInputs(r, 4)).advantages
    assert rloo[0].item() == pytest.approx(0.3 - 1.7 / 3)


def test_batch_std_uses_whole_batch_std():
    r = torch.tensor([1.0, 0.0, 1.0, 1.0])
    a = compute_advantages(spec(advantage="batch_std"), AdvantageInputs(r, 2)).advantages
    std = r.std().item()  # unbiased over 4 = 0.5
    assert a.tolist() == pytest.approx([0.5 / (std + 1e-4), -0.5 / (std + 1e-4), 0.0, 0.0])


def test_zero_variance_group_gets_exactly_zero_for_every_group_estimator():
    r = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0])
    for name in ("group_std", "group_mean", "batch_std", "leave_one_out"):
        a = compute_advantages(spec(advantage=name), AdvantageInputs(r, 4)).advantages
        assert a[:4].abs().max().item() == 0.0, name
        assert a[4:].abs().max().item() > 0, name


def test_gdpo_decoupled_keeps_reward_combinations_apart():
    # Two components. Group A: (1,0) and (0,1) and (0,0) and (0,0); summed-then-normalised
    # makes (1,0) and (0,1) identical; decoupled keeps them apart when the components differ in spread.
    r = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0], [0.0, 0.0]])
    summed = compute_advantages(spec(advantage="group_std"), AdvantageInputs(r, 4)).advantages
    assert summed[0].item() == pytest.approx(summed[1].item())
    dec = compute_advantages(spec(advantage="decoupled"), AdvantageInputs(r, 4)).advantages
    assert abs(dec[0].item() - dec[1].item()) > 0.1
    # by hand: comp0 group z = (0.75, -.25, -.25, -.25)/std0; comp1 z = (-.5, .5, .5, -.5)/std1
    s0, s1 = r[:, 0].std().item() + 1e-4, r[:, 1].std().item() + 1e-4
    s = torch.tensor([0.75 / s0 - 0.5 / s1, -0.25 / s0 + 0.5 / s1, -0.25 / s0 + 0.5 / s1, -0.25 / s0 - 0.5 / s1])
    expected = (s - s.mean()) / (s.std() + 1e-4)
    assert torch.allclose(dec, expected, atol=1e-5)


def test_reinforce_pp_returns_and_whitening_by_hand():
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    r = torch.tensor([1.0, 0.0])
    pen = torch.tensor([[0.1, 0.2, 0.3], [0.4, 0.5, 9.9]])  # padding penalty must be ignored
    ret = adv.token_returns(r, mask, pen)
    # row 0: rewards (-.1, -.2, 1-.3) -> returns (0.4, 0.5, 0.7); row 1: (-.4, -.5) -> (-0.9, -0.5)
    assert ret.flatten().tolist() == pytest.approx([0.4, 0.5, 0.7, -0.9, -0.5, 0.0], abs=1e-6)
    a = compute_advantages(spec(advantage="reinforce_pp", kl_coef=0.1, kl_placement="reward", kl_estimator="k1"),
                           AdvantageInputs(r, 2, mask=mask, token_penalty=pen)).advantages
    vals = torch.tensor([0.4, 0.5, 0.7, -0.9, -0.5])
    z = (vals - vals.mean()) / (vals.std() + 1e-8)
    assert a[mask.bool()].tolist() == pytest.approx(z.tolist(), abs=1e-5)
    assert a[1, 2].item() == 0.0


def test_reinforce_pp_baseline_subtracts_group_mean_first():
    mask = torch.ones(4, 2)
    r = torch.tensor([1.0, 0.0, 1.0, 1.0])
    a = compute_advantages(spec(advantage="reinforce_pp_baseline"), AdvantageInputs(r, 2, mask=mask)).advantages
    # group-centred (0.5, -0.5, 0, 0) on every token, whitened over 8 tokens
    vals = torch.tensor([0.5, 0.5, -0.5, -0.5, 0, 0, 0, 0])
    z = (vals - vals.mean()) / (vals.std() + 1e-8)
    assert a.flatten().tolist() == pytest.approx(z.tolist(), abs=1e-5)


def test_value_tracker_beta_updates_and_advantage():
    tr = ValueTracker(decay=0.5)
    a = compute_advantages(spec(advantage="value_tracker", adv_eps=0.0), AdvantageInputs(torch.tensor([1.0, 0.0]), 2,
                           prompt_keys=["q", "q"], tracker=tr)).advantages
    # prior p = 0.5 -> raw (0.5, -0.5), batch std (unbiased) = 0.7071 -> (0.7071, -0.7071)
    assert a.tolist() == pytest.approx([0.5 / math.sqrt(0.5), -0.5 / math.sqrt(0.5)], abs=1e-6)
    # updates in order: (1,1) -> (.5+1, .5) = (1.5, .5) -> (.75, .25+1) = (.75, 1.25)
    assert tr.state["q"] == pytest.approx((0.75, 1.25))
    assert tr.predict(["q"]).item() == pytest.approx(0.75 / 2.0)


def test_soft_overlong_three_segments():
    pen = soft_overlong_penalty(torch.tensor([10, 16, 17, 18, 20, 21]), max_length=20, buffer=4)
    # L_max - L_cache = 16: 0 up to 16, then (16 - |o|)/4 down to -1 at 20, -1 beyond
    assert pen.tolist() == pytest.approx([0.0, 0.0, -0.25, -0.5, -1.0, -1.0])


# --- ratios, surrogates, aggregation -------------------------------------------------------

def _batch(seed=0, B=4, T=5, spread=0.3):
    g = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(B, T, generator=g) * 2).requires_grad_()
    old = (logp.detach() + (torch.rand(B, T, generator=g) - 0.5) * 2 * spread)
    mask = torch.ones(B, T)
    mask[1, 3:] = 0
    mask[3, 1:] = 0
    A = torch.tensor([1.0, -1.0, 0.5, -2.0])
    return logp, old, mask, A


def test_gspo_sequence_ratio_is_exp_mean_token_log_ratio():
    logp, old, mask, _ = _batch()
    lr = logp.detach() - old
    seq = log_importance_weights(lr, mask, "sequence").exp().squeeze(1)
    manual = torch.stack([torch.exp(lr[i][mask[i].bool()].mean()) for i in range(4)])
    assert torch.allclose(seq, manual, atol=1e-6)
    tok = log_importance_weights(logp - old, mask, "sequence_token")
    assert torch.allclose(tok.detach().exp(), seq.unsqueeze(1).expand(-1, 5), atol=1e-6)


def test_on_policy_clip_fraction_zero_and_eps_high_no_effect():
    logp, _, mask, A = _batch()
    grads = []
    for eps_high in (0.2, 0.28, 5.0):
        lp = logp.detach().clone().requires_grad_()
        loss, stats = policy_loss(spec(eps_high=eps_high), LossInputs(lp, lp.detach(), A, mask))
        loss.backward()
        grads.append(lp.grad)
        assert stats["clip/region_fraction"] == 0.0
    assert torch.allclose(grads[0], grads[1]) and torch.allclose(grads[0], grads[2])


def test_clip_by_hand_and_fractions():
    lp = torch.log(torch.tensor([[1.5, 0.5, 1.1]])).requires_grad_()
    old = torch.zeros(1, 3)
    mask = torch.ones(1, 3)
    A = torch.tensor([1.0])
    loss, stats = policy_loss(spec(aggregation="token_mean_local"), LossInputs(lp, old, A, mask))
    # per token: -min(1.5, 1.2) = -1.2; -min(0.5, 0.8) = -0.5; -1.1  -> mean -0.9333
    assert loss.item() == pytest.approx(-(1.2 + 0.5 + 1.1) / 3, abs=1e-6)
    assert stats["clip/high_fraction"] == pytest.approx(1 / 3)
    assert stats["clip/low_fraction"] == 0.0  # rho 0.5 < 0.8 but A > 0: not a binding lower clip
    assert stats["clip/high_old_prob"] == pytest.approx(1.0)  # exp(old) = 1 for the clipped token
    loss.backward()
    assert lp.grad[0, 0].item() == 0.0 and lp.grad[0, 1].item() != 0.0


def test_dual_clip_caps_negative_advantage_loss():
    lp = torch.log(torch.tensor([[5.0]])).requires_grad_()
    loss, _ = policy_loss(spec(surrogate="dual_clip", dual_clip_c=3.0, aggregation="token_mean_local"),
                          LossInputs(lp, torch.zeros(1, 1), torch.tensor([-1.0]), torch.ones(1, 1)))
    assert loss.item() == pytest.approx(3.0)  # plain clip would give 5.0
    plain, _ = policy_loss(spec(aggregation="token_mean_local"),
                           LossInputs(lp, torch.zeros(1, 1), torch.tensor([-1.0]), torch.ones(1, 1)))
    assert plain.item() == pytest.approx(5.0)


def test_cispo_every_token_has_gradient_clip_zeroes_some():
    logp, old, mask, A = _batch(spread=1.0)
    lp1 = logp.detach().clone().requires_grad_()
    policy_loss(spec(surrogate="cispo", eps_low=1.0, eps_high=0.2, aggregation="token_mean"),
                LossInputs(lp1, old, A, mask))[0].backward()
    lp2 = logp.detach().clone().requires_grad_()
    policy_loss(spec(aggregation="token_mean"), LossInputs(lp2, old, A, mask))[0].backward()
    valid = mask.bool()
    assert (lp1.grad[valid] != 0).all()
    assert (lp2.grad[valid] == 0).any()


def test_sapo_gate_by_hand():
    lp = torch.log(torch.tensor([[1.2, 0.9]])).requires_grad_()
    loss, _ = policy_loss(spec(surrogate="sapo", sapo_tau_pos=2.0, sapo_tau_neg=3.0, aggregation="token_mean_local"),
                          LossInputs(lp, torch.zeros(1, 2), torch.tensor([[1.0, -1.0]]), torch.ones(1, 2)))
    t0 = -(4 / 2.0) * torch.sigmoid(torch.tensor(2.0 * 0.2)) * 1.0
    t1 = -(4 / 3.0) * torch.sigmoid(torch.tensor(3.0 * -0.1)) * -1.0
    assert loss.item() == pytest.approx(((t0 + t1) / 2).item(), abs=1e-6)


def test_reinforce_is_minus_a_logp():
    logp, old, mask, A = _batch()
    loss, _ = policy_loss(spec(surrogate="reinforce", aggregation="token_mean_local"), LossInputs(logp, old, A, mask))
    expected = (-(A.unsqueeze(1) * logp) * mask).sum() / mask.sum()
    assert loss.item() == pytest.approx(expected.item(), abs=1e-6)


def test_gmpo_sign_aware_log_space_clip_by_hand():
    lp = torch.tensor([[0.5, -0.5], [0.5, -0.5]]).requires_grad_()
    loss, _ = policy_loss(spec(ratio="geometric", eps_low=0.4, eps_high=0.4), LossInputs(lp, torch.zeros(2, 2),
                          torch.tensor([1.0, -1.0]), torch.ones(2, 2)))
    # A>0: clip above at .4 -> mean(.4, -.5) = -.05; A<0: clip below at -.4 -> mean(.5, -.4) = .05
    expected = (-1.0 * math.exp(-0.05) + 1.0 * math.exp(0.05)) / 2
    assert loss.item() == pytest.approx(expected, abs=1e-6)


def test_clip_cov_zeroes_selected_tokens_and_kl_cov_penalises():
    logp, old, mask, A = _batch(spread=0.05)
    s = spec(surrogate="clip_cov", cov_fraction=0.25, cov_low=-10.0, cov_high=10.0, aggregation="token_mean")
    lp = logp.detach().clone().requires_grad_()
    loss, stats = policy_loss(s, LossInputs(lp, old, A, mask, generator=torch.Generator().manual_seed(0)))
    loss.backward()
    n_valid = int(mask.sum())
    assert stats["cov/selected_fraction"] == pytest.approx(int(0.25 * n_valid) / n_valid)
    assert int((lp.grad[mask.bool()] == 0).sum()) >= int(0.25 * n_valid)
    k = spec(surrogate="kl_cov", cov_fraction=0.25, kl_cov_coef=1.0, aggregation="token_mean")
    plain = spec(surrogate="reinforce", aggregation="token_mean")  # placeholder for -A*rho sum below
    loss_k, st = policy_loss(k, LossInputs(logp, old, A, mask))
    base = ((-A.unsqueeze(1) * torch.exp(logp - old)) * mask).sum() / mask.sum()
    assert st["cov/selected_fraction"] > 0
    assert loss_k.item() > base.item()  # the |log ratio| penalty only adds
    del plain


def test_group_dpo_by_hand():
    logp = torch.tensor([[-1.0, -1.0], [-2.0, -2.0], [-0.5, -0.5], [-0.5, -0.5]])
    ref = torch.full((4, 2), -1.5)
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0])  # second group has equal rewards: no pair
    loss, stats = policy_loss(spec(surrogate="group_dpo", dpo_beta=0.5), LossInputs(logp, logp, torch.zeros(4), torch.ones(4, 2),
                              ref, rewards=rewards, group_ids=torch.tensor([0, 0, 1, 1])))
    margin = 0.5 * ((-2.0 + 3.0) - (-4.0 + 3.0))
    assert loss.item() == pytest.approx(-torch.nn.functional.logsigmoid(torch.tensor(margin)).item(), abs=1e-6)
    assert stats["dpo/pairs"] == 1.0


def test_kl_estimators_by_hand():
    lp, ref = torch.tensor([-1.0]), torch.tensor([-1.5])
    x = 0.5
    assert kl_estimate(lp, ref, "k1").item() == pytest.approx(x)
    assert kl_estimate(lp, ref, "k2").item() == pytest.approx(x * x / 2)
    assert kl_estimate(lp, ref, "k3").item() == pytest.approx(math.exp(-x) - 1 + x)


def test_aggregations_by_hand():
    per = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    m = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    assert L.aggregate(per, m, "seq_mean_token_mean").item() == pytest.approx((2.0 + 4.0) / 2)
    assert L.aggregate(per, m, "token_mean").item() == pytest.approx(10 / 4)
    assert L.aggregate(per, m, "token_mean", token_normaliser=8).item() == pytest.approx(10 / 8)
    assert L.aggregate(per, m, "token_mean_local").item() == pytest.approx(10 / 4)
    assert L.aggregate(per, m, "seq_mean_token_sum_norm", max_completion_length=5).item() == pytest.approx(10 / 10)


def test_kl_in_loss_adds_beta_times_k3():
    logp, old, mask, A = _batch()
    ref = logp.detach() - 0.3
    base, _ = policy_loss(spec(kl_coef=0.0), LossInputs(logp, old, A, mask, ref))
    with_kl, stats = policy_loss(spec(kl_coef=0.1), LossInputs(logp, old, A, mask, ref))
    k3 = math.exp(-0.3) - 1 + 0.3
    assert with_kl.item() - base.item() == pytest.approx(0.1 * k3, abs=1e-6)
    assert stats["kl"] == pytest.approx(k3, abs=1e-6)


def test_zero_variance_group_contributes_zero_policy_loss():
    r = torch.tensor([1.0, 1.0, 1.0, 1.0])
    A = compute_advantages(spec(advantage="group_std"), AdvantageInputs(r, 4)).advantages
    logp, old, mask, _ = _batch()
    loss, _ = policy_loss(spec(kl_coef=0.0), LossInputs(logp, old, A, mask))
    loss.backward()
    assert loss.item() == 0.0 and logp.grad.abs().max().item() == 0.0


def test_equal_lengths_grpo_dapo_drgrpo_gradients_proportional():
    g = torch.Generator().manual_seed(1)
    logp = (-torch.rand(4, 6, generator=g)).requires_grad_()
    old = logp.detach() + 0.01 * torch.randn(4, 6, generator=g)
    mask = torch.ones(4, 6)
    A = torch.tensor([1.0, -0.5, 0.3, -0.8])
    grads = {}
    for agg in ("seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm"):
        lp = logp.detach().clone().requires_grad_()
        policy_loss(spec(aggregation=agg), LossInputs(lp, old, A, mask, max_completion_length=10))[0].backward()
        grads[agg] = lp.grad.flatten()
    base = grads["seq_mean_token_mean"]
    for agg, grad in grads.items():
        ratio = grad / base
        assert torch.allclose(ratio, ratio[0].expand_as(ratio), atol=1e-5), agg
    assert (grads["seq_mean_token_sum_norm"] / base)[0].item() == pytest.approx(6 / 10, rel=1e-5)


def test_entropy_mask_keeps_top_fraction_and_bonus_lowers_loss():
    ent = torch.tensor([[0.1, 0.9, 0.5, 0.7, 0.3]])
    m = torch.ones(1, 5)
    kept = entropy_mask(ent, m, 0.4)
    assert kept.tolist() == [[False, True, False, True, False]]
    logp, old, mask, A = _batch()
    e = torch.rand(4, 5)
    base, _ = policy_loss(spec(), LossInputs(logp, old, A, mask, entropies=e))
    bonus, _ = policy_loss(spec(entropy_coef=0.1), LossInputs(logp, old, A, mask, entropies=e, entropy_coef=0.1))
    assert base.item() - bonus.item() == pytest.approx(0.1 * ((e * mask).sum() / mask.sum()).item(), abs=1e-6)


def test_every_registered_runnable_method_builds_a_valid_spec():
    for key, method in METHODS.items():
        if method.missing:
            continue
        s = method.spec()
        assert isinstance(s, MethodSpec) and len(s.spec_hash()) == 12, key


def test_gae_by_hand_and_vapo_length_adaptive_lambda():
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    values = torch.tensor([[0.5, 0.6, 0.7], [0.2, 0.1, 9.0]])     # the padded value must not leak
    A, R = adv.gae(torch.tensor([1.0, 0.0]), values, mask, 1.0, 0.5, 1.0)
    # row 0: deltas (0.1, 0.1, 0.3) -> A = (0.1 + .5 * 0.25, 0.1 + .5 * 0.3, 0.3)
    assert A.flatten().tolist() == pytest.approx([0.225, 0.25, 0.3, -0.15, -0.1, 0.0], abs=1e-6)
    assert R.flatten().tolist() == pytest.approx([1.0, 1.0, 1.0, 0.0, 0.0, 0.0], abs=1e-6)  # lambda_critic = 1: MC
    A1, _ = adv.gae(torch.tensor([1.0, 0.0]), values, mask, 1.0, 1.0, 1.0)
    assert A1[0].tolist() == pytest.approx([0.5, 0.4, 0.3], abs=1e-6)                       # lambda 1: R - V
    pen = torch.full((2, 3), 0.1)
    A2, R2 = adv.gae(torch.tensor([1.0, 0.0]), values, mask, 1.0, 1.0, 1.0, token_penalty=pen)
    assert R2[0].tolist() == pytest.approx([0.7, 0.8, 0.9], abs=1e-6)                       # KL-in-reward per token
    lam = adv.length_adaptive_lambda(torch.ones(2, 40)[:, :40] * torch.tensor([[1.0], [1.0]]), 0.05)
    assert lam.flatten().tolist() == pytest.approx([1 - 1 / (0.05 * 40)] * 2)
    s = spec(advantage="gae", gae_length_alpha=0.05)
    A3 = compute_advantages(s, AdvantageInputs(torch.tensor([1.0, 0.0]), 2, mask=mask, old_values=values)).advantages
    lam0 = 1 - 1 / (0.05 * 3)   # negative for |o| = 3 -> floored at 0: A_t = delta_t
    assert lam0 < 0 and A3[0].tolist() == pytest.approx([0.1, 0.1, 0.3], abs=1e-6)


# --- LUSPO and VESPO (TRL 1.16 loss_type "luspo" / "vespo") ------------------------------------

def test_luspo_scales_each_sequence_term_by_its_length_by_hand():
    """Two sequences of 2 and 1 valid tokens, sequence ratio (GSPO) with clip 0.2:
    seq 0: l = (0.05, 0.15), s = e^0.1 = 1.1051709, A = +1, inside the clip: term -1.1051709, x |o| = 2;
    seq 1: l = (-0.5), s = e^-0.5 = 0.6065307, A = -1, below 1 - 0.2: -min(-0.6065, -0.8) = 0.8, x |o| = 1.
    LUSPO = (2 * -1.1051709 + 0.8) / 2 = -0.7051709; GSPO (per-sequence mean) = (-1.1051709 + 0.8) / 2."""
    s = METHODS["luspo"].spec({"eps_low": 0.2, "eps_high": 0.2})
    assert (s.ratio, s.surrogate, s.aggregation) == ("sequence", "clip", "seq_mean_token_sum")
    old = torch.zeros(2, 2)
    lp = torch.tensor([[0.05, 0.15], [-0.5, 9.0]]).requires_grad_()   # the padded 9.0 must not count
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    A = torch.tensor([1.0, -1.0])
    loss, stats = policy_loss(s, LossInputs(lp, old, A, mask))
    assert loss.item() == pytest.approx((2 * -1.1051709 + 0.8) / 2, abs=1e-6)
    loss.backward()
    # d/d l_0t of (1/2) * 2 * (-s_0) with s_0 = exp(mean_t l_0t): -(1/2) * 2 * s_0 / 2 = -0.5525855 per token
    assert lp.grad[0].tolist() == pytest.approx([-0.5525855] * 2, abs=1e-6)
    assert lp.grad[1].tolist() == [0.0, 0.0]          # clipped (A < 0, s < 0.8) and padding
    gspo = build_spec({**METHODS["gspo"].axes, "eps_low": 0.2, "eps_high": 0.2})
    lp2 = lp.detach().clone().requires_grad_()
    loss2, _ = policy_loss(gspo, LossInputs(lp2, old, A, mask))
    assert loss2.item() == pytest.approx((-1.1051709 + 0.8) / 2, abs=1e-6)
    loss2.backward()
    assert (lp.grad[0] / lp2.grad[0]).tolist() == pytest.approx([2.0, 2.0])   # x |o_0| = 2
    # 1 of 3 valid tokens low-clipped; TRL's per-sequence low fractions (0, 1), high (0, 0)
    assert stats["clip/low_fraction"] == pytest.approx(1 / 3) and stats["clip_ratio/low_mean"] == pytest.approx(1 / 3)
    assert stats["clip_ratio/low_min"] == 0.0 and stats["clip_ratio/high_max"] == 0.0
    assert stats["policy_loss"] == pytest.approx(loss.item())


def _vespo_phi_numpy(log_w, adv, k_pos=2.0, lam_pos=3.0, k_neg=3.0, lam_neg=2.0):
    """phi(w) = w^k exp(lambda (1 - w)) straight from the paper's kernel, in numpy."""
    import numpy as np
    w = np.exp(log_w)
    k, lam = (k_pos, lam_pos) if adv >= 0 else (k_neg, lam_neg)
    return w ** k * np.exp(lam * (1 - w))


def test_vespo_gamma_kernel_and_loss_by_hand():
    """seq 0: l = (0.1, 0.2), w = e^0.3 = 1.3498588, A = +1, (k, lambda) = (2, 3):
        phi = 1.3498588^2 * e^{3 (1 - 1.3498588)} = 1.8221188 * 0.3500860 = 0.6378983;
    seq 1: l = (-0.4), w = e^-0.4 = 0.6703200, A = -1, (k, lambda) = (3, 2):
        phi = 0.6703200^3 * e^{2 (1 - 0.6703200)} = 0.3011942 * 1.9335543 = 0.5823754.
    loss = sum_it -phi_i A_i log pi_it / 3 valid tokens, log pi = (-1, -2), (-0.5)."""
    s = METHODS["vespo"].spec()
    assert (s.surrogate, s.aggregation, s.ratio) == ("vespo", "token_mean", "token")
    phi0, phi1 = _vespo_phi_numpy(0.3, 1.0), _vespo_phi_numpy(-0.4, -1.0)
    assert phi0 == pytest.approx(0.6378983, abs=1e-6) and phi1 == pytest.approx(0.5823754, abs=1e-6)
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -7.0]])
    old = logp - torch.tensor([[0.1, 0.2], [-0.4, 5.0]])      # the padded log-ratio 5.0 must not enter w
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    A = torch.tensor([1.0, -1.0])
    lp = logp.clone().requires_grad_()
    loss, stats = policy_loss(s, LossInputs(lp, old, A, mask))
    expected = (phi0 * 1.0 + phi0 * 2.0 - phi1 * 0.5) / 3     # -phi A logp, summed
    assert loss.item() == pytest.approx(expected, abs=1e-6)
    loss.backward()
    # phi is detached: d/d log pi_it = -phi_i A_i / 3
    assert lp.grad.flatten().tolist() == pytest.approx([-phi0 / 3, -phi0 / 3, phi1 / 3, 0.0], abs=1e-6)
    assert stats["vespo/phi_seq_mean"] == pytest.approx((phi0 + phi1) / 2, abs=1e-6)


def test_vespo_on_policy_is_reinforce_and_huge_weights_vanish():
    logp, _, mask, A = _batch()
    s = METHODS["vespo"].spec()
    lp1 = logp.detach().clone().requires_grad_()
    policy_loss(s, LossInputs(lp1, lp1.detach(), A, mask))[0].backward()
    lp2 = logp.detach().clone().requires_grad_()
    policy_loss(spec(surrogate="reinforce", aggregation="token_mean"), LossInputs(lp2, lp2.detach(), A, mask))[0].backward()
    assert torch.allclose(lp1.grad, lp2.grad, atol=1e-7)          # phi(1) = 1 for every (k, lambda)
    # w = e^20 (the clamp): phi = exp(3 + 2 * 20 - 3 e^20) underflows to exactly 0
    phi = L.vespo_weights(torch.full((1, 4), 10.0), torch.tensor([[1.0]]), torch.ones(1, 4), 2.0, 3.0, 3.0, 2.0)
    assert phi.item() == 0.0


def test_vespo_folds_the_sampler_correction_into_its_weight():
    """With sampler weights w_s (vLLM), VESPO uses phi(w * prod_t w_s,t) and does not multiply the
    per-token loss by w_s (as TRL): here prod w_s = e^0.1, so seq 0's w = e^0.4."""
    s = METHODS["vespo"].spec()
    logp = torch.tensor([[-1.0, -2.0]])
    old = logp - torch.tensor([[0.1, 0.2]])
    sw = torch.tensor([[math.exp(0.05), math.exp(0.05)]])
    loss, _ = policy_loss(s, LossInputs(logp, old, torch.tensor([1.0]), torch.ones(1, 2), sampling_weights=sw))
    assert loss.item() == pytest.approx(_vespo_phi_numpy(0.4, 1.0) * 3.0 / 2, abs=1e-6)


def test_trl_named_clip_stats_match_trls_definitions():
    """clip_ratio/* as TRL 1.16 computes them: rho = (1.5, 0.5 | 0.7, 1.0), A = (+1 | -1), eps 0.2:
    high-clipped tokens {rho 1.5 of seq 0}, low-clipped {rho 0.7 of seq 1}: means 1/4, 1/4, region 2/4;
    per sequence: low (0, 1/2) -> min 0, high (1/2, 0) -> max 1/2. CISPO: rho > 1.2 with A > 0: 1/4."""
    lp = torch.log(torch.tensor([[1.5, 0.5], [0.7, 1.0]]))
    A, mask = torch.tensor([1.0, -1.0]), torch.ones(2, 2)
    _, st = policy_loss(spec(), LossInputs(lp, torch.zeros(2, 2), A, mask))
    assert [st[f"clip_ratio/{k}"] for k in ("low_mean", "high_mean", "region_mean", "low_min", "high_max")] == \
        pytest.approx([0.25, 0.25, 0.5, 0.0, 0.5])
    _, st = policy_loss(spec(surrogate="cispo", eps_low=1.0, eps_high=0.2, aggregation="token_mean"), LossInputs(lp,
                        torch.zeros(2, 2), A, mask))
    assert st["cispo_clip_ratio"] == pytest.approx(0.25) and "clip_ratio/low_mean" not in st
