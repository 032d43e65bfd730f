"""GiGPO and multi-turn environments: hand-computed advantages, the environment contract, bad
input, and two real GiGPO steps on the grid world through TRL's rollout_func path."""

import dataclasses
import math
import subprocess
import sys
import warnings
from collections import Counter

import pytest
import torch
from transformers import TrainerCallback

from grpolab import algorithms
from grpolab.algorithms import AdvantageInputs, gigpo
from grpolab.algorithms.kl import kl_estimate
from grpolab.experiment.config import build_config
from grpolab.envs import EnvContractError, checked_step
from grpolab.envs.base import Episode
from grpolab.envs.rollout import Play, episode_metrics, run_episodes
from grpolab.envs.trainer_rollout import EpisodeRollout
from grpolab.errors import ConfigError
from grpolab.method.registry import METHODS
from grpolab.method.spec import build_spec
from grpolab.tasks import make_task

SQ2 = math.sqrt(2.0)


# -- advantages against hand-computed values ---------------------------------------------------
def test_discounted_returns_by_hand():
    assert gigpo.discounted_returns([0.0, 0.0, 1.0], 0.5) == pytest.approx([0.25, 0.5, 1.0])
    assert gigpo.discounted_returns([-0.1, -0.1, 1.0], 1.0) == pytest.approx([0.8, 0.9, 1.0])
    assert gigpo.discounted_returns([], 0.9) == []


# Two episode groups of G = 2. Group 0: episode 0 visits A, B, C; episode 1 visits A, C.
# Group 1 visits the same keys but must never share a step group with group 0.
KEYS = [["A", "B", "C"], ["A", "C"], ["A", "B"], ["A", "B"]]
REWARDS = [[0.0, 0.0, 1.0], [0.0, 1.0], [0.0, 0.0], [0.0, 0.0]]


def test_anchor_groups_recurring_states_singletons_and_episode_groups_kept_apart():
    ids = gigpo.anchor_groups(KEYS, 2)
    assert ids[0][0] == ids[1][0]            # A recurs in group 0: one step group of 2
    assert ids[0][2] == ids[1][1]            # C too
    sizes = Counter(i for row in ids[:2] for i in row)
    assert sorted(sizes.values()) == [1, 2, 2]                      # B is a singleton
    assert not set(i for row in ids[:2] for i in row) & set(i for row in ids[2:] for i in row)
    assert sorted(Counter(i for row in ids[2:] for i in row).values()) == [2, 2]
    stats = gigpo.anchor_metrics(ids)
    assert stats["anchor/groups"] == 5 and stats["anchor/group_size_mean"] == pytest.approx(9 / 5)
    assert stats["anchor/singleton_step_fraction"] == pytest.approx(1 / 9)
    assert stats["anchor/groups_size_1"] == pytest.approx(1 / 5) and stats["anchor/groups_size_2"] == pytest.approx(4 / 5)


def test_step_advantages_mean_only_and_mean_std_by_hand():
    returns = [gigpo.discounted_returns(r, 0.5) for r in REWARDS]   # [.25, .5, 1], [.5, 1], [0, 0], [0, 0]
    ids = gigpo.anchor_groups(KEYS, 2)
    mean_only = gigpo.step_advantages(returns, ids, std_norm=False)
    # A: returns (0.25, 0.5) -> -0.125, +0.125; B singleton -> 0; C: (1, 1) all equal -> 0
    assert mean_only[0] == pytest.approx([-0.125, 0.0, 0.0]) and mean_only[1] == pytest.approx([0.125, 0.0])
    assert mean_only[2] == [0.0, 0.0] and mean_only[3] == [0.0, 0.0]   # all-equal returns: no signal
    with_std = gigpo.step_advantages(returns, ids, std_norm=True, eps=1e-4)
    a = 0.125 / (0.125 * SQ2 + 1e-4)                                  # unbiased std of (0.25, 0.5) = 0.125 * sqrt 2
    assert with_std[0] == pytest.approx([-a, 0.0, 0.0]) and with_std[1] == pytest.approx([a, 0.0])
    assert all(math.isfinite(v) for row in with_std for v in row)
    biased = gigpo.step_advantages(returns, ids, std_norm=True, eps=0.0, unbiased=False)
    assert biased[1][0] == pytest.approx(1.0)                         # population std 0.125


