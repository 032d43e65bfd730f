"""The registries of the sampling modes' settings (grpolab.method.sampling_options: sampling_filter,
sampling_cap_policy, gfpo_metric) and of GiGPO's episode normalisation (grpolab.method.episode_norms):
one entry per value holds its facts, one function per entry on the algorithms floor
(grpolab.algorithms.sampling_options, grpolab.algorithms.gigpo) is what the trainer's hook calls, and
a toy entry with its function is all a new value needs. Each value's hand-computed behaviour is tested
in test_sampling.py (filters, cap policies, GFPO) and test_gigpo.py (the populations)."""

from __future__ import annotations

import contextlib
import warnings
from types import SimpleNamespace

import pytest
import torch

from grpolab.algorithms import gigpo
from grpolab.algorithms import sampling_options as F
from grpolab.errors import ConfigError
from grpolab.method.episode_norms import EPISODE_NORMS, EpisodeNorm
from grpolab.method.requirements import requirement
from grpolab.method.sampling_modes import SAMPLING_MODES, readers
from grpolab.method.sampling_options import (GFPO_METRICS, REWARD, SAMPLING_FILTERS, SAMPLING_OPTIONS,
                                             SamplingOption)
from grpolab.method.spec import AXIS_CHOICES, AXIS_REGISTRIES, SPEC_FIELDS, MethodSpec, build_spec
from grpolab.method.table import methods_table
from grpolab.method.trl_names import trl_recipe
from grpolab.tracking.naming import method_params
from grpolab.trainer import sampling
from grpolab.trainer.dropin import check_episode_axes, check_needs
from registry_grep import PACKAGE, compares, lists_naming, toy_entry
from test_gigpo import _cfg, _task, _toy_episodes

FUNCTIONS = {"sampling_filter": F.FILTER_FUNCTIONS, "sampling_cap_policy": F.CAP_FUNCTIONS,
             "gfpo_metric": F.GFPO_SCORES}
REGISTERS = {"sampling_filter": F.register_filter, "sampling_cap_policy": F.register_cap,
             "gfpo_metric": F.register_score}
OPTIONS = [(axis, name) for axis, entries in SAMPLING_OPTIONS.items() for name in entries]
# the names the trainer's hooks give these values (trainer/sampling.py): compared there, they would
# bypass the function registries
ALIASES = {"sampling_filter": ("name", "metric"), "sampling_cap_policy": ("policy",), "gfpo_metric": ("metric",)}
HOMES = {PACKAGE / "method" / "sampling_options.py", PACKAGE / "algorithms" / "sampling_options.py",
         PACKAGE / "method" / "episode_norms.py"}


def _spec(**axes):
    extra = {"aggregation": "token_mean"} if SAMPLING_MODES[axes.get("sampling", "static")].drops_rows else {}
    return build_spec({**extra, **axes})


def test_every_named_axis_of_the_spec_is_a_registry():
    """Each MethodSpec field whose value is a name reads its values from a registry of entries
    (no fixed tuple of values): its default is an entry, and each entry is keyed by its name."""
    named = [f.name for f in SPEC_FIELDS.values() if isinstance(getattr(MethodSpec(), f.name), str)]
    assert sorted(named) == sorted(AXIS_REGISTRIES) == sorted(AXIS_CHOICES)
    for axis, entries in AXIS_REGISTRIES.items():
        assert SPEC_FIELDS[axis].default in entries and all(e.name == k for k, e in entries.items()), axis


def test_one_function_per_entry_and_one_entry_per_function():
    for axis, entries in SAMPLING_OPTIONS.items():
        assert sorted(FUNCTIONS[axis]) == sorted(entries), axis
        assert AXIS_CHOICES[axis] == tuple(entries) and SPEC_FIELDS[axis].default in entries
    assert sorted(gigpo.EPISODE_NORM_FUNCTIONS) == sorted(EPISODE_NORMS)
    assert AXIS_CHOICES["episode_norm"] == tuple(EPISODE_NORMS)
    assert not EPISODE_NORMS[SPEC_FIELDS["episode_norm"].default].per_turn


