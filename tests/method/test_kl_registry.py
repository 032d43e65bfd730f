"""The KL registries' contract: one entry per estimator and per placement (grpolab.method.kl) holds
its facts, one function per estimator (grpolab.algorithms.kl), and every other place derives from
them (the generic checks of each entry, a toy estimator and the lint: test_registry_contract.py).
Each estimator's hand-computed value is in test_algorithms.py (test_kl_estimators_by_hand);
each placement's effect on the loss and the reward in test_algorithms.py and test_contract.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from grpolab.algorithms import LossInputs, policy_loss
from grpolab.method.kl import KL_ESTIMATORS, KL_PLACEMENTS, TRL_KL, kl_in_loss, kl_in_reward
from grpolab.method.requirements import requirement
from grpolab.method.spec import build_spec
from grpolab.method.trl_names import trl_recipe
from grpolab.tracking.naming import method_params
from grpolab.trainer.trl_fields import TRL_FIELDS


@pytest.mark.parametrize("axis,name", [("kl_estimator", n) for n in KL_ESTIMATORS]
                         + [("kl_placement", n) for n in KL_PLACEMENTS])
def test_a_kl_value_acts_and_is_logged_exactly_with_a_kl(axis, name):
    """Requirement (kl_coef > 0), logged exactly with a KL, and TRL's beta read back to the entries TRL
    has (the generic checks of an entry: test_registry_contract.py)."""
    entry = (KL_ESTIMATORS if axis == "kl_estimator" else KL_PLACEMENTS)[name]
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
    with_kl, _ = policy_loss(spec, LossInputs(logp, logp.detach(), A, mask, ref))
    without, _ = policy_loss(build_spec({"kl_coef": 0.0}), LossInputs(logp, logp.detach(), A, mask, ref))
    assert (with_kl.item() != pytest.approx(without.item())) == KL_PLACEMENTS[name].in_loss
    for param in KL_PLACEMENTS[name].params:
        assert requirement(param, True).holds(SimpleNamespace(spec=spec, reuses_rollouts=False))
    for other in KL_PLACEMENTS.values():
        for param in set(other.params) - set(KL_PLACEMENTS[name].params):
            assert not requirement(param, True).holds(SimpleNamespace(spec=spec, reuses_rollouts=False))


@pytest.mark.parametrize("coef, placement", [(0.0, "loss"), (0.1, "loss"), (0.1, "reward")])
def test_kl_ratio_correction_acts_and_is_logged_exactly_with_an_in_loss_kl(coef, placement):
    """loss_t += beta KL_t (times rho with kl_ratio_correction) is the in-loss placement's term only
    (algorithms.policy_loss; docs/methods.md, the KL axes): a reward-side KL has no rho to multiply, so
    the setting changes the loss, holds its requirement and is logged exactly with an in-loss KL."""
    g = torch.Generator().manual_seed(0)
    logp = torch.randn(2, 3, generator=g)
    old, ref = logp + 0.2 * torch.randn(2, 3, generator=g), logp + 0.3
    mask, A = torch.ones(2, 3), torch.tensor([1.0, -1.0])
    specs = [build_spec({"kl_coef": coef, "kl_placement": placement, "kl_ratio_correction": on,
                         "eps_low": 0.9, "eps_high": 0.9}) for on in (False, True)]
    losses = [policy_loss(spec, LossInputs(logp, old, A, mask, ref))[0].item() for spec in specs]
    acts = coef > 0 and placement == "loss"
    assert (losses[0] != pytest.approx(losses[1])) == acts == kl_in_loss(specs[1])
    assert requirement("kl_ratio_correction", True).holds(SimpleNamespace(spec=specs[1], reuses_rollouts=True)) == acts
    assert all(("kl_ratio_correction" in method_params(spec)) == acts for spec in specs)
