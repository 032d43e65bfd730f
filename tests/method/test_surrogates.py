"""The surrogate registry's contract: one entry per surrogate (grpolab.method.surrogates) holds its
facts, one function per entry (grpolab.algorithms.surrogates), and every other place derives from
it. Adding a surrogate = its entry, its function, and its hand-computed test in test_algorithms.py;
test_registry_contract.py checks the entry's generic facts and the lint; this file checks every
claim only a surrogate makes, numerically where the claim is one."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch

from grpolab.algorithms import LossInputs, policy_loss
from grpolab.method.requirements import requirement
from grpolab.method.spec import MethodSpec, build_spec
from grpolab.method.surrogates import SURROGATE_PARAMS, SURROGATES
from grpolab.method.trl_names import TRL_LOSS_MEANING, TRL_LOSS_TYPES
from grpolab.tracking.naming import method_params


@pytest.mark.parametrize("name", list(SURROGATES))
def test_every_surrogate_states_its_clip_its_reason_and_its_trl_loss_types(name):
    """Its own reason for being inert on-policy, clip kind, TRL's loss types and GRPOConfig fields,
    label (the generic checks of an entry: test_registry_contract.py)."""
    from grpolab.trainer.trl_fields import AXIS, TRL_FIELDS
    entry = SURROGATES[name]
    needs = requirement("surrogate", name)
    assert not entry.on_policy or needs.hint.startswith(entry.on_policy + "; ")   # its own reason, not a clip's
    assert entry.clip in (None, "ppo", "dual", "truncate")
    assert {k for k, v in TRL_LOSS_TYPES.items() if v["surrogate"] == name} == {t.loss_type for t in entry.trl}
    assert all(TRL_LOSS_MEANING[t.loss_type] for t in entry.trl)
    for field, (axis, _) in entry.trl_fields.items():
        assert TRL_FIELDS[field].kind == AXIS and axis in entry.params
    assert entry.trl_as is None or entry.trl_as in SURROGATES
    assert entry.label(MethodSpec(surrogate=name))


@pytest.mark.parametrize("param", SURROGATE_PARAMS)
def test_a_param_is_inert_on_policy_exactly_under_the_surrogates_that_say_so(param):
    """The requirement of a surrogate parameter, on-policy, holds exactly under the readers whose
    entry says it acts on-policy (cov_fraction: clip_cov yes, kl_cov no); off-policy under all."""
    for name in SURROGATES:
        spec = build_spec({"surrogate": name})
        on = requirement(param, getattr(spec, param)).holds(SimpleNamespace(spec=spec, reuses_rollouts=False))
        off = requirement(param, getattr(spec, param)).holds(SimpleNamespace(spec=spec, reuses_rollouts=True))
        reads = param in SURROGATES[name].params
        assert (on, off) == (reads and not SURROGATES[name].params[param].off_policy, reads), (name, param)


@pytest.mark.parametrize("name", list(SURROGATES))
def test_logged_params_are_exactly_those_that_can_act(name):
    """naming (what a run logs) and requirements (what is warned inert) agree, for every surrogate
    and every surrogate parameter. Before the registry they did not: naming logged eps_low/eps_high
    under kl_cov and vespo (neither reads them; requirements called them inert) and left vespo_*
    out at their defaults (requirements said they act); cov_fraction had no requirement at all."""
    spec = build_spec({"surrogate": name})
    logged = method_params(spec)
    run = SimpleNamespace(spec=spec, reuses_rollouts=True)
    for param in SURROGATE_PARAMS:
        acts = requirement(param, getattr(spec, param)).holds(run)
        assert (param in logged) == acts == (param in SURROGATES[name].params), (name, param)


# -- the entries' claims, checked on the loss itself --------------------------------------------------

def _batch(on_policy: bool):
    g = torch.Generator().manual_seed(0)
    logp = (-torch.rand(4, 5, generator=g) * 2).requires_grad_()
    old = logp.detach() if on_policy else logp.detach() + torch.randn(4, 5, generator=g) * 0.6
    ref = logp.detach() + torch.randn(4, 5, generator=g) * 0.1
    mask = torch.ones(4, 5)
    mask[1, 3:] = 0
    return logp, old, ref, mask


def _loss_and_grad(spec: MethodSpec, on_policy: bool = False):
    logp, old, ref, mask = _batch(on_policy)
    loss, stats = policy_loss(spec, LossInputs(logp, old, torch.tensor([1.5, -2.0, 0.5, -0.7]), mask, ref_logp=ref,
                              rewards=torch.tensor([1.0, 0.0, 0.5, 0.0]), group_ids=torch.tensor([0, 0, 1, 1]),
                              generator=torch.Generator().manual_seed(1)))
    loss.backward()
    return float(loss.detach()), logp.grad, stats


# a value of each parameter far from the default, so that it binds on the batch above
_MOVED = {"eps_low": 0.02, "eps_high": 0.03, "dual_clip_c": 1.05, "sapo_tau_pos": 6.0, "sapo_tau_neg": 0.2,
          "vespo_k_pos": 0.5, "vespo_lambda_pos": 0.5, "vespo_k_neg": 0.5, "vespo_lambda_neg": 9.0,
          "cov_fraction": 0.5, "cov_low": 50.0, "cov_high": -40.0, "kl_cov_coef": 5.0, "dpo_beta": 2.0,
          "dro_beta": 2.0}
_BASE = {"aggregation": "token_mean_local", "cov_low": -100.0, "cov_high": 100.0}


@pytest.mark.parametrize("name", list(SURROGATES))
def test_params_outside_the_entry_change_nothing_and_its_own_change_the_loss(name):
    base = build_spec({**_BASE, "surrogate": name})
    loss, grad, _ = _loss_and_grad(base)
    for param in SURROGATE_PARAMS:
        moved = dataclasses.replace(base, **{param: _MOVED[param]})
        if param == "eps_low" and SURROGATES[name].clip in ("ppo", "dual"):
            moved = dataclasses.replace(moved, eps_high=max(moved.eps_high, moved.eps_low))
        loss2, grad2, _ = _loss_and_grad(moved)
        same = loss2 == pytest.approx(loss, abs=1e-7) and torch.allclose(grad2, grad, atol=1e-7)
        assert same == (param not in SURROGATES[name].params), (name, param)


@pytest.mark.parametrize("name", [n for n, s in SURROGATES.items() if s.on_policy])
def test_inert_on_policy_means_the_reinforce_gradient(name):
    """The entry's ``on_policy`` claim: with rho = 1 the surrogate's gradient is -A grad log pi,
    whatever its off-policy-only parameters."""
    _, reference, _ = _loss_and_grad(build_spec({**_BASE, "surrogate": "reinforce"}), on_policy=True)
    spec = build_spec({**_BASE, "surrogate": name})
    off_only = {p: _MOVED[p] for p, s in SURROGATES[name].params.items() if s.off_policy}
    for s in (spec, dataclasses.replace(spec, **off_only)):
        if s.eps_low > s.eps_high:
            s = dataclasses.replace(s, eps_high=s.eps_low)
        assert torch.allclose(_loss_and_grad(s, on_policy=True)[1], reference, atol=1e-6), name


@pytest.mark.parametrize("name, param", [(n, p) for n, s in SURROGATES.items() for p, setting in s.params.items() if not setting.off_policy])
def test_a_param_said_to_act_on_policy_does(name, param):
    """The converse claim: a parameter flagged as acting on-policy changes the on-policy loss or gradient
    (a flag set wrongly would hide an inert setting from the warning)."""
    spec = build_spec({**_BASE, "surrogate": name})
    loss, grad, _ = _loss_and_grad(spec, on_policy=True)
    loss2, grad2, _ = _loss_and_grad(dataclasses.replace(spec, **{param: _MOVED[param]}), on_policy=True)
    assert loss2 != pytest.approx(loss, abs=1e-7) or not torch.allclose(grad2, grad, atol=1e-7), (name, param)


@pytest.mark.parametrize("name", list(SURROGATES))
def test_clip_fractions_are_reported_exactly_for_clipping_entries(name):
    _, _, stats = _loss_and_grad(build_spec({**_BASE, "surrogate": name}))
    assert ("clip/region_fraction" in stats) == (SURROGATES[name].clip is not None)
    assert ("clip/dual_fraction" in stats) == (SURROGATES[name].clip == "dual")
    assert ("cispo_clip_ratio" in stats) == (SURROGATES[name].clip == "truncate")