def test_a_state_revisited_within_one_episode_joins_its_own_step_group_with_each_steps_return():
    # One episode group of G = 2. Episode 0 visits A, B, A (again), C and reaches the goal at the
    # end; episode 1 visits A, C. gamma = 0.5, sparse reward 1 at the last step.
    keys = [["A", "B", "A", "C"], ["A", "C"]]
    rewards = [[0.0, 0.0, 0.0, 1.0], [0.0, 1.0]]
    returns = [gigpo.discounted_returns(r, 0.5) for r in rewards]
    assert returns == [pytest.approx([0.125, 0.25, 0.5, 1.0]), pytest.approx([0.5, 1.0])]   # Eq. 5 per step
    ids = gigpo.anchor_groups(keys, 2)
    assert ids[0][0] == ids[0][2] == ids[1][0]                         # A: (0, 0), (0, 2), (1, 0)
    assert ids[0][3] == ids[1][1] and len({ids[0][0], ids[0][1], ids[0][3]}) == 3
    stats = gigpo.anchor_metrics(ids)                                  # sizes 3 (A), 1 (B), 2 (C)
    assert stats["anchor/groups"] == 3 and stats["anchor/group_size_mean"] == pytest.approx(2.0)
    assert stats["anchor/singleton_step_fraction"] == pytest.approx(1 / 6)
    # A's returns (0.125, 0.5, 0.5): mean 0.375; B singleton 0; C (1, 1) equal 0
    mean_only = gigpo.step_advantages(returns, ids, std_norm=False)
    assert mean_only == [pytest.approx([-0.25, 0.0, 0.125, 0.0]), pytest.approx([0.125, 0.0])]
    std_a = math.sqrt((0.25 ** 2 + 2 * 0.125 ** 2) / 2)                # unbiased std of A's returns
    with_std = gigpo.step_advantages(returns, ids, std_norm=True, eps=1e-4)
    assert with_std[0] == pytest.approx([-0.25 / (std_a + 1e-4), 0.0, 0.125 / (std_a + 1e-4), 0.0])
    # per token: the two visits of A in episode 0 get different step terms (turns 0 and 2)
    turn_index = torch.tensor([[0, -1, 1, -1, 2, -1, 3], [0, -1, 1, -1, -1, -1, -1]])
    A = gigpo.token_advantages(torch.zeros(2), mean_only, turn_index, omega=1.0)
    assert A[0].tolist() == pytest.approx([-0.25, 0, 0, 0, 0.125, 0, 0]) and A[1, 0].item() == pytest.approx(0.125)


def test_episode_norm_step_weights_each_episode_by_its_turns():
    # returns (1, 0, 0) over 1, 3 and 2 turns: 6 step rows, mean 1/6 (per episode it would be 1/3)
    mean_only = gigpo.step_row_episode_advantages([1.0, 0.0, 0.0], [1, 3, 2], 3, std_norm=False)
    assert mean_only.tolist() == pytest.approx([5 / 6, -1 / 6, -1 / 6])
    std = math.sqrt((1 * (5 / 6) ** 2 + 5 * (1 / 6) ** 2) / 5)       # sum T (R - mean)^2 / (6 - 1)
    with_std = gigpo.step_row_episode_advantages([1.0, 0.0, 0.0], [1, 3, 2], 3, std_norm=True, eps=1e-4)
    assert with_std.tolist() == pytest.approx([(5 / 6) / (std + 1e-4), (-1 / 6) / (std + 1e-4), (-1 / 6) / (std + 1e-4)])
    # equal turns: the same mean and population std as per episode (the N - 1 divisor counts rows)
    equal_turns = gigpo.step_row_episode_advantages([1.0, 0.0, 2.0, 2.0], [2, 2, 1, 4], 2, std_norm=True, unbiased=False)
    per_episode = algorithms.compute_advantages(build_spec({"advantage": "group_std", "std_unbiased": False}),
                                                AdvantageInputs(torch.tensor([1.0, 0.0]), 2)).advantages
    assert equal_turns[:2].tolist() == pytest.approx(per_episode.tolist(), rel=1e-6)
    assert equal_turns[2:].tolist() == [0.0, 0.0]                                      # all-equal returns
    episodes = _toy_episodes([["A"], ["A", "B", "C"]], [[1.0], [0.0, 0.0, 0.0]])
    spec = build_spec({"advantage": "group_mean", "episode_norm": "step"})
    out, _ = _with_episodes(spec, episodes, 12)                          # per episode it would be +-0.5
    assert out.tolist() == pytest.approx([0.75, -0.25])                # mean over 4 rows = 1/4