@pytest.mark.parametrize("axis, name", OPTIONS)
def test_every_sampling_option_is_complete(axis, name):
    """Function, rule and source, the requirement of a mode that reads it, logged under that mode,
    no TRL setting (with the reason), and what it needs beyond the mode enforced where it is read."""
    entry = SAMPLING_OPTIONS[axis][name]
    assert callable(FUNCTIONS[axis][name]) and entry.rule and entry.source and entry.no_trl
    modes = readers(axis)
    assert modes and f"{axis}={name}" in methods_table()
    for mode in SAMPLING_MODES:
        spec = _spec(sampling=mode, **{axis: name})
        assert requirement(axis, name).holds(SimpleNamespace(spec=spec, reuses_rollouts=False)) == (mode in modes)
    spec = _spec(sampling=modes[0], **{axis: name})
    # logged under its mode (sampling_filter: when away from its default, as tracking.naming has it)
    assert method_params(spec).get(axis, SPEC_FIELDS[axis].default) == name and trl_recipe(spec) is None
    if axis == "sampling_filter":   # the drop-in without correctness keeps groups on the reward instead
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            kept = check_needs("m", spec, has_correctness=False)
        assert kept.sampling_filter == (REWARD if entry.needs is not None else name)
        assert check_needs("m", spec, has_correctness=True).sampling_filter == name
    else:
        assert entry.needs is None


@pytest.mark.parametrize("name", list(EPISODE_NORMS))
def test_every_episode_norm_is_complete(name):
    """Function, formula and source, TRL's way (or the reason why none) matching the recipe, logged
    away from the default, and a per-turn population refused without multi-turn episodes."""
    entry = EPISODE_NORMS[name]
    assert callable(gigpo.EPISODE_NORM_FUNCTIONS[name]) and entry.formula and entry.source
    assert (entry.trl is None) != (entry.no_trl is None) and f"episode_norm={name}" in methods_table()
    spec = build_spec({"episode_norm": name})
    assert (trl_recipe(spec) is not None) == (entry.trl is not None)
    assert method_params(spec).get("episode_norm", SPEC_FIELDS["episode_norm"].default) == name
    assert entry.per_turn == (entry.needs is not None)
    refusal = pytest.raises(ConfigError, match=f"method.episode_norm={name}: .*multi-turn")
    with refusal if entry.per_turn else contextlib.nullcontext():
        _cfg({"base": "grpo", "episode_norm": name}, {"name": "addition"})
    with pytest.raises(ValueError, match="needs multi-turn episodes") if entry.per_turn else contextlib.nullcontext():
        check_episode_axes(spec, None)


def test_the_episode_rollout_calls_the_entrys_function():
    """finish() gives what the run's population function gives (episode: A^E as it came)."""
    rollout = gigpo_rollout()
    episode_adv = torch.tensor([0.5, -0.5])
    batch = gigpo.EpisodeBatch([1.0, 0.0], [1, 3], 2, std_norm=False, eps=1e-4, unbiased=True)
    for name in EPISODE_NORMS:
        out, _ = rollout.finish(build_spec({"advantage": "group_mean", "episode_norm": name}), episode_adv, 12)
        assert torch.equal(out, gigpo.EPISODE_NORM_FUNCTIONS[name](episode_adv, batch))


def gigpo_rollout():
    from grpolab.envs.trainer_rollout import EpisodeRollout
    rollout = EpisodeRollout(_task(), [])
    rollout.episodes, rollout.group_size = _toy_episodes([["A"], ["A", "B", "C"]], [[1.0], [0.0, 0.0, 0.0]]), 2
    return rollout


# -- toy entries, added the registries' way ----------------------------------------------------------

def _option(axis: str, name: str, fn):
    entry = SamplingOption(name, "a test's toy", "a test", no_trl="a test's toy")
    return toy_entry(SAMPLING_OPTIONS[axis], FUNCTIONS[axis], REGISTERS[axis], entry, fn)


def test_a_toy_sampling_filter_needs_only_its_entry_and_function():
    """Keeps a group when the signs of its rewards vary: values = [r > 0]."""
    total, correct = torch.tensor([0.5, 2.0, -1.0, 3.0]), torch.tensor([1.0, 1.0, 1.0, 1.0])
    with _option("sampling_filter", "toy_sign", lambda r, c: (r > 0).float()):
        spec = _spec(sampling="zero_variance_filter", sampling_filter="toy_sign")
        assert method_params(spec)["sampling_filter"] == "toy_sign"
        values = sampling.filter_values(spec.sampling_filter, total, correct)
        assert values.tolist() == [1.0, 1.0, 0.0, 1.0]
        assert (sampling.group_spread(values, 2) > 0).tolist() == [False, True]
    with pytest.raises(ConfigError, match="method.sampling_filter: unknown value 'toy_sign'"):
        _spec(sampling="zero_variance_filter", sampling_filter="toy_sign")


