"""The ratio registry's contract: one entry per importance-ratio granularity (grpolab.method.ratios)
holds its facts, one function per entry (grpolab.algorithms.ratios), and every other place derives
from it. Each value's hand-computed test is in test_algorithms.py (GSPO, GSPO-token) and
test_verl_fixtures.py (GMPO); test_registry_contract.py checks each entry's generic facts, a toy
ratio and the lint, this file the claims only a ratio makes."""

from __future__ import annotations

import pytest
import torch

from grpolab.algorithms.ratios import RATIO_FUNCTIONS, log_importance_weights
from grpolab.errors import ConfigError
from grpolab.method.ratios import RATIOS, TOKEN
from grpolab.method.spec import build_spec
from grpolab.method.trl_names import trl_recipe
from grpolab.trainer.trl_fields import TRL_FIELDS
from grpolab.trainer.trl_settings import _NoEquivalent, trl_settings


def test_the_token_ratio_is_trls_and_acts_on_policy():
    assert RATIOS[TOKEN].trl == TOKEN and RATIOS[TOKEN].on_policy is None


@pytest.mark.parametrize("name", list(RATIOS))
def test_every_ratio_is_read_back_by_the_drop_in(name):
    """Its own loss exactly when the entry says so; TRL's importance_sampling_level (or none) read back
    by the drop-in (the generic checks of an entry: test_registry_contract.py)."""
    entry = RATIOS[name]
    assert (RATIO_FUNCTIONS[name].loss is None) == (entry.replaces_surrogate is None)
    spec = build_spec({"ratio": name})
    level = trl_settings(spec)["importance_sampling_level"]
    if entry.trl is None:
        assert isinstance(level, _NoEquivalent)
    else:
        assert level == entry.trl
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
