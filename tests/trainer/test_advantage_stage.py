"""The advantage stage (``RolloutStages.advantages``) builds one ``AdvantageInputs`` record and calls
``algorithms.compute_advantages`` once, whatever the method: the inputs an estimator's entry names
come from their providers (the critic's values at generation for GAE among them), and a
rollout_func that supplies inputs of its own (``advantage_inputs``) has them reach the estimator,
so a rollout the trainer has never heard of works unchanged (a test's own here, not grpolab's
``EpisodeRollout``). The trainer is a stand-in with the public state the stage reads."""

from types import SimpleNamespace

import pytest
import torch

from grpolab import algorithms
from grpolab.algorithms import AdvantageInputs, gigpo
from grpolab.algorithms import advantages as adv
from grpolab.method.spec import build_spec
from grpolab.trainer.estimator_inputs import EstimatorInputs
from grpolab.trainer.rollouts import Generated, RolloutRow
from grpolab.trainer.stages import Rollout, RolloutStages

G, T = 2, 4
REWARDS = torch.tensor([[1.0], [0.0], [0.5], [0.25]])   # (N, K = 1)
LENGTHS = [4, 3, 2, 4]
VALUES = torch.tensor([[0.2, 0.4, 0.6, 0.1], [0.3, -0.2, 0.5, 9.0], [0.1, 0.1, 7.0, 7.0], [0.0, 0.5, 0.5, 0.5]])


class _Critic:
    """The critic's public ``values``; records each call's ``grad``."""

    def __init__(self):
        self.grads = []

    def values(self, batch: dict, grad: bool) -> torch.Tensor:
        self.grads.append(grad)
        return VALUES.clone()


class _OwnEpisodes:
    """A rollout_func of this test's own: it supplies the ``episodes`` input and records a curve."""

    def __init__(self, episodes: gigpo.Episodes):
        self.episodes, self.widths = episodes, []

    def advantage_inputs(self, spec, width: int, record_curve) -> dict:
        self.widths.append(width)
        record_curve("own/episodes", float(len(self.episodes.step_rewards)))
        return {"episodes": self.episodes}


def _trainer(spec, rollout_func=None, critic=None):
    trainer = SimpleNamespace(spec=spec, accelerator=SimpleNamespace(num_processes=1), tracker=None,
                              rollout_func=rollout_func, critic=critic, curves={})
    trainer.record_curve = lambda key, value: trainer.curves.setdefault(key, []).append(value)
    trainer.estimator_inputs = EstimatorInputs(trainer, score_greedy=None)
    return trainer


def _mask() -> torch.Tensor:
    return (torch.arange(T).unsqueeze(0) < torch.tensor(LENGTHS).unsqueeze(1)).float()


def _rollout(penalty: torch.Tensor | None = None) -> Rollout:
    mask = _mask()
    out = {"completion_ids": torch.zeros(4, T, dtype=torch.long), "completion_mask": mask.long(),
           "prompt_ids": torch.zeros(4, 2, dtype=torch.long), "prompt_mask": torch.ones(4, 2, dtype=torch.long)}
    rows = [RolloutRow(False, n, False, f"p{i // G}", "c") for i, n in enumerate(LENGTHS)]
    return Rollout(out, REWARDS, rows, Generated(REWARDS, rows, None), 0, G, mask, penalty)


@pytest.fixture
def calls(monkeypatch):
    """Every ``compute_advantages`` call of the stage: (spec, inputs)."""
    seen, original = [], algorithms.compute_advantages

    def spy(spec, inputs):
        seen.append((spec, inputs))
        return original(spec, inputs)
    monkeypatch.setattr(algorithms, "compute_advantages", spy)
    return seen


def test_gae_reads_the_critics_values_from_its_provider_through_compute_advantages(calls):
    spec = build_spec({"advantage": "gae", "gae_lambda": 0.95})
    critic, rollout = _Critic(), _rollout()
    scored = RolloutStages(_trainer(spec, critic=critic)).advantages(rollout, [{}] * 4)
    [(_, inputs)] = calls
    assert critic.grads == [False] and torch.equal(inputs.old_values, VALUES)
    advantages, returns = adv.gae(REWARDS.view(-1), VALUES, rollout.mask, spec.gae_gamma, 0.95, spec.gae_lambda_critic)
    assert torch.equal(scored.advantages, advantages) and torch.equal(scored.returns, returns)
    assert torch.equal(scored.old_values, VALUES)   # the centre of the value loss's clipping


