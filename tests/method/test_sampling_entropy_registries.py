"""The sampling and entropy-bonus registries' contracts: one entry per value (grpolab.method.sampling_modes,
grpolab.method.entropy_modes) holds its facts, and every other place derives from them. Each value's
behaviour is tested where its hook lives: test_sampling.py / test_gfpo.py (the sampling modes),
test_entropy_control.py (the controller); this file checks each entry against every claim it makes."""

from __future__ import annotations

import ast
from types import SimpleNamespace

import pytest

from grpolab.errors import ConfigError
from grpolab.method.entropy_modes import ADAPTIVE_PARAMS, ENTROPY_MODES, trl_entropy_mode
from grpolab.method.requirements import requirement
from grpolab.method.sampling_modes import FILTER_PARAMS, SAMPLING_MODES, on_flat_groups, readers, sampling_params
from grpolab.method.spec import AXIS_CHOICES, SPEC_FIELDS, build_spec
from grpolab.method.trl_names import trl_recipe
from grpolab.tracking.naming import method_params
from grpolab.trainer.entropy_control import EntropyController
from grpolab.trainer.trl_settings import _NoEquivalent, trl_settings
from registry_grep import PACKAGE, compares, lists_naming

SAMPLING_HOMES = {PACKAGE / "method" / "sampling_modes.py"}
ENTROPY_HOMES = {PACKAGE / "method" / "entropy_modes.py"}


def _run(spec):
    return SimpleNamespace(spec=spec, reuses_rollouts=False)


def _spec(**axes):
    extra = {"aggregation": "token_mean"} if SAMPLING_MODES[axes.get("sampling", "static")].drops_rows else {}
    return build_spec({**extra, **axes})


def test_the_axes_are_the_registries():
    assert AXIS_CHOICES["sampling"] == tuple(SAMPLING_MODES)
    assert AXIS_CHOICES["entropy_mode"] == tuple(ENTROPY_MODES)
    assert set(sampling_params()) | set(ADAPTIVE_PARAMS) <= set(SPEC_FIELDS)


@pytest.mark.parametrize("name", list(SAMPLING_MODES))
def test_every_sampling_entry_is_complete(name):
    """Source, TRL mapping or a reason, its params logged and acting exactly under it, its checks."""
    entry = SAMPLING_MODES[name]
    assert entry.source and entry.label
    assert entry.trl != (entry.no_trl is not None)
    spec = _spec(sampling=name)
    assert (trl_recipe(spec) is not None) == entry.trl
    for param in sampling_params():
        reads = param in entry.params or (param in FILTER_PARAMS and entry.filters_groups)
        assert requirement(param, getattr(spec, param)).holds(_run(spec)) == reads, param
        assert (name in readers(param)) == reads
        if param not in FILTER_PARAMS:
            assert (param in method_params(spec)) == reads, param
    assert on_flat_groups(spec).startswith(f"method.sampling={name}")
    assert entry.drops_flat_groups == (entry.filters_groups and not entry.regenerates)
    if entry.drops_rows:   # a normaliser that counts the dropped rows would shrink every update
        with pytest.raises(ConfigError, match=f"method.sampling={name} drops completions"):
            build_spec({"sampling": name, "aggregation": "seq_mean_token_mean"})
    if entry.retains:
        with pytest.raises(ConfigError, match=f"method.sampling={name} with surrogate=group_dpo"):
            _spec(sampling=name, surrogate="group_dpo")


def test_the_dynamic_cap_is_said_with_its_value():
    spec = build_spec({"sampling": "dynamic", "max_sampling_rounds": 7})
    assert "max_sampling_rounds=7" in on_flat_groups(spec)


@pytest.mark.parametrize("name", list(ENTROPY_MODES))
def test_every_entropy_entry_is_complete(name):
    """Rule and source, TRL mapping or a reason read back by the drop-in, params logged and acting
    exactly under it, and the controller moving the coefficient exactly when the entry says."""
    entry = ENTROPY_MODES[name]
    assert entry.rule and entry.source
    assert (entry.trl is None) != (entry.no_trl is None)
    if entry.trl is not None:
        assert trl_entropy_mode(entry.trl["use_adaptive_entropy"]) == name
    spec = build_spec({"entropy_mode": name, "entropy_coef": 0.01, "entropy_target": 0.5})
    for param in ADAPTIVE_PARAMS:
        assert requirement(param, getattr(spec, param)).holds(_run(spec)) == (param in entry.params)
        assert (param in method_params(spec)) == (param in entry.params)
    assert isinstance(trl_settings(spec)["entropy_coef"], _NoEquivalent) == entry.adaptive
    ctl = EntropyController(spec)
    assert ctl.update(0.1) == entry.adaptive and (ctl.coef != 0.01) == entry.adaptive
    zero = EntropyController(build_spec({"entropy_mode": name, "entropy_target": 0.5}))
    zero.update(0.1)   # below the target: an adaptive controller raises the coefficient from 0
    assert (zero.applied() > 0) == entry.adaptive
    zero.update(0.9)   # above: it lowers it again; a gated one also withholds the bonus
    zero.update(0.9)
    assert zero.applied() == 0.0
    gate = EntropyController(build_spec({"entropy_mode": name, "entropy_coef": 0.01, "entropy_target": 0.5}))
    assert (gate.applied() == 0.0) == entry.gated   # before any step: no entropy measured, the gate is shut
    assert ("entropy_mode" in method_params(build_spec({"entropy_mode": name}))) == entry.gated


def test_no_hand_written_list_of_sampling_or_entropy_modes_outside_the_registries():
    """A collection literal naming two or more modes, or ``.sampling`` / ``.entropy_mode`` compared
    with a mode's name, would be a second home for a mode's fact: read the entry instead."""
    assert lists_naming(set(SAMPLING_MODES), SAMPLING_HOMES, compares("sampling")) == []
    assert lists_naming(set(ENTROPY_MODES) - {"static"}, ENTROPY_HOMES, compares("entropy_mode")) == []
