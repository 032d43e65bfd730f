"""The advantage registry's contract: one entry per estimator (grpolab.method.advantages) holds its
facts, one function per entry (grpolab.algorithms.estimators), and every other place derives from
it. Adding an estimator = its entry, its function and its test. test_registry_contract.py checks each
entry's generic facts and adds a toy estimator exactly so; here the toy trains end to end, and
leaves no trace."""

from __future__ import annotations

import contextlib
import math
from types import SimpleNamespace

import pytest
import torch

from grpolab.algorithms import AdvantageInputs, compute_advantages
from grpolab.algorithms import estimators as E
from grpolab.errors import ConfigError
from grpolab.method.advantages import (ADVANTAGES, Estimator, advantage_params, check_entry, register_estimator,
                                       unregister_estimator)
from grpolab.method.requirements import requirement
from grpolab.method.spec import MethodSpec, build_spec
from grpolab.tracking.naming import method_params
from test_registry_contract import AXES


@pytest.mark.parametrize("name", list(ADVANTAGES))
def test_every_estimator_states_its_shape_and_its_unscorable_rows(name):
    """An unscorable claim its function keeps, a step normaliser GiGPO has, a per-token KL only where
    the advantages are per token, and an estimator grpolab cannot train refused (the generic checks
    of an entry: test_registry_contract.py)."""
    entry = ADVANTAGES[name]
    assert entry.unscorable == (E.ESTIMATORS[name].unscorable is not None)
    assert entry.step_norm in (None, "std", "mean")
    assert not entry.kl_per_token or entry.per_token
    if entry.missing:
        with pytest.raises(ConfigError, match="cannot train with it yet"):
            build_spec({"advantage": name})


@pytest.mark.parametrize("name", list(ADVANTAGES))
def test_an_estimator_has_a_critic_exactly_when_it_reads_the_critics_values(name):
    """The trainer builds a critic from ``critic`` and asks it for values from ``inputs``: they agree."""
    entry = ADVANTAGES[name]
    assert entry.critic == ("critic_values" in entry.inputs)


@pytest.mark.parametrize("entry", [Estimator("toy_unread_critic", critic=True, no_trl="a test's estimator"),
                                   Estimator("toy_unbuilt_critic", inputs=("critic_values",), no_trl="a test's")],
                         ids=["critic without its values", "values without a critic"])
def test_an_entry_whose_critic_and_inputs_disagree_is_refused_at_registration(entry):
    with pytest.raises(ValueError, match=rf"advantage '{entry.name}': critic={entry.critic} but inputs=.*an estimator "
                                         r"with a critic reads its values \(inputs names 'critic_values'\)"):
        register_estimator(entry)
    assert entry.name not in ADVANTAGES
    check_entry(Estimator("toy_critic", critic=True, inputs=("critic_values",), no_trl="a test's estimator"))


@pytest.mark.parametrize("param", advantage_params())
def test_an_estimators_params_are_logged_and_act_exactly_under_its_readers(param):
    for name, entry in ADVANTAGES.items():
        if entry.missing:
            continue
        spec = build_spec({"advantage": name, **({"kl_placement": "loss"})})
        reads = param in entry.params
        assert (param in method_params(spec)) == reads, (name, param)
        run = SimpleNamespace(spec=spec, reuses_rollouts=False)
        assert requirement(param, getattr(spec, param)).holds(run) == reads, (name, param)


# -- a toy estimator, added the registry's way (its entry and function: test_registry_contract.py) -----

@contextlib.contextmanager
def _toy_registered():
    toy = AXES["advantage"].toy
    register_estimator(toy.entry)
    E.register(toy.entry.name)(toy.fn)
    try:
        yield
    finally:
        E.ESTIMATORS.pop(toy.entry.name)
        unregister_estimator(toy.entry.name)


def test_a_toy_estimator_trains_end_to_end(shared_state):
    from grpolab.experiment.config import build_config
    from grpolab.experiment.runner import run_experiment
    from test_contract import Capture
    with _toy_registered():
        cfg = build_config({"name": "toy-estimator", "method": {"base": "grpo", "advantage": "toy_max_baseline",
                                                                "kl_coef": 0.0},
                            "task": {"name": "random_reward"}, "model": {"preset": "tiny"},
                            "warm_start": {"enabled": False},
                            "train": {"steps": 1, "group_size": 4, "prompts_per_rollout": 2, "learning_rate": 0.001},
                            "eval": {"every": 0, "prompts": 4, "k": 1}, "tracking": {"enabled": False}})
        cap = Capture()
        result = run_experiment(cfg, shared_state, callbacks=[cap])
    assert result.steps == 1 and math.isfinite(cap.logs[-1]["loss"]) and cap.logs[-1]["override/advantage"] == 1.0
    assert any(not torch.equal(a, b) for a, b in zip(cap.before, cap.after))