def test_token_advantages_by_turn_and_omega_zero_is_episode_level():
    episode_adv = torch.tensor([1.0, -1.0])
    step_adv = [[0.5, -0.25], [2.0]]
    # episode 0: turn 0 (2 tokens), env (3 tokens), turn 1 (2 tokens); episode 1: turn 0, then padding
    turn_index = torch.tensor([[0, 0, -1, -1, -1, 1, 1], [0, 0, -1, -1, -1, -1, -1]])
    A = gigpo.token_advantages(episode_adv, step_adv, turn_index, omega=2.0)
    assert A.tolist() == [[2.0, 2.0, 0, 0, 0, 0.5, 0.5], [3.0, 3.0, 0, 0, 0, 0, 0]]
    A0 = gigpo.token_advantages(episode_adv, [[9.0, 9.0], [9.0]], turn_index, omega=0.0)
    model = turn_index >= 0
    assert torch.equal(A0[model], episode_adv.view(-1, 1).expand_as(A0)[model])   # omega = 0: A^E on every model token


def test_omega_zero_leaves_the_episode_advantage_unchanged():
    episodes = _toy_episodes()
    ep_adv = algorithms.compute_advantages(build_spec({"advantage": "group_std"}),
                                           AdvantageInputs(torch.tensor([e.total_reward for e in episodes]), 2)).advantages
    out, stats = _with_episodes(build_spec({"advantage": "group_std", "step_omega": 0.0}), episodes, 9)
    assert torch.equal(out, ep_adv) and stats["anchor/groups"] == 5 and stats["episode/turns"] == pytest.approx(9 / 4)
    per_token, _ = _with_episodes(build_spec({"advantage": "group_mean", "step_omega": 1.0, "step_gamma": 0.5}), episodes, 9)
    assert per_token.shape == (4, 9)
    # episode 1, turn 0 (state A): A^E + (0.5 - 0.375); its env tokens 0
    assert per_token[1, 0].item() == pytest.approx(ep_adv[1].item() + 0.125)
    assert per_token[1, 1].item() == per_token[1, 0].item() and per_token[1, 2].item() == 0.0   # EOS; env token


# Two episode groups of G = 2 whose returns differ within each group (1 vs 0.4, 0.5 vs 0.1) and
# whose episodes run 2 or 3 turns; episode 2 revisits A at its third step.
MIXED_KEYS = [["A", "B", "C"], ["A", "C"], ["A", "B", "A"], ["A", "B"]]
MIXED_REWARDS = [[0.0, 0.0, 1.0], [-0.1, 0.5], [0.0, 0.2, 0.3], [0.1, 0.0]]
# per token (width 10): turn t's two model tokens at 3t, 3t + 1; an observation token, then padding
MIXED = {
    "gigpo": ({"advantage": "group_std", "step_omega": 1.0, "step_gamma": 0.5},
              [[1.4130484, 0.7069402, 1.413847], [-1.4130483, -1.413847], [0.5420628, 1.4136781, 1.7780186],
               [-1.6132245, -1.4136782]]),
    "per_turn_population": ({"advantage": "group_mean", "step_omega": 0.5, "step_gamma": 0.9, "episode_norm": "step"},
                            [[0.355, 0.24, 0.365], [-0.475, -0.485], [0.2343333, 0.2775, 0.1728333],
                             [-0.3271667, -0.3575]]),
}


