"""The registries of the sampling modes' settings (grpolab.method.sampling_options: sampling_filter,
sampling_cap_policy, gfpo_metric) and of GiGPO's episode normalisation (grpolab.method.episode_norms):
one entry per value holds its facts, one function per entry on the algorithms floor
(grpolab.algorithms.sampling_options, grpolab.algorithms.gigpo) is what the trainer's hook calls, and
a toy entry with its function is all a new value needs (each entry's generic checks, the toys and the
lint: test_registry_contract.py). Each value's hand-computed behaviour is tested in test_sampling.py
(filters, cap policies, GFPO) and test_gigpo.py (the populations)."""

from __future__ import annotations

import contextlib
import warnings
from types import SimpleNamespace

import pytest
import torch

from grpolab.algorithms import AdvantageInputs, compute_advantages, gigpo
from grpolab.algorithms import sampling_options as F
from grpolab.errors import ConfigError
from grpolab.method.episode_norms import EPISODE_NORMS
from grpolab.method.requirements import requirement
from grpolab.method.sampling_modes import SAMPLING_MODES, readers
from grpolab.method.sampling_options import REWARD, SAMPLING_OPTIONS
from grpolab.method.spec import SPEC_FIELDS, build_spec
from grpolab.trainer.dropin import check_episode_axes, check_needs
from test_gigpo import _cfg, _task, _toy_episodes

OPTIONS = [(axis, name) for axis, entries in SAMPLING_OPTIONS.items() for name in entries]


def _spec(**axes):
    extra = {"aggregation": "token_mean"} if SAMPLING_MODES[axes.get("sampling", "static")].drops_rows else {}
    return build_spec({**extra, **axes})


def test_the_default_episode_norm_counts_each_episode_once():
    assert not EPISODE_NORMS[SPEC_FIELDS["episode_norm"].default].per_turn


@pytest.mark.parametrize("axis, name", OPTIONS)
def test_a_sampling_option_acts_under_the_modes_that_read_it(axis, name):
    """The requirement of a mode that reads it, and what it needs beyond the mode enforced where it
    is read (the generic checks of an entry: test_registry_contract.py)."""
    entry = SAMPLING_OPTIONS[axis][name]
    modes = readers(axis)
    assert modes
    for mode in SAMPLING_MODES:
        spec = _spec(sampling=mode, **{axis: name})
        assert requirement(axis, name).holds(SimpleNamespace(spec=spec, reuses_rollouts=False)) == (mode in modes)
    spec = _spec(sampling=modes[0], **{axis: name})
    if axis == "sampling_filter":   # the drop-in without correctness keeps groups on the reward instead
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            kept = check_needs("m", spec, has_correctness=False)
        assert kept.sampling_filter == (REWARD if entry.needs is not None else name)
        assert check_needs("m", spec, has_correctness=True).sampling_filter == name
    else:
        assert entry.needs is None


@pytest.mark.parametrize("name", list(EPISODE_NORMS))
def test_a_per_turn_episode_norm_is_refused_without_multi_turn_episodes(name):
    """A per-turn population needs multi-turn episodes: refused by the config and by the drop-in
    (the generic checks of an entry: test_registry_contract.py)."""
    entry = EPISODE_NORMS[name]
    spec = build_spec({"episode_norm": name})
    assert entry.per_turn == (entry.needs is not None)
    refusal = pytest.raises(ConfigError, match=f"method.episode_norm={name}: .*multi-turn")
    with refusal if entry.per_turn else contextlib.nullcontext():
        _cfg({"base": "grpo", "episode_norm": name}, {"name": "addition"})
    with pytest.raises(ValueError, match="needs multi-turn episodes") if entry.per_turn else contextlib.nullcontext():
        check_episode_axes(spec, None)


def test_compute_advantages_on_episodes_calls_the_entrys_function():
    """With the episodes input, compute_advantages gives what the run's population function gives
    for the estimator's A^E (group_mean of the returns 1 and 0: +-0.5; episode: A^E as it came)."""
    episode_adv = torch.tensor([0.5, -0.5])
    batch = gigpo.EpisodeBatch([1.0, 0.0], [1, 3], 2, std_norm=False, eps=1e-4, unbiased=True)
    for name in EPISODE_NORMS:
        out = gigpo_advantages(build_spec({"advantage": "group_mean", "episode_norm": name}))
        assert torch.equal(out, gigpo.EPISODE_NORM_FUNCTIONS[name](episode_adv, batch))


def gigpo_advantages(spec, width: int = 12) -> torch.Tensor:
    """``compute_advantages`` on two toy episodes (returns 1 and 0, one and three turns) with the
    episodes input their rollout supplies."""
    from grpolab.envs.trainer_rollout import EpisodeRollout
    rollout = EpisodeRollout(_task(), [])
    rollout.episodes, rollout.group_size = _toy_episodes([["A"], ["A", "B", "C"]], [[1.0], [0.0, 0.0, 0.0]]), 2
    given = rollout.advantage_inputs(spec, width, lambda key, value: None)
    returns = torch.tensor([e.total_reward for e in rollout.episodes])
    return compute_advantages(spec, AdvantageInputs.of(returns, 2, **given)).advantages


def test_a_function_needs_an_entry_and_an_entry_one_function():
    with pytest.raises(ValueError, match="gfpo metric 'shortest' has no entry in GFPO_METRICS"):
        F.register_score("shortest")(lambda lengths, rewards: -lengths)
    with pytest.raises(ValueError, match="episode norm 'step' has a function already"):
        gigpo.register_episode_norm("step")(lambda episode_adv, batch: episode_adv)
