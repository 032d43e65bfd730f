"""GRPOConfig -> grpolab axes (trainer/trl_fields.TRL_FIELDS) without any model: every TRL loss
type maps, the registered methods' TRL recipes (method/trl_names.trl_recipe) train exactly their
update rule through the same table, and the run's name says which it is. Loss/gradient parity
with stock TRL is in test_trl_parity.py; method= plus GRPOConfig overrides in test_dropin.py."""

import dataclasses
import inspect
import re

import pytest
import torch
from trl import GRPOConfig, GRPOTrainer

from grpolab.method.registry import METHODS
from grpolab.method.trl_names import TRL_DEFAULTS, TRL_LOSS_TYPES, format_recipe, trl_recipe
from grpolab.tracking.naming import method_label
from grpolab.trainer.trl_fields import spec_from_trl

BASE = dict(output_dir="/tmp/grpolab-trl-mapping", report_to="none", use_cpu=True)


def _spec(**kw):
    name, spec = spec_from_trl(GRPOConfig(**BASE, **kw))
    return method_label(spec, name), spec


def test_every_trl_loss_type_is_in_the_table():
    """The loss types TRL 1.16's _compute_loss branches on are exactly the table's."""
    src = inspect.getsource(GRPOTrainer._compute_loss)
    named = set(re.findall(r'loss_type == "(\w+)"', src))
    for group in re.findall(r"loss_type in \[([^\]]*)\]", src):
        named |= set(re.findall(r'"(\w+)"', group))
    assert named == set(TRL_LOSS_TYPES)


def test_trl_defaults_are_grpo_configs():
    defaults = {f.name: f.default for f in dataclasses.fields(GRPOConfig)}
    assert {k: defaults[k] for k in TRL_DEFAULTS} == TRL_DEFAULTS


@pytest.mark.parametrize("kw, label, axes", [
    ({}, "trl:dapo", dict(surrogate="clip", aggregation="token_mean", eps_low=0.2, eps_high=0.2, kl_coef=0.0)),
    (dict(loss_type="grpo"), "trl:grpo", dict(aggregation="seq_mean_token_mean")),
    (dict(loss_type="dr_grpo"), "trl:dr_grpo", dict(aggregation="seq_mean_token_sum_norm", advantage="group_std")),
    (dict(loss_type="dr_grpo", scale_rewards="none"), "dr_grpo", dict(advantage="group_mean")),
    (dict(loss_type="bnpo"), "trl:bnpo", dict(aggregation="token_mean_local")),
    # TRL's cispo bounds the weight above at epsilon_high (None: epsilon = 0.2) and never below
    (dict(loss_type="cispo"), "trl:cispo", dict(surrogate="cispo", eps_low=1.0, eps_high=0.2 - 1.0)),
    (dict(loss_type="cispo", epsilon_high=5.0), "cispo", dict(eps_high=4.0)),
    (dict(loss_type="sapo", sapo_temperature_neg=2.0), "trl:sapo", dict(surrogate="sapo", sapo_tau_neg=2.0)),
    (dict(loss_type="luspo", importance_sampling_level="sequence"), "trl:luspo",
     dict(aggregation="seq_mean_token_sum", ratio="sequence")),
    (dict(loss_type="vespo", vespo_k_neg=4.0), "trl:vespo", dict(surrogate="vespo", vespo_k_neg=4.0, ratio="token")),
    (dict(loss_type="dapo", scale_rewards="batch"), "lite_ppo", dict(advantage="batch_std")),
    (dict(multi_objective_aggregation="normalize_then_sum", scale_rewards="none"), "trl:dapo",
     dict(advantage="decoupled")),
    (dict(loss_type="grpo", beta=0.04), "trl:grpo", dict(kl_coef=0.04, kl_estimator="k3", kl_ratio_correction=True)),
    (dict(loss_type="grpo", beta=0.04, use_bias_correction_kl=False), "grpo", dict(kl_ratio_correction=False)),
    (dict(use_bias_correction_kl=False), "trl:dapo", dict(kl_ratio_correction=False)),   # no KL: nothing to correct
    (dict(delta=1.5, epsilon_high=0.28), "trl:dapo", dict(surrogate="dual_clip", dual_clip_c=1.5, eps_high=0.28)),
    (dict(delta=4.0), "intellect2", dict(surrogate="dual_clip", dual_clip_c=4.0, aggregation="token_mean")),
    (dict(loss_type="sapo", delta=1.5, epsilon=0.3), "sapo", dict(surrogate="sapo", eps_low=0.2)),   # TRL ignores both
    (dict(mask_truncated_completions=True, top_entropy_quantile=0.2, entropy_coef=0.01), "trl:dapo",
     dict(overlong_filter=True, top_entropy_quantile=0.2, entropy_coef=0.01, entropy_mode="static")),
    (dict(use_adaptive_entropy=True, entropy_coef_delta=0.01, entropy_target=0.3), "trl:dapo",   # TRL's controller
     dict(entropy_mode="adaptive_gated", entropy_coef=0.0, entropy_coef_step=0.01, entropy_target=0.3,
          entropy_coef_min=0.0, entropy_coef_max=1.0)),
    (dict(entropy_coef_delta=0.01, entropy_target=0.3), "trl:dapo",   # read only with use_adaptive_entropy
     dict(entropy_mode="static", entropy_coef_step=1e-3, entropy_target=0.2)),
])
def test_grpo_config_maps_to_axes(kw, label, axes):
    got_label, spec = _spec(**kw)
    assert got_label == label
    assert {k: getattr(spec, k) for k in axes} == pytest.approx(axes)