@pytest.mark.parametrize("case", list(MIXED))
def test_compute_advantages_with_the_episodes_input_on_a_fixed_batch(case):
    """Eq. 8 per token through compute_advantages: the estimator's A^E of the returns, its population
    (episode_norm), plus omega times the anchor groups' step term, on every model token of a turn."""
    axes, by_turn = MIXED[case]
    episodes = _toy_episodes(MIXED_KEYS, MIXED_REWARDS)
    out, curves = _with_episodes(build_spec(axes), episodes, 10)
    expected = torch.zeros(4, 10)
    for i, turns in enumerate(by_turn):
        for t, value in enumerate(turns):
            expected[i, 3 * t:3 * t + 2] = value
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=0)
    assert curves == pytest.approx({
        "episode/turns": 2.5, "episode/success_rate": 0.75, "episode/truncated": 1.0, "episode/return": 0.5,
        "episode/model_tokens": 5.0, "anchor/groups": 5.0, "anchor/group_size_mean": 2.0,
        "anchor/singleton_step_fraction": 0.1, "anchor/groups_size_1": 0.2, "anchor/groups_size_2": 0.6,
        "anchor/groups_size_3to4": 0.2, "anchor/groups_size_5to8": 0.0, "anchor/groups_size_over8": 0.0})


def test_the_population_std_and_adv_eps_reach_both_levels_by_hand():
    """std_unbiased=False and adv_eps=0.1 through the episodes input, numbers from the formulas
    (gigpo.step_row_episode_advantages, step_advantages, token_advantages). Episode 0: states A, B,
    rewards 0, 1 (return 1, 2 turns); episode 1: state A, reward 0 (return 0, 1 turn)."""
    spec = build_spec({"advantage": "group_std", "episode_norm": "step", "step_omega": 1.0, "step_gamma": 0.5,
                       "std_unbiased": False, "adv_eps": 0.1})
    episodes = _toy_episodes([["A", "B"], ["A"]], [[0.0, 1.0], [0.0]])
    out, _ = _with_episodes(spec, episodes, 6)
    # A^E over step rows: returns (1, 0) counted 2 and 1 times; mean 2/3, population variance
    # (2 (1/3)^2 + (2/3)^2) / 3 = 2/9 (divided by the 3 rows, not by 3 - 1)
    std = math.sqrt(2) / 3
    ae = [(1 / 3) / (std + 0.1), (-2 / 3) / (std + 0.1)]
    # A^S: discounted returns (0 + 0.5 * 1, 1) and (0,); anchor group A holds 0.5 and 0: mean 0.25,
    # population std 0.25; B is a singleton (its std 0): (1 - 1) / (0 + 0.1) = 0
    a_s = 0.25 / (0.25 + 0.1)
    expected = torch.tensor([[ae[0] + a_s, ae[0] + a_s, 0.0, ae[0], ae[0], 0.0],
                             [ae[1] - a_s, ae[1] - a_s, 0.0, 0.0, 0.0, 0.0]])
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=0)


def test_the_turn_of_each_token_is_built_only_for_the_step_term():
    rollout = EpisodeRollout(_task(), [])
    rollout.episodes, rollout.group_size = _toy_episodes(), 2
    without = rollout.advantage_inputs(build_spec({"advantage": "group_std"}), 9, lambda key, value: None)
    with_step = rollout.advantage_inputs(build_spec({"advantage": "group_std", "step_omega": 1.0}), 9,
                                         lambda key, value: None)
    assert without["episodes"].turn_index is None and with_step["episodes"].turn_index.shape == (4, 9)
    assert without["episodes"].step_rewards == with_step["episodes"].step_rewards
    with pytest.raises(ValueError, match=r"step_omega=1: GiGPO's step term needs the turn of each completion token"):
        gigpo.episode_advantages(build_spec({"advantage": "group_std", "step_omega": 1.0}), torch.zeros(4),
                                 without["episodes"], 2)


def test_the_episodes_input_composes_the_gigpo_functions():
    """The same batch term by term: group_std's A^E of the returns, then A^E + omega * A^S by turn."""
    spec = build_spec(MIXED["gigpo"][0])
    episodes = _toy_episodes(MIXED_KEYS, MIXED_REWARDS)
    episode_adv = algorithms.compute_advantages(spec, AdvantageInputs(torch.tensor([1.0, 0.4, 0.5, 0.1]), 2)).advantages
    assert episode_adv.tolist() == pytest.approx([0.7069402, -0.7069401, 0.7068568, -0.7068569], abs=1e-6)
    ids = gigpo.anchor_groups(MIXED_KEYS, 2)
    step = gigpo.step_advantages([gigpo.discounted_returns(r, 0.5) for r in MIXED_REWARDS], ids, std_norm=True)
    turn_index = torch.full((4, 10), -1)
    for i, e in enumerate(episodes):
        turn_index[i, :len(e.turn_index)] = torch.tensor(e.turn_index)
    expected = gigpo.token_advantages(episode_adv, step, turn_index, 1.0)
    assert torch.equal(_with_episodes(spec, episodes, 10)[0], expected)


