"""The KL registries' contract: one entry per estimator and per placement (grpolab.method.kl) holds
its facts, one function per estimator (grpolab.algorithms.kl), and every other place derives from
them. Each estimator's hand-computed value is in test_algorithms.py (test_kl_estimators_by_hand);
each placement's effect on the loss and the reward in test_algorithms.py and test_contract.py."""

from __future__ import annotations

import ast
from types import SimpleNamespace

import pytest
import torch

from grpolab.algorithms import policy_loss
from grpolab.algorithms.kl import KL_FUNCTIONS, kl_estimate, register
from grpolab.errors import ConfigError
from grpolab.method.kl import KL_ESTIMATORS, KlEstimator, KL_PLACEMENTS, TRL_KL, kl_in_loss, kl_in_reward
from grpolab.method.requirements import requirement
from grpolab.method.spec import AXIS_CHOICES, build_spec
from grpolab.method.trl_names import trl_recipe
from grpolab.tracking.naming import method_params
from grpolab.trainer.trl_fields import TRL_FIELDS
from registry_grep import PACKAGE, compares, lists_naming, toy_entry

HOMES = {PACKAGE / "method" / "kl.py", PACKAGE / "algorithms" / "kl.py"}


def test_one_function_per_estimator_and_one_estimator_per_function():
    assert sorted(KL_FUNCTIONS) == sorted(KL_ESTIMATORS)
    assert AXIS_CHOICES["kl_estimator"] == tuple(KL_ESTIMATORS)
    assert AXIS_CHOICES["kl_placement"] == tuple(KL_PLACEMENTS)


@pytest.mark.parametrize("axis,name", [("kl_estimator", n) for n in KL_ESTIMATORS]
                         + [("kl_placement", n) for n in KL_PLACEMENTS])
def test_every_entry_is_complete(axis, name):
    """Requirement (kl_coef > 0), logged exactly with a KL, a TRL mapping or a reason why none."""
    entry = (KL_ESTIMATORS if axis == "kl_estimator" else KL_PLACEMENTS)[name]
    assert entry.trl != (entry.no_trl is not None), "TRL's beta, or a reason why none"
    assert entry.formula and entry.source
    for coef in (0.0, 0.1):
        spec = build_spec({axis: name, "kl_coef": coef})
        on = coef > 0
        assert requirement(axis, name).holds(SimpleNamespace(spec=spec, reuses_rollouts=False)) == on
        assert (axis in method_params(spec)) == on
        recipe = trl_recipe(spec)
        if on and axis == "kl_placement" and not entry.trl:
            assert recipe is None
        if on and entry.trl:
            assert recipe is not None and recipe["beta"] == 0.1
            # the drop-in reads GRPOConfig(beta=0.1) back to these entries
            assert TRL_FIELDS["beta"].to_axes(0.1, None, spec) == {"kl_coef": 0.1, **TRL_KL}
            assert TRL_KL[axis] == name


@pytest.mark.parametrize("name", list(KL_PLACEMENTS))
def test_a_placement_puts_the_kl_where_its_entry_says(name):
    """In the loss: the policy loss moves with beta; in the reward: the loss does not (the trainer
    subtracts it from the reward); each placement's own params are logged under it only."""
    spec = build_spec({"kl_coef": 0.5, "kl_placement": name})
    assert kl_in_loss(spec) == KL_PLACEMENTS[name].in_loss and kl_in_reward(spec) != KL_PLACEMENTS[name].in_loss
    g = torch.Generator().manual_seed(0)
    logp = torch.randn(2, 3, generator=g)
    mask, A = torch.ones(2, 3), torch.tensor([1.0, -1.0])
    ref = logp.detach() + 0.3
    with_kl, _ = policy_loss(spec, logp, logp.detach(), A, mask, ref)
    without, _ = policy_loss(build_spec({"kl_coef": 0.0}), logp, logp.detach(), A, mask, ref)
    assert (with_kl.item() != pytest.approx(without.item())) == KL_PLACEMENTS[name].in_loss
    for param in KL_PLACEMENTS[name].params:
        assert requirement(param, True).holds(SimpleNamespace(spec=spec, reuses_rollouts=False))
    for other in KL_PLACEMENTS.values():
        for param in set(other.params) - set(KL_PLACEMENTS[name].params):
            assert not requirement(param, True).holds(SimpleNamespace(spec=spec, reuses_rollouts=False))


def test_unknown_kl_values_are_refused():
    with pytest.raises(ValueError, match="unknown KL estimator"):
        kl_estimate(torch.zeros(1), torch.zeros(1), "k4")
    with pytest.raises(ConfigError, match="method.kl_estimator: unknown value 'k4'"):
        build_spec({"kl_estimator": "k4"})
    with pytest.raises(ConfigError, match="method.kl_placement: unknown value 'advantage'"):
        build_spec({"kl_placement": "advantage"})


def test_a_toy_kl_estimator_needs_only_its_entry_and_its_function():
    """|x|: accepted by the config, logged, and what the in-loss KL adds (on-policy, A = 0: the loss is
    beta * mean_t |x_t|)."""
    entry = KlEstimator("toy_abs", "|x|", "a test", no_trl="a test's toy")
    logp, ref = torch.zeros(1, 2), torch.tensor([[0.5, -1.0]])
    with toy_entry(KL_ESTIMATORS, KL_FUNCTIONS, register, entry, lambda x: x.abs()):
        spec = build_spec({"kl_coef": 0.1, "kl_estimator": "toy_abs"})
        assert method_params(spec)["kl_estimator"] == "toy_abs" and trl_recipe(spec) is None
        loss, stats = policy_loss(spec, logp, logp, torch.zeros(1), torch.ones(1, 2), ref)
        assert loss.item() == pytest.approx(0.1 * 0.75) and stats["kl"] == pytest.approx(0.75)
    with pytest.raises(ConfigError, match="method.kl_estimator: unknown value 'toy_abs'"):
        build_spec({"kl_coef": 0.1, "kl_estimator": "toy_abs"})


def test_no_hand_written_list_of_kl_values_outside_the_registry():
    """A collection literal naming two or more estimators, or ``.kl_estimator`` / ``.kl_placement``
    compared with a value's name, would be a second home for a KL fact: read the entry instead."""
    assert lists_naming(set(KL_ESTIMATORS), HOMES, compares("kl_estimator")) == []
    assert lists_naming(set(), HOMES, compares("kl_placement")) == []