def test_settings_without_an_equivalent_raise_and_name_why():
    with pytest.raises(NotImplementedError, match=r"use_adaptive_entropy=True with top_entropy_quantile < 1"):
        _spec(use_adaptive_entropy=True, top_entropy_quantile=0.5)
    with pytest.raises(ValueError, match=r"delta=1.1 < 1 \+ epsilon_high = 1.2"):
        _spec(delta=1.1)


def test_registered_methods_trl_recipes_train_exactly_their_update_rule():
    """trl_recipe (method floor, for ``grpolab methods``) and TRL_FIELDS (trainer floor) agree: a
    registered method's recipe, read back through the table, is that method's spec."""
    recipes = {key: trl_recipe(m.spec()) for key, m in METHODS.items() if not m.missing}
    for key, recipe in recipes.items():
        if recipe is not None:
            label, spec = _spec(**recipe)
            assert spec.spec_hash() == METHODS[key].spec().spec_hash(), (key, format_recipe(recipe))
            assert label == key
    assert format_recipe(recipes["dr_grpo"]) == 'loss_type="dr_grpo", scale_rewards="none"'
    assert format_recipe(recipes["cispo"]) == 'loss_type="cispo", epsilon_high=5.0'
    assert recipes["grpo"] == dict(loss_type="grpo", beta=0.04, use_bias_correction_kl=False)
    assert recipes["intellect2"] == dict(loss_type="dapo", delta=4.0)
    assert recipes["sapo"] == {"loss_type": "sapo"} and recipes["lite_ppo"] == dict(loss_type="dapo", scale_rewards="batch")
    # the paper's DAPO (dynamic sampling, soft overlong punishment) has no GRPOConfig; TRL's "dapo" is its loss only
    assert recipes["dapo"] is None and recipes["rloo"] is None and recipes["gmpo"] is None


def test_cispo_upper_bound_below_one_is_trls_default_cispo():
    """Hand-computed: TRL's loss_type="cispo" with epsilon_high unset truncates the IS weight at
    0.2 (grpolab: eps_high = 0.2 - 1): weights of rho = 0.1, 0.5, 3 are 0.1, 0.2, 0.2."""
    from grpolab.algorithms import losses as L
    _, spec = _spec(loss_type="cispo")
    rho = torch.tensor([[0.1, 0.5, 3.0]])
    logp = torch.zeros(1, 3, requires_grad=True)
    loss = L.cispo_surrogate(rho, torch.ones(1, 1), logp, spec.eps_low, spec.eps_high).sum()
    loss.backward()
    assert (-logp.grad)[0].tolist() == pytest.approx([0.1, 0.2, 0.2])


def test_trl_delta_is_dual_clip():
    """Hand-computed, TRL's two-sided clip (delta) against grpolab's dual clip, eps 0.2, delta = c = 2:
    A = -1: rho 0.5 -> 0.8 (clip), 1.5 -> 1.5, 3 -> 2 (capped); A = +1: rho 3 -> -1.2 (clip)."""
    from grpolab.algorithms import losses as L
    rho = torch.tensor([[0.5, 1.5, 3.0, 3.0]])
    A = torch.tensor([[-1.0, -1.0, -1.0, 1.0]])
    ours = L.dual_clip_surrogate(rho, A, 0.2, 0.2, 2.0)
    trl = -torch.min(torch.clamp(rho, max=2.0) * A, torch.clamp(rho, 0.8, 1.2) * A)
    assert ours[0].tolist() == pytest.approx([0.8, 1.5, 2.0, -1.2]) and trl[0].tolist() == pytest.approx(ours[0].tolist())


def test_grpolab_methods_prints_both_names_of_one_update_rule():
    from grpolab.method.table import methods_table
    text = methods_table()
    assert '  dr_grpo = GRPOConfig(loss_type="dr_grpo", scale_rewards="none")' in text.splitlines()
    assert '  cispo = GRPOConfig(loss_type="cispo", epsilon_high=5.0)' in text.splitlines()
    assert "  dapo: surrogate=clip, aggregation=token_mean: PPO clip;" in text and "dapo = " not in text
    assert max(map(len, text.splitlines())) <= 110
    assert 'GRPOConfig(loss_type="sapo")' in methods_table(markdown=True)