def test_vapos_gae_with_a_reward_side_kl_and_whitening_on_a_fixed_batch(calls):
    """The stage's GAE end to end: the reward-side KL per token (0.05 on the model tokens, garbage on
    padding that must not leak) goes in as the token penalty, VAPO's lambda 1 - 1 / (0.5 |o|) is
    0.5, 1/3, 0 and 0.5 for 4, 3, 2 and 4 tokens, and the advantages are whitened over the 13 valid
    tokens (std with N - 1). Numbers: the formulas of ``adv.gae`` evaluated in plain floats, e.g. row 2
    (lambda 0): deltas -0.05 + 0.9 * 0.1 - 0.1 = -0.06 and -0.05 + 0.5 - 0.1 = 0.35."""
    spec = build_spec({"advantage": "gae", "gae_length_alpha": 0.5, "whiten_advantages": True, "gae_gamma": 0.9,
                       "gae_lambda_critic": 0.95})
    penalty = torch.where(_mask().bool(), torch.tensor(0.05), torch.tensor(3.0))
    trainer = _trainer(spec, critic=_Critic())
    scored = RolloutStages(trainer).advantages(_rollout(penalty), [{}] * 4)
    [(_, inputs)] = calls
    assert inputs.token_penalty is penalty
    advantages = [[0.2662482, -0.0015224, -0.482609, 2.151989], [-1.051836, 1.0878934, -1.4377309, 0.0],
                  [-0.1813289, 0.8699462, 0.0, 0.0], [0.7607482, -0.5550444, -0.6300439, -0.7967095]]
    targets = [[0.5088484, 0.6325713, 0.76675, 0.95], [-0.1190637, -0.07025, -0.05, 0.0], [0.33925, 0.45, 0.0, 0.0],
               [0.0538896, 0.0951925, 0.1435, 0.2]]
    torch.testing.assert_close(scored.advantages, torch.tensor(advantages), atol=1e-6, rtol=0)
    torch.testing.assert_close(scored.returns, torch.tensor(targets), atol=1e-6, rtol=0)
    assert trainer.curves["kl_reward_penalty"] == [pytest.approx(0.05 * sum(LENGTHS) / 4)]


def test_a_rollouts_own_inputs_reach_compute_advantages(calls):
    """GiGPO's step term from a rollout the trainer knows only by its ``advantage_inputs``."""
    turn_index = torch.tensor([[0, 0, 1, 1], [0, 0, 0, -1], [0, 1, -1, -1], [0, 1, 1, 1]])
    episodes = gigpo.Episodes([[0.0, 1.0], [0.0], [0.0, 0.5], [0.25, 0.0]], [[0, 1], [0], [2, 3], [2, 4]], turn_index)
    spec = build_spec({"advantage": "group_mean", "step_omega": 1.0, "step_gamma": 0.5})
    own = _OwnEpisodes(episodes)
    trainer = _trainer(spec, rollout_func=own)
    scored = RolloutStages(trainer).advantages(_rollout(), [{}] * 4)
    [(_, inputs)] = calls
    assert inputs.episodes is episodes and own.widths == [T] and trainer.curves["own/episodes"] == [4.0]
    expected = algorithms.compute_advantages(spec, AdvantageInputs(REWARDS, G, episodes=episodes)).advantages
    assert expected.shape == (4, T) and torch.equal(scored.advantages, expected)
    assert scored.old_values is None and scored.returns is None


def test_without_a_critic_or_a_rollouts_inputs_the_record_has_neither(calls):
    spec = build_spec({"advantage": "group_std"})
    scored = RolloutStages(_trainer(spec)).advantages(_rollout(), [{}] * 4)
    [(_, inputs)] = calls
    assert inputs.old_values is None and inputs.episodes is None and not inputs.provided
    expected = algorithms.compute_advantages(spec, AdvantageInputs(REWARDS, G)).advantages
    assert torch.equal(scored.advantages, expected) and scored.returns is None
