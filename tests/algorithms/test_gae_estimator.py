"""The critic axis through ``compute_advantages``: the registered ``gae`` function reads the critic's
values at generation (``AdvantageInputs.old_values``, supplied by the trainer's ``critic_values``
provider) and returns GAE's per-token advantages and value targets, under PPO's fixed lambda,
VAPO's length-adaptive lambda and whitening, on one fixed batch.

The batch: rewards (1, 0, 0.5) over 4, 3 and 2 valid tokens, a reward-side KL of 0.05 per token,
and values that are garbage on padding (which must not leak). The reference numbers are the
formulas of ``algorithms.advantages.gae`` evaluated on it; e.g. row 1 under PPO (lambda_critic 1):
per-token rewards (-0.05, -0.05, -0.05), so R = (-0.15, -0.1, -0.05), and its last delta is
-0.05 + 0 - V_2 = -0.55."""

import pytest
import torch

from grpolab.algorithms import AdvantageInputs, Estimate, compute_advantages
from grpolab.algorithms import advantages as adv
from grpolab.method.spec import build_spec

REWARDS = torch.tensor([1.0, 0.0, 0.5])
VALUES = torch.tensor([[0.2, 0.4, 0.6, 0.1], [0.3, -0.2, 0.5, 9.0], [0.1, 0.1, 7.0, 7.0]])
MASK = torch.tensor([[1.0, 1, 1, 1], [1, 1, 1, 0], [1, 1, 0, 0]])
PENALTY = torch.full((3, 4), 0.05)

# (axes, advantages, value targets)
CASES = {
    "ppo": ({"gae_lambda": 0.95, "gae_gamma": 1.0},
            [[0.5248937, 0.3946249, 0.2574999, 0.85], [-0.428875, 0.1275, -0.55, 0.0], [0.2825, 0.35, 0.0, 0.0]],
            [[0.8, 0.85, 0.9, 0.95], [-0.15, -0.1, -0.05, 0.0], [0.4, 0.45, 0.0, 0.0]]),
    # lambda = 1 - 1 / (0.5 |o|): 0.5, 1/3 and 0 for 4, 3 and 2 tokens
    "vapo": ({"gae_length_alpha": 0.5, "gae_lambda_critic": 1.0},
             [[0.19375, 0.0875, -0.125, 0.85], [-0.3944445, 0.4666666, -0.55, 0.0], [-0.05, 0.35, 0.0, 0.0]],
             [[0.8, 0.85, 0.9, 0.95], [-0.15, -0.1, -0.05, 0.0], [0.4, 0.45, 0.0, 0.0]]),
    "whitened": ({"gae_lambda": 0.9, "gae_gamma": 0.99, "whiten_advantages": True, "gae_lambda_critic": 0.95},
                 [[0.6031058, 0.3445615, 0.0596514, 1.5688733], [-1.3854158, -0.0608706, -1.7138277, 0.0],
                  [0.1874423, 0.3964801, 0.0, 0.0]],
                 [[0.701174, 0.7776438, 0.848425, 0.95], [-0.1278746, -0.0722751, -0.05, 0.0], [0.378175, 0.45, 0.0, 0.0]]),
}


def _spec(axes: dict):
    return build_spec({"advantage": "gae", **axes})


def _estimate(axes: dict, **given) -> Estimate:
    inputs = {"mask": MASK, "token_penalty": PENALTY, "old_values": VALUES, **given}
    return compute_advantages(_spec(axes), AdvantageInputs(REWARDS, 3, **inputs))


@pytest.mark.parametrize("case", list(CASES))
def test_gae_advantages_and_value_targets_on_a_fixed_batch(case):
    axes, advantages, targets = CASES[case]
    estimate = _estimate(axes)
    torch.testing.assert_close(estimate.advantages, torch.tensor(advantages), atol=1e-6, rtol=0)
    torch.testing.assert_close(estimate.value_targets, torch.tensor(targets), atol=1e-6, rtol=0)


def test_vapos_lambda_adapts_to_each_completions_length():
    assert adv.length_adaptive_lambda(MASK, 0.5).flatten().tolist() == pytest.approx([0.5, 1 / 3, 0.0])
    fixed = _estimate({"gae_lambda": 0.5, "gae_lambda_critic": 1.0}).advantages
    adaptive = _estimate(CASES["vapo"][0]).advantages
    assert torch.equal(adaptive[0], fixed[0]) and not torch.equal(adaptive[1:], fixed[1:])   # row 0's lambda is 0.5


def test_whitened_advantages_have_zero_mean_and_unit_std_over_valid_tokens():
    valid = _estimate(CASES["whitened"][0]).advantages[MASK.bool()]
    assert valid.mean().item() == pytest.approx(0.0, abs=1e-6) and valid.std().item() == pytest.approx(1.0, abs=1e-4)


def test_this_processs_rows_of_the_gathered_rewards():
    """Several processes: the rewards are gathered, the values and mask this process's rows."""
    whole = _estimate(CASES["ppo"][0])
    local = compute_advantages(_spec(CASES["ppo"][0]), AdvantageInputs(
        REWARDS, 3, mask=MASK[1:], token_penalty=PENALTY[1:], old_values=VALUES[1:], local_rows=slice(1, 3)))
    assert torch.equal(local.advantages, whole.advantages[1:]) and torch.equal(local.value_targets, whole.value_targets[1:])


def test_without_the_critics_values_or_with_an_unscorable_reward_it_is_refused():
    with pytest.raises(ValueError, match=r"advantage=gae needs the critic's values at generation .*critic_values"):
        _estimate(CASES["ppo"][0], old_values=None)
    with pytest.raises(ValueError, match="advantage=gae: a reward function returned None .* does not define"):
        compute_advantages(_spec({}), AdvantageInputs(torch.tensor([1.0, float("nan"), 0.5]), 3, mask=MASK,
                                                      old_values=VALUES))


def test_estimators_without_a_critic_have_no_value_targets():
    estimate = compute_advantages(build_spec({}), AdvantageInputs(REWARDS, 3))
    assert isinstance(estimate, Estimate) and estimate.value_targets is None
