"""The aggregation registry's contract: one entry per aggregation (grpolab.method.aggregations) holds
its facts, one function per entry (grpolab.algorithms.aggregations), and every other place derives
from it. Adding an aggregation = its entry, its function, and its hand-computed test in
test_algorithms.py; this file checks it against every claim its entry makes."""

from __future__ import annotations

import pytest
import torch

from grpolab.algorithms.aggregations import AGGREGATION_FUNCTIONS, aggregate
from grpolab.errors import ConfigError
from grpolab.method.aggregations import AGGREGATIONS, TOKEN_LEVEL
from grpolab.method.requirements import REQUIREMENTS
from grpolab.method.spec import AXIS_CHOICES, build_spec
from grpolab.method.trl_names import TRL_LOSS_TYPES
from registry_grep import PACKAGE, lists_naming


def test_one_function_per_entry_and_one_entry_per_function():
    assert sorted(AGGREGATION_FUNCTIONS) == sorted(AGGREGATIONS)
    assert AXIS_CHOICES["aggregation"] == tuple(AGGREGATIONS)


@pytest.mark.parametrize("name", list(AGGREGATIONS))
def test_every_entry_is_complete(name):
    """Function, requirement, TRL mapping (or a reason why TRL has none), source with its formula."""
    entry = AGGREGATIONS[name]
    assert callable(AGGREGATION_FUNCTIONS[name])
    assert (REQUIREMENTS.get(("aggregation", name)) is None) == (entry.inert_when is None)
    assert (entry.trl is None) != (entry.no_trl is None), "a TRL loss type, or a reason why none"
    if entry.trl:
        assert TRL_LOSS_TYPES[entry.trl]["surrogate"] == "clip"
        assert TRL_LOSS_TYPES[entry.trl]["aggregation"] == name
    assert set(entry.reads) <= {"token_normaliser", "max_completion_length"}
    assert entry.formula and entry.source


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


def test_unknown_aggregation_is_refused():
    with pytest.raises(ValueError, match="unknown aggregation"):
        aggregate(*_batch(), "token_sum")
    with pytest.raises(ConfigError, match="method.aggregation: unknown value 'token_sum'"):
        build_spec({"aggregation": "token_sum"})


def test_no_hand_written_list_of_aggregations_outside_the_registry():
    """A tuple/list/set/dict literal naming two or more aggregations would be a second home for an
    aggregation fact: derive it from the registry instead."""
    homes = {PACKAGE / "method" / "aggregations.py", PACKAGE / "algorithms" / "aggregations.py"}
    assert lists_naming(set(AGGREGATIONS), homes) == []
