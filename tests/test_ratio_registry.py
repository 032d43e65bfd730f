"""The ratio registry's contract: one entry per importance-ratio granularity (grpolab.method.ratios)
holds its facts, one function per entry (grpolab.algorithms.ratios), and every other place derives
from it. Each value's hand-computed test is in test_algorithms.py (GSPO, GSPO-token) and
test_verl_fixtures.py (GMPO); this file checks each entry against every claim it makes."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from grpolab.algorithms import policy_loss
from grpolab.algorithms.ratios import RATIO_FUNCTIONS, log_importance_weights, register
from grpolab.errors import ConfigError
from grpolab.method.ratios import RATIOS, TOKEN, Ratio, trl_ratio
from grpolab.method.requirements import requirement
from grpolab.method.spec import AXIS_CHOICES, build_spec
from grpolab.method.trl_names import trl_recipe
from grpolab.trainer.trl_fields import TRL_FIELDS
from grpolab.trainer.trl_settings import _NoEquivalent, trl_settings
from registry_grep import PACKAGE, compares, lists_naming, toy_entry

HOMES = {PACKAGE / "method" / "ratios.py", PACKAGE / "algorithms" / "ratios.py"}


def test_one_function_per_entry_and_one_entry_per_function():
    assert sorted(RATIO_FUNCTIONS) == sorted(RATIOS)
    assert AXIS_CHOICES["ratio"] == tuple(RATIOS)
    assert RATIOS[TOKEN].trl == TOKEN and RATIOS[TOKEN].on_policy is None


@pytest.mark.parametrize("name", list(RATIOS))
def test_every_entry_is_complete(name):
    """Function, requirement, TRL mapping (or a reason why none) read back by the drop-in, source."""
    entry = RATIOS[name]
    assert callable(RATIO_FUNCTIONS[name].log_weights)
    assert (RATIO_FUNCTIONS[name].loss is None) == (entry.replaces_surrogate is None)
    assert (entry.trl is None) != (entry.no_trl is None), "a TRL importance_sampling_level, or a reason why none"
    assert entry.formula and entry.source
    run = SimpleNamespace(spec=build_spec({"ratio": name}), reuses_rollouts=False)
    req = requirement("ratio", name)
    assert (req is not None and not req.holds(run)) == (entry.on_policy is not None)
    spec = build_spec({"ratio": name})
    level = trl_settings(spec)["importance_sampling_level"]
    if entry.trl is None:
        assert isinstance(level, _NoEquivalent) and trl_recipe(spec) is None
    else:
        assert level == entry.trl and trl_ratio(entry.trl) == name
        # the drop-in reads GRPOConfig(importance_sampling_level=...) back to this entry
        assert TRL_FIELDS["importance_sampling_level"].to_axes(entry.trl, None, spec) == {"ratio": name}
        assert trl_recipe(spec).get("importance_sampling_level", "token") == entry.trl


@pytest.mark.parametrize("name", list(RATIOS))
def test_on_policy_every_ratio_is_one(name):
    """rho = 1 at pi = pi_old for every granularity (a ratio only re-weights off-policy data)."""
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert torch.equal(torch.exp(log_importance_weights(torch.zeros(2, 3), mask, name)),
                       torch.ones(2, 1 if name == "sequence" else 3))


def test_a_ratio_with_its_own_loss_needs_the_clip_surrogate():
    for name, entry in RATIOS.items():
        if entry.replaces_surrogate:
            with pytest.raises(ConfigError, match=f"method.ratio={name} .*use surrogate=clip"):
                build_spec({"ratio": name, "surrogate": "cispo"})


def test_unknown_ratio_is_refused():
    with pytest.raises(ValueError, match="unknown ratio granularity"):
        log_importance_weights(torch.zeros(1, 2), torch.ones(1, 2), "tokens")
    with pytest.raises(ConfigError, match="method.ratio: unknown value 'tokens'"):
        build_spec({"ratio": "tokens"})


def test_a_toy_ratio_needs_only_its_entry_and_its_function():
    """log rho = l / 2 (a damped token ratio): accepted by the config, its function is what the loss reads."""
    entry = Ratio("toy_half", "rho_t = sqrt(pi / pi_old)", "a test", no_trl="a test's toy")
    logp, old = torch.tensor([[0.2, -0.4]]), torch.zeros(1, 2)
    with toy_entry(RATIOS, RATIO_FUNCTIONS, register, entry, lambda log_ratio, mask: log_ratio / 2):
        spec = build_spec({"ratio": "toy_half"})
        assert isinstance(trl_settings(spec)["importance_sampling_level"], _NoEquivalent)
        loss, _ = policy_loss(spec, logp, old, torch.tensor([1.0]), torch.ones(1, 2))
        # inside the clip [0.8, 1.2]: loss = -mean_t rho_t A = -(e^0.1 + e^-0.2) / 2
        assert loss.item() == pytest.approx(-(math.exp(0.1) + math.exp(-0.2)) / 2)
    assert "toy_half" not in RATIO_FUNCTIONS
    with pytest.raises(ConfigError, match="method.ratio: unknown value 'toy_half'"):
        build_spec({"ratio": "toy_half"})


def test_no_hand_written_list_of_ratios_outside_the_registry():
    """A collection literal naming two or more ratios, or ``.ratio`` compared with a ratio's name,
    would be a second home for a ratio fact: read the entry instead."""
    assert lists_naming(set(RATIOS), HOMES, compares("ratio")) == []