def test_a_batch_of_other_size_than_its_episodes_is_refused():
    episodes = gigpo.Episodes([[1.0], [0.0]], [[0], [0]], torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="compute_advantages: 2 episodes for 4 rows: the episodes input needs one "
                                         "episode per row of the whole batch"):
        algorithms.compute_advantages(build_spec({"advantage": "group_mean"}),
                                      AdvantageInputs(torch.tensor([1.0, 0.0, 1.0, 0.0]), 2, episodes=episodes))


def test_episodes_with_part_of_the_batch_as_this_processs_rows_are_refused():
    """The episode population and the step term are computed over the episodes given: with this
    process's rows a part of the batch (several processes) they would not be the rows the loss reads."""
    episodes = gigpo.Episodes([[1.0], [0.0], [0.5], [0.0]], [[0], [0], [1], [1]], torch.zeros(4, 3, dtype=torch.long))
    spec = build_spec({"advantage": "group_mean", "step_omega": 1.0})
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.0])
    with pytest.raises(ValueError, match=r"episodes input applies to the whole batch of 4 rows, but local_rows is "
                                         r"slice\(2, 4, None\): episodes are not gathered across processes"):
        algorithms.compute_advantages(spec, AdvantageInputs(rewards, 2, episodes=episodes, local_rows=slice(2, 4)))
    whole = algorithms.compute_advantages(spec, AdvantageInputs(rewards, 2, episodes=episodes, local_rows=slice(0, 4)))
    assert whole.advantages.shape == (4, 3)   # one process: its rows are the whole batch


def test_similarity_threshold_groups_near_identical_text_states():
    keys = [["abcdefgh"], ["abcdefgX"], ["zzzzzzzz"], ["abcdefgh"]]
    exact = gigpo.anchor_groups(keys, 4)
    assert len({row[0] for row in exact}) == 3
    loose = gigpo.anchor_groups(keys, 4, similarity=0.8)   # ratio("abcdefgh", "abcdefgX") = 0.875
    assert loose[0][0] == loose[1][0] == loose[3][0] != loose[2][0]


def test_unhashable_or_non_text_states_raise_one_line():
    with pytest.raises(ValueError, match="episode 1 step 0 is not hashable"):
        gigpo.anchor_groups([["A"], [["not", "hashable"]]], 2)
    with pytest.raises(ValueError, match="compares text states"):
        gigpo.anchor_groups([[(1, 2)], [(1, 2)]], 2, similarity=0.9)


# -- the environment contract -----------------------------------------------------------------
class _Env:
    def __init__(self, result):
        self.result = result

    def reset(self, seed):
        return "s:"

    def step(self, action):
        return self.result


@pytest.mark.parametrize("result, message", [
    (("o", 1.0, True), "must return \\(observation"),
    ((1, 1.0, True, "k"), "observation must be str"),
    (("o", float("nan"), True, "k"), "reward must be a finite number"),
    (("o", True, True, "k"), "reward must be a finite number"),
    (("o", 1.0, "yes", "k"), "done must be a bool"),
    (("o", 1.0, True, {"x": 1}), "not hashable"),
])
def test_malformed_steps_raise_one_line(result, message):
    with pytest.raises(EnvContractError, match=message) as info:
        checked_step(_Env(result), "u")
    assert "\n" not in str(info.value) and "_Env" in str(info.value)


class _NeverEnds:
    def reset(self, seed):
        self.t = 0
        return "s0:"

    def step(self, action):
        self.t += 1
        return f"s{self.t % 3}:", 0.0, False, self.t % 3