def test_unscorable_rows_follow_the_entry():
    r = torch.tensor([1.0, float("nan"), 0.0, 1.0])
    for name, entry in ADVANTAGES.items():
        if entry.missing or entry.components or entry.critic or entry.tracker:
            continue
        spec = MethodSpec(advantage=name)
        if entry.unscorable:
            a = compute_advantages(spec, AdvantageInputs(r, 2, mask=torch.ones(4, 3))).advantages
            assert a[1] == 0 and torch.isfinite(a).all(), name
        else:
            with pytest.raises(ValueError, match="does not define"):
                compute_advantages(spec, AdvantageInputs(r, 2, mask=torch.ones(4, 3)))


def test_maxrl_divides_the_centred_reward_by_the_success_rate():
    """MaxRL (arXiv:2602.02710): A = (r - mean) / (mean + 1e-4). The installed TRL 1.16.0 has no
    scale_rewards='mean' to compare with (its entry says so), so the numbers are by hand."""
    spec = build_spec({"advantage": "maxrl"})
    r = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0])
    a = compute_advantages(spec, AdvantageInputs(r, 4)).advantages
    assert a[:4].tolist() == pytest.approx([0.75 / 0.2501, -0.25 / 0.2501, -0.25 / 0.2501, -0.25 / 0.2501])
    assert a[4:8].tolist() == [0.0] * 4                                       # no success: no signal
    assert a[8:].tolist() == pytest.approx([0.5 / 0.5001] * 2 + [-0.5 / 0.5001] * 2)
    with pytest.raises(ConfigError, match="needs rewards in \\[0, 1\\]"):
        from grpolab.experiment.config import build_config
        build_config({"name": "m", "method": {"base": "maxrl", "soft_overlong": True}, "task": {"name": "addition"},
                      "model": {"preset": "tiny"}, "tracking": {"enabled": False}})


def test_maxrl_refuses_a_reward_side_kl_and_a_two_component_toy_task():
    """A KL penalty in the reward moves MaxRL's divisor, the group's mean reward, to or below 0."""
    from grpolab.experiment.config import build_config
    with pytest.raises(ConfigError, match="method.advantage=maxrl: it divides by the group's mean reward.*kl_placement=loss"):
        build_spec({"advantage": "maxrl", "kl_coef": 0.1, "kl_placement": "reward"})
    assert build_spec({"advantage": "maxrl", "kl_coef": 0.1, "kl_placement": "loss"}).kl_coef == 0.1
    with pytest.raises(ConfigError, match=r"weights \[1.0, 1.0\] \(reward components format, correct\)"):
        build_config({"name": "m", "method": "maxrl", "task": {"name": "addition_format"},
                      "model": {"preset": "tiny"}, "tracking": {"enabled": False}})


@pytest.mark.parametrize("advantage, axes, inert", [
    ("opo", {"adv_eps": 1e-6, "std_unbiased": False}, ["adv_eps=1e-06", "std_unbiased=False"]),
    ("gpg", {"adv_eps": 1e-6}, ["adv_eps=1e-06"]),
    ("maxrl", {"adv_eps": 1e-6, "std_unbiased": False}, ["std_unbiased=False"]),
    ("group_mean", {"std_unbiased": False}, ["std_unbiased=False"]),
    ("grpo_passk", {"adv_eps": 1e-6, "std_unbiased": False}, []),
])
def test_shared_eps_and_std_settings_are_inert_under_estimators_that_do_not_read_them(advantage, axes, inert):
    """adv_eps / std_unbiased act only under the entries that read them: elsewhere they are warned
    inert and not logged, so two ladder rungs over them are one experiment."""
    import warnings

    from grpolab.experiment.config import build_config
    from grpolab.method.requirements import inert_settings
    from grpolab.tracking.naming import method_params
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = build_config({"name": "r", "method": {"base": "grpo", "advantage": advantage, **axes},
                            "train": {"minibatches": 2}})
    assert sorted(s for s in inert_settings(cfg) if s.split("=")[0] in axes) == inert
    assert any(w.startswith(f"method.{inert[0]} needs advantage ") for w in cfg.warnings) == bool(inert)
    logged = method_params(cfg.spec)
    assert sorted(k for k in axes if k in logged) == sorted(k for k in axes if f"{k}={axes[k]}" not in inert)


def test_trl_advantage_names_none_for_an_aggregation_trl_does_not_have():
    from grpolab.method.advantages import trl_advantage
    assert trl_advantage({"multi_objective_aggregation": "sum_then_normalise"}) is None
    assert trl_advantage({"multi_objective_aggregation": "sum_then_normalize", "scale_rewards": "none"}) == "group_mean"
    assert trl_advantage({"multi_objective_aggregation": "normalize_then_sum", "scale_rewards": "none"}) == "decoupled"
    assert trl_advantage({}) == "group_std"