def test_a_toy_cap_policy_needs_only_its_entry_and_function():
    """At the cap: the informative groups, then the others in generation order."""
    def in_order(by_group, informative, target):
        rest = [i for i in range(by_group.size(0)) if i not in set(informative.tolist())]
        return torch.cat([informative, torch.tensor(rest[:target - len(informative)], dtype=torch.long)])
    r = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0])   # groups: mixed, all-1, all-0, mixed
    with _option("sampling_cap_policy", "toy_in_order", in_order):
        spec = _spec(sampling="dynamic", sampling_cap_policy="toy_in_order")
        assert method_params(spec)["sampling_cap_policy"] == "toy_in_order"
        groups, filled = sampling.select_groups(r, 2, 4, spec.sampling_cap_policy)
        assert groups.tolist() == [0, 3, 1, 2] and filled == 2
    assert "toy_in_order" not in AXIS_CHOICES["sampling_cap_policy"]


def test_a_toy_gfpo_metric_needs_only_its_entry_and_function():
    """Retains the longest: score = |o_i|."""
    lengths, rewards = torch.tensor([5, 2, 7, 2, 3, 9, 1, 4]), torch.zeros(8)
    with _option("gfpo_metric", "toy_longest", lambda lengths, rewards: lengths):
        spec = _spec(sampling="gfpo", gfpo_metric="toy_longest", gfpo_keep=2)
        assert method_params(spec)["gfpo_metric"] == "toy_longest"
        kept = sampling.gfpo_retained(lengths, rewards, 4, spec.gfpo_keep, spec.gfpo_metric)
        assert kept.nonzero().view(-1).tolist() == [0, 2, 5, 7]
    assert "toy_longest" not in GFPO_METRICS and "toy_longest" not in F.GFPO_SCORES


def test_a_toy_episode_norm_needs_only_its_entry_and_function():
    """A population that centres A^E on the group's best episode: A^E - max_g A^E."""
    def best_centred(episode_adv, batch):
        g = episode_adv.view(-1, batch.group_size)
        return (g - g.max(1, keepdim=True).values).view(-1)
    entry = EpisodeNorm("toy_best", "A^E - max_g A^E", "a test", no_trl="a test's toy")
    with toy_entry(EPISODE_NORMS, gigpo.EPISODE_NORM_FUNCTIONS, gigpo.register_episode_norm, entry, best_centred):
        spec = build_spec({"advantage": "group_mean", "episode_norm": "toy_best"})
        assert method_params(spec)["episode_norm"] == "toy_best"
        out, _ = gigpo_rollout().finish(spec, torch.tensor([0.5, -0.5]), 12)
        assert out.tolist() == [0.0, -1.0]
    with pytest.raises(ConfigError, match="method.episode_norm: unknown value 'toy_best'"):
        build_spec({"episode_norm": "toy_best"})


def test_a_function_needs_an_entry_and_an_entry_one_function():
    with pytest.raises(ValueError, match="gfpo metric 'shortest' has no entry in GFPO_METRICS"):
        F.register_score("shortest")(lambda lengths, rewards: -lengths)
    with pytest.raises(ValueError, match="episode norm 'step' has a function already"):
        gigpo.register_episode_norm("step")(lambda episode_adv, batch: episode_adv)


def test_unknown_values_are_refused_naming_the_valid_ones():
    with pytest.raises(ValueError, match="unknown sampling filter 'acc'; valid: accuracy, reward"):
        sampling.filter_values("acc", torch.zeros(2), torch.zeros(2))
    with pytest.raises(ValueError, match="unknown cap policy 'drop'; valid: fill, fail"):
        sampling.select_groups(torch.zeros(4), 2, 1, "drop")
    with pytest.raises(ValueError, match="unknown gfpo metric 'short'; valid: length, token_efficiency"):
        sampling.gfpo_retained(torch.ones(4), torch.zeros(4), 4, 2, "short")
    with pytest.raises(ConfigError, match="method.sampling_cap_policy: unknown value 'drop'; valid: fill, fail"):
        build_spec({"sampling_cap_policy": "drop"})


def test_no_hand_written_list_of_these_values_outside_the_registries():
    """A collection literal naming two or more values of one of these axes, or ``.<axis>`` compared
    with a value's name, would be a second home for a value's fact: read the entry instead."""
    for axis, entries in (*SAMPLING_OPTIONS.items(), ("episode_norm", EPISODE_NORMS)):
        assert lists_naming(set(entries), HOMES, compares(axis, ALIASES.get(axis, ()), set(entries))) == [], axis