def test_an_episode_that_never_ends_is_truncated_at_max_turns_and_counted():
    from grpolab.world.models import build_model
    model, tokenizer = build_model("tiny", 0)
    episodes = run_episodes(model, tokenizer, _NeverEnds, ["s0:"] * 4, [0] * 4, Play(max_turns=5, action_tokens=2))
    assert [e.turns for e in episodes] == [5] * 4 and all(e.truncated for e in episodes)
    assert episode_metrics(episodes)["episode/truncated"] == 4.0
    for e in episodes:   # every token is the model's or the environment's, never both
        assert len(e.env_mask) == len(e.completion_ids) == len(e.turn_index)
        assert all((m == 1) == (t >= 0) for m, t in zip(e.env_mask, e.turn_index))
        assert e.state_keys[0] == ("reset", "s0:") and e.state_keys[1:] == [1, 2, 0, 1]


# -- bad input ----------------------------------------------------------------------------------
def _cfg(method="gigpo", task=None, **train):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return build_config({"name": "t", "method": method, "task": task or {"name": "gridworld"},
                             "model": {"preset": "tiny"}, "train": {"steps": 2, **train},
                             "eval": {"every": 0, "prompts": 8, "k": 2}, "tracking": {"enabled": False}})


@pytest.mark.parametrize("method, task, message", [
    ("gigpo", {"name": "addition"}, "method.step_omega > 0 .*needs a multi-turn environment task"),
    ({"base": "gigpo", "step_omega": -1.0}, None, "method.step_omega: must be >= 0"),
    ({"base": "gigpo", "anchor_similarity": 0.0}, None, "anchor_similarity: must be in \\(0, 1\\]"),
    ({"base": "gigpo", "advantage": "leave_one_out"}, None, "use advantage group_std or group_mean"),
    ({"base": "gigpo", "sampling": "dynamic"}, None, "only sampling=static"),
    ({"base": "gigpo", "step_omega": 0.0, "advantage": "gae"}, None, "not supported on multi-turn task"),
    ("gigpo", {"name": "gridworld", "size": 1}, "task.size: expected an integer in \\[2, 9\\]"),
    ("gigpo", {"name": "gridworld", "max_turns": 0}, "task.max_turns"),
    ("gigpo", {"name": "gridworld", "reward": "dense"}, "task.reward: unknown value 'dense'; valid: sparse, per_step"),
    ("gigpo", {"name": "gridworld", "walls": 3}, "task.walls: not a parameter of task 'gridworld'"),
    ({"base": "gigpo", "overlong_filter": True}, None, "method.overlong_filter: TRL's truncation test"),
    ({"base": "grpo", "episode_norm": "step"}, {"name": "addition"}, "method.episode_norm=step: .*multi-turn"),
    ({"base": "gigpo", "episode_norm": "step", "advantage": "batch_std", "step_omega": 0.0}, None,
     "episode_norm=step .*use advantage group_std or group_mean"),
    ({"base": "gigpo", "episode_norm": "step", "kl_coef": 0.1, "kl_placement": "reward"}, None,
     "episode_norm=step normalises the episode returns themselves"),
    ({"base": "gigpo", "episode_norm": "steps"}, None, "method.episode_norm: unknown value 'steps'; valid: episode, step"),
])
def test_bad_input_is_refused_with_one_line(method, task, message):
    with pytest.raises(ConfigError, match=message) as info:
        _cfg(method, task)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("section", ["train", "eval"])
def test_a_completion_cap_on_an_episode_task_is_refused_naming_the_section(section):
    data = {"method": "gigpo", "task": {"name": "gridworld", "max_turns": 3, "action_tokens": 2},
            section: {"max_completion_length": 64}, "tracking": {"enabled": False}}
    with pytest.raises(ConfigError, match=f"^{section}.max_completion_length: .*task.max_turns") as info:
        build_config(data)
    assert "\n" not in str(info.value)
    data[section] = {"max_completion_length": 0}                      # the default: episodes capped by turns
    assert build_config(data).eval.max_completion_length == make_task("gridworld", max_turns=3,
                                                                       action_tokens=2).max_completion_length


def test_step_settings_without_the_step_term_are_warned_inert():
    with pytest.warns(UserWarning, match="method.step_gamma=0.9 needs GiGPO's step-level advantage"):
        build_config({"method": {"base": "gigpo", "step_omega": 0.0, "step_gamma": 0.9}, "task": {"name": "gridworld"},
                      "tracking": {"enabled": False}})


