"""The aggregation registry's contract: one entry per aggregation (grpolab.method.aggregations) holds
its facts, one function per entry (grpolab.algorithms.aggregations), and every other place derives
from it. Adding an aggregation = its entry, its function, and its hand-computed test in
test_algorithms.py; test_registry_contract.py checks the entry's generic facts (function, TRL loss
type or a reason, formula and source), this file the claims only an aggregation makes."""

from __future__ import annotations

import pytest
import torch

from grpolab.algorithms.aggregations import aggregate
from grpolab.errors import ConfigError
from grpolab.method.aggregations import AGGREGATIONS, TOKEN_LEVEL
from grpolab.method.spec import build_spec


def _batch():
    g = torch.Generator().manual_seed(0)
    per_token = torch.randn(4, 5, generator=g)
    mask = torch.ones(4, 5)
    mask[1, 2:] = 0
    mask[3, 4:] = 0
    return per_token, mask


@pytest.mark.parametrize("name", list(AGGREGATIONS))
def test_reads_exactly_what_the_entry_says(name):
    """A normaliser the entry does not read changes nothing; one it reads changes the loss."""
    assert set(AGGREGATIONS[name].reads) <= {"token_normaliser", "max_completion_length"}
    per_token, mask = _batch()
    base = dict(token_normaliser=30.0, max_completion_length=5)
    loss = aggregate(per_token, mask, name, **base)
    for key, moved in (("token_normaliser", 7.0), ("max_completion_length", 9)):
        other = aggregate(per_token, mask, name, **{**base, key: moved})
        assert (other.item() == pytest.approx(loss.item(), abs=1e-7)) == (key not in AGGREGATIONS[name].reads), key


@pytest.mark.parametrize("name", list(AGGREGATIONS))
def test_token_level_means_an_empty_row_changes_nothing(name):
    """A token-level normaliser ignores a row without valid tokens (a dropped group); a per-completion
    normaliser (B) counts it, so zero-variance filtering is valid exactly with the token-level ones.
    token_mean_local ignores it within this one micro-batch, yet is not token-level: a micro-batch the
    filter empties still counts in its 1/GA division (``test_group_filters_refuse_the_micro_batch_token_mean``)."""
    per_token, mask = _batch()
    kw = dict(max_completion_length=5)
    padded = aggregate(torch.cat([per_token, torch.ones(1, 5)]), torch.cat([mask, torch.zeros(1, 5)]), name, **kw)
    same = padded.item() == pytest.approx(aggregate(per_token, mask, name, **kw).item(), abs=1e-7)
    assert same == (AGGREGATIONS[name].token_level or name == "token_mean_local")
    if not AGGREGATIONS[name].token_level:
        with pytest.raises(ConfigError, match=" or ".join(TOKEN_LEVEL)):
            build_spec({"sampling": "zero_variance_filter", "aggregation": name})
    else:
        build_spec({"sampling": "zero_variance_filter", "aggregation": name})
