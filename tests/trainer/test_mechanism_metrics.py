"""Issue 24 part 7: the curves that show a DAPO rung's mechanism acting, by hand."""

import math

import pytest
import torch

from grpolab.algorithms import overlong_buffer, soft_overlong_penalty
from grpolab.tracking.metric_catalog import lookup, required_keys
from grpolab.trainer.metrics import rollout_metrics, soft_penalized_fraction


def _stats(lengths, overlong=None, cap=24):
    lengths = torch.tensor(lengths, dtype=torch.float32)
    n = lengths.numel()
    return rollout_metrics(torch.zeros(n), torch.zeros(n).bool(), lengths, lengths >= cap, 4, overlong=overlong)


def test_soft_penalized_fraction_counts_the_buffer_zone_by_hand():
    # cap 24, default L_cache = ceil(0.2 * 24) = 5: the zone is 19 < |o| <= 24 (20, 21, 24, 24)
    lengths = [3, 4, 19, 20, 24, 24, 21, 10]
    assert overlong_buffer(24) == 5
    assert _stats(lengths, overlong=(24, 0))["length/soft_penalized_fraction"] == 0.5
    # a configured L_cache of 2: 22 < |o| <= 24, only the two truncated rows
    assert _stats(lengths, overlong=(24, 2))["length/soft_penalized_fraction"] == 0.25
    # cap 30, L_cache ceil(6) = 6: 24 < |o|: none of these
    assert soft_penalized_fraction(torch.tensor(lengths), 30, 0) == 0.0
    assert "length/soft_penalized_fraction" not in _stats(lengths)   # no cap given, no curve


@pytest.mark.parametrize("cap,buffer", [(24, 0), (24, 2), (30, 0), (7, 3), (5, 0)])
def test_soft_penalized_fraction_is_where_eq13_penalises(cap, buffer):
    """The zone the metric counts is exactly where the punishment (DAPO eq. 13, the reward the
    trainer adds) is negative, for the same cap and configured buffer."""
    from grpolab.trainer.dropin import overlong_reward
    from grpolab.method.spec import build_spec
    spec = build_spec({"soft_overlong": True, "overlong_buffer": buffer})
    reward = overlong_reward(spec, cap)
    for length in range(1, cap + 1):
        penalty = reward(None, None, [[0] * length])[0]
        inside = soft_penalized_fraction(torch.tensor([float(length)]), cap, buffer)
        assert inside == float(penalty < 0), (length, penalty)
        assert penalty == pytest.approx(soft_overlong_penalty(torch.tensor([length]), cap,
                                                              overlong_buffer(cap, buffer)).item())


def test_length_std_by_hand():
    # mean 5, squared deviations 9 1 1 1 0 0 4 16 = 32; std (N-1) = sqrt(32 / 7)
    assert _stats([2, 4, 4, 4, 5, 5, 7, 9])["length/std"] == pytest.approx(math.sqrt(32 / 7))
    assert _stats([6, 6, 6, 6])["length/std"] == 0.0
    one = rollout_metrics(torch.zeros(1), torch.zeros(1).bool(), torch.tensor([3.0]), torch.zeros(1).bool(), 1)
    assert one["length/std"] == 0.0


def test_both_curves_are_defined_and_required_of_every_run():
    for key in ("length/std", "length/soft_penalized_fraction"):
        assert lookup(key).name == key and key in required_keys()


def test_bad_overlong_buffer_is_refused():
    with pytest.raises(ValueError, match="overlong buffer"):
        overlong_buffer(0)
    with pytest.raises(ValueError, match="overlong buffer"):
        overlong_buffer(24, -1)


def test_trained_group_curves_read_only_the_rows_gfpo_retains():
    """GFPO keeps 2 of 4: group 0 r = 1, 0, 1, 1 retains rows 2, 3 (r = 1, 1: A = 0, zero variance, all
    correct); group 1 r = 0, 1, 1, 0 retains rows 5, 7 (r = 1, 0: informative, mixed). Over all G rows
    neither group is zero-variance nor all-correct."""
    from grpolab.trainer.metrics import trained_metrics
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0])
    correct = rewards.bool()
    retained = torch.tensor([False, False, True, True, False, True, False, True])
    lengths = torch.full((8,), 5.0)
    got = trained_metrics(rewards, correct, lengths, retained, 4, retained)
    assert got["trained/groups/zero_variance"] == 0.5
    assert got["trained/groups/all_correct"] == 0.5 and got["trained/groups/all_wrong"] == 0.0
    everything = trained_metrics(rewards, correct, lengths, torch.ones(8, dtype=torch.bool), 4)
    assert everything["trained/groups/zero_variance"] == 0.0 and everything["trained/groups/all_correct"] == 0.0