def test_cli_exits_2_before_any_work(tmp_path):
    out = subprocess.run([sys.executable, "-m", "grpolab.cli", "--state", str(tmp_path), "run", "experiments/smoke.yaml",
                          "method=gigpo"], capture_output=True, text=True, cwd=_repo())
    assert out.returncode == 2 and "step_omega" in out.stderr and not (tmp_path / "mlflow.db").exists()


def test_methods_lists_gigpo_as_running_with_its_citation():
    assert not METHODS["gigpo"].missing
    out = subprocess.run([sys.executable, "-m", "grpolab.cli", "methods"], capture_output=True, text=True, cwd=_repo())
    assert out.returncode == 0
    rule = next(line for line in out.stdout.splitlines() if line.startswith("gigpo "))
    assert "group_std + 1 x anchor steps" in rule and "token_mean" in rule
    assert "gigpo (GiGPO): Feng et al. 2025, Group-in-Group Policy Optimization, arXiv:2505.10978" in out.stdout
    assert "not yet" not in out.stdout.split("gigpo (GiGPO)")[1].splitlines()[0]


# -- two real GiGPO steps on the grid world -----------------------------------------------------
class _Logs(TrainerCallback):
    def __init__(self):
        self.logs = []

    def on_log(self, args, state, control, logs=None, **kw):
        if logs and "loss" in logs:
            self.logs.append(dict(logs))


