"""The advantage registry's contract: one entry per estimator (grpolab.method.advantages) holds its
facts, one function per entry (grpolab.algorithms.estimators), and every other place derives from
it. Adding an estimator = its entry, its function and its test; the toy estimator below is added
exactly so, trains end to end, and leaves no trace."""

from __future__ import annotations

import ast
import contextlib
import math
from types import SimpleNamespace

import pytest
import torch

from grpolab.algorithms import compute_advantages
from grpolab.algorithms import estimators as E
from grpolab.errors import ConfigError
from grpolab.method.advantages import ADVANTAGES, Estimator, advantage_params, register_estimator, unregister_estimator
from grpolab.method.requirements import requirement
from grpolab.method.spec import AXIS_CHOICES, SPEC_FIELDS, MethodSpec, build_spec
from grpolab.tracking.naming import method_params
from registry_grep import PACKAGE, lists_naming

HOMES = {PACKAGE / "method" / "advantages.py", PACKAGE / "algorithms" / "estimators.py"}


def test_one_function_per_entry_and_one_entry_per_function():
    assert sorted(E.ESTIMATORS) == sorted(ADVANTAGES)
    assert AXIS_CHOICES["advantage"] == tuple(ADVANTAGES)


@pytest.mark.parametrize("name", list(ADVANTAGES))
def test_every_entry_is_complete(name):
    """Function, params that exist, a TRL mapping or a reason why none, a consistent unscorable claim."""
    entry = ADVANTAGES[name]
    assert callable(E.ESTIMATORS[name].fn)
    assert set(entry.params) <= set(SPEC_FIELDS)
    assert (entry.trl is None) == (entry.no_trl is not None), "a TRL mapping, or a reason why none"
    assert entry.unscorable == (E.ESTIMATORS[name].unscorable is not None)
    assert entry.step_norm in (None, "std", "mean")
    assert not entry.kl_per_token or entry.per_token
    if entry.trl is not None:
        from grpolab.method.advantages import trl_advantage
        assert trl_advantage(entry.trl) == name   # the drop-in reads the TRL setting back to this entry
    if entry.missing:
        with pytest.raises(ConfigError, match="cannot train with it yet"):
            build_spec({"advantage": name})


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


def _compares_advantage(node) -> str | None:
    if isinstance(node, ast.Compare) and isinstance(node.left, ast.Attribute) and node.left.attr == "advantage":
        if any(isinstance(c, (ast.Constant, ast.Tuple, ast.List, ast.Set)) for c in node.comparators):
            return "compares .advantage"
    return None


def test_no_hand_written_list_of_estimators_outside_the_registry():
    """A collection literal naming two or more estimators, or ``.advantage`` compared with an
    estimator's name, would be a second home for an estimator fact: read the entry instead."""
    assert lists_naming(set(ADVANTAGES), HOMES, _compares_advantage) == []


# -- a toy estimator, added the registry's way ---------------------------------------------------------

def _toy(spec, x: E.AdvantageInputs) -> torch.Tensor:
    """A_i = r_i - max_g r: every completion but the group's best is pushed down."""
    g = x.rewards.view(-1, x.group_size)
    return (g - g.max(1, keepdim=True).values).view(-1)


@contextlib.contextmanager
def _toy_registered():
    register_estimator(Estimator("toy_max_baseline", no_trl="a test's toy"))
    E.register("toy_max_baseline")(_toy)
    try:
        yield
    finally:
        E.ESTIMATORS.pop("toy_max_baseline")
        unregister_estimator("toy_max_baseline")


def test_a_toy_estimator_needs_only_its_entry_and_function():
    r = torch.tensor([1.0, 0.0, 0.5, 0.5, 2.0, 1.0])
    with _toy_registered():
        spec = build_spec({"advantage": "toy_max_baseline"})
        assert compute_advantages(spec, r, 3).tolist() == [0.0, -1.0, -0.5, -1.5, 0.0, -1.0]
        assert method_params(spec)["advantage"] == "toy_max_baseline"
    assert "toy_max_baseline" not in AXIS_CHOICES["advantage"]
    with pytest.raises(ConfigError, match="unknown value 'toy_max_baseline'"):
        build_spec({"advantage": "toy_max_baseline"})


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
            a = compute_advantages(spec, r, 2, mask=torch.ones(4, 3))
            assert a[1] == 0 and torch.isfinite(a).all(), name
        else:
            with pytest.raises(ValueError, match="does not define"):
                compute_advantages(spec, r, 2, mask=torch.ones(4, 3))


def test_maxrl_divides_the_centred_reward_by_the_success_rate():
    """MaxRL (arXiv:2602.02710): A = (r - mean) / (mean + 1e-4). The installed TRL 1.16.0 has no
    scale_rewards='mean' to compare with (its entry says so), so the numbers are by hand."""
    spec = build_spec({"advantage": "maxrl"})
    a = compute_advantages(spec, torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0]), 4)
    assert a[:4].tolist() == pytest.approx([0.75 / 0.2501, -0.25 / 0.2501, -0.25 / 0.2501, -0.25 / 0.2501])
    assert a[4:8].tolist() == [0.0] * 4                                       # no success: no signal
    assert a[8:].tolist() == pytest.approx([0.5 / 0.5001] * 2 + [-0.5 / 0.5001] * 2)
    with pytest.raises(ConfigError, match="needs rewards in \\[0, 1\\]"):
        from grpolab.experiment.config import build_config
        build_config({"name": "m", "method": {"base": "maxrl", "soft_overlong": True}, "task": {"name": "addition"},
                      "model": {"preset": "tiny"}, "tracking": {"enabled": False}})