@pytest.mark.slow   # ~40 s alone, most of it the grid-world warm start (shared with the contract test's gigpo row)
def test_two_gigpo_steps_env_tokens_carry_no_loss_and_anchor_groups_have_expected_sizes(shared_state, monkeypatch):
    from grpolab.experiment.runner import run_experiment
    from grpolab.trainer.grpo_trainer import GrpoLabTrainer
    seen_inputs, seen_losses, supplied, estimated = [], [], [], []
    original_loss, original_inputs = GrpoLabTrainer._compute_loss, EpisodeRollout.advantage_inputs
    policy_loss, compute_advantages = algorithms.policy_loss, algorithms.compute_advantages

    def compute_loss(self, model, inputs):
        seen_inputs.append({k: inputs[k] for k in ("completion_mask", "tool_mask", "advantages")})
        return original_loss(self, model, inputs)

    def recording_policy_loss(spec, inputs):
        loss, stats = policy_loss(spec, inputs)
        grad = torch.autograd.grad(loss, inputs.logp, retain_graph=True)[0]
        seen_losses.append({"mask": inputs.mask.detach().clone(), "grad": grad, "stats": dict(stats),
                            "logp": inputs.logp.detach(), "ref": inputs.ref_logp, "entropies": inputs.entropies.detach()})
        return loss, stats

    def advantage_inputs(self, spec, width, record_curve):
        curves: dict = {}

        def record(key, value):
            curves[key] = value
            record_curve(key, value)
        given = original_inputs(self, spec, width, record)
        supplied.append((list(self.episodes), curves))
        return given

    def recording_compute_advantages(spec, x):
        estimate = compute_advantages(spec, x)
        episode_level = compute_advantages(spec, dataclasses.replace(x, episodes=None)).advantages   # A^E alone
        estimated.append((episode_level, estimate.advantages.clone(), spec))
        return estimate

    monkeypatch.setattr(GrpoLabTrainer, "_compute_loss", compute_loss)
    monkeypatch.setattr(algorithms, "policy_loss", recording_policy_loss)
    monkeypatch.setattr(EpisodeRollout, "advantage_inputs", advantage_inputs)
    monkeypatch.setattr(algorithms, "compute_advantages", recording_compute_advantages)
    cfg = _cfg("gigpo", None, group_size=4, prompts_per_rollout=4, learning_rate=0.001, minibatches=2)
    logs = _Logs()
    result = run_experiment(cfg, shared_state, callbacks=[logs])
    assert result.steps == 2 and len(supplied) == len(estimated) == 1 and len(seen_losses) == 2   # one rollout, two minibatches

    # environment tokens: attended (completion_mask 1) but never trained (tool_mask 0), zero gradient
    for inputs, call in zip(seen_inputs, seen_losses):
        cm, tm = inputs["completion_mask"], inputs["tool_mask"]
        env = (cm == 1) & (tm == 0)
        assert env.any() and torch.equal(call["mask"], (cm * tm).to(call["mask"].dtype))
        assert torch.all(call["grad"][env] == 0)
        assert torch.all(call["grad"][call["mask"] == 0] == 0) and (call["grad"][call["mask"] == 1] != 0).any()
        m = call["mask"]   # entropy and KL curves average over the model's tokens only
        assert call["stats"]["entropy"] == pytest.approx(float((call["entropies"] * m).sum() / m.sum()), rel=1e-5)
        kl = kl_estimate(call["logp"], call["ref"], "k3")
        assert call["stats"]["kl"] == pytest.approx(float((kl * m).sum() / m.sum()), rel=1e-5, abs=1e-9)

    # anchor groups: re-derived here from the episodes' own state keys
    (episodes, stats), (ep_adv, per_token, spec) = supplied[0], estimated[0]
    sizes = Counter((i // 4, key) for i, e in enumerate(episodes) for key in e.state_keys)
    assert stats["anchor/groups"] == len(sizes)
    assert stats["anchor/group_size_mean"] == pytest.approx(sum(sizes.values()) / len(sizes))
    assert stats["anchor/singleton_step_fraction"] == pytest.approx(
        sum(1 for s in sizes.values() if s == 1) / sum(sizes.values()))
    assert all(sizes[(g, episodes[4 * g].state_keys[0])] >= 4 for g in range(4))   # every episode starts there
    # per-token advantage = A^E + 1 x (discounted return - its anchor group's mean) / (std + eps), by turn
    groups: dict = {}
    for i, e in enumerate(episodes):
        for key, ret in zip(e.state_keys, gigpo.discounted_returns(e.rewards, spec.step_gamma)):
            groups.setdefault((i // 4, key), []).append(ret)
    for i, e in enumerate(episodes):
        for t, (key, ret) in enumerate(zip(e.state_keys, gigpo.discounted_returns(e.rewards, spec.step_gamma))):
            v = torch.tensor(groups[(i // 4, key)], dtype=torch.float64)
            std = v.std().item() if v.numel() > 1 else 0.0
            expected = ep_adv[i].item() + (ret - v.mean().item()) / (std + spec.adv_eps)
            first = e.turn_index.index(t)
            assert per_token[i, first].item() == pytest.approx(expected, abs=1e-4)
        assert all(per_token[i, j].item() == 0.0 for j, m in enumerate(e.env_mask) if m == 0)
    logged = logs.logs[0]
    assert logged["anchor/groups"] == stats["anchor/groups"] and "episode/success_rate" in logged
    assert logged["episode/turns"] == pytest.approx(sum(e.turns for e in episodes) / len(episodes))


# -- helpers ------------------------------------------------------------------------------------
def _repo():
    from pathlib import Path
    return Path(__file__).resolve().parents[2]


def _task():
    from grpolab.tasks import make_task
    return make_task("gridworld")


def _with_episodes(spec, episodes, width: int, group_size: int = 2):
    """``compute_advantages`` on the episodes' returns with the episodes input their rollout supplies,
    and the curves the rollout records."""
    rollout = EpisodeRollout(_task(), [])
    rollout.episodes, rollout.group_size = episodes, group_size
    curves: dict = {}
    given = rollout.advantage_inputs(spec, width, curves.__setitem__)
    returns = torch.tensor([e.total_reward for e in episodes])
    return algorithms.compute_advantages(spec, AdvantageInputs.of(returns, group_size, **given)).advantages, curves


def _toy_episodes(all_keys=KEYS, all_rewards=REWARDS):
    out = []
    for keys, rewards in zip(all_keys, all_rewards):
        e = Episode(prompt="p", seed=0)
        for t, (k, r) in enumerate(zip(keys, rewards)):
            e.completion_ids += [5, 2, 7]         # action, EOS, one observation token
            e.env_mask += [1, 1, 0]
            e.turn_index += [t, t, -1]
            e.actions.append("u")
            e.rewards.append(r)
            e.state_keys.append(k)
        e.done = e.success = rewards[-1] > 0
        out.append(e)
    return out
