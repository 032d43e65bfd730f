"""The table of method settings (method/params.py, method/settings.py): one record per setting,
from which the range checks, the inert-setting warnings and the logged params all derive."""

import dataclasses
import re
from types import SimpleNamespace

import pytest

from grpolab.errors import ConfigError
from grpolab.method.advantages import Estimator, register_estimator, unregister_estimator
from grpolab.method.params import Param, declare
from grpolab.method.requirements import inert_notes, inert_settings
from grpolab.method.settings import AXIS_REGISTRIES, param_table
from grpolab.method.spec import SPEC_FIELDS, MethodSpec, build_spec, validate_spec
from grpolab.tracking.naming import method_params


def test_every_spec_field_has_one_record_and_every_record_a_field():
    assert sorted(param_table()) == sorted(SPEC_FIELDS)


def test_the_entries_that_declare_one_setting_agree_on_it():
    """Only ``off_policy`` may differ between two entries' declarations of one setting (cov_fraction:
    on-policy under clip_cov, off-policy under kl_cov); its range, doc and log policy are one fact."""
    seen: dict[str, Param] = {}
    for registry in AXIS_REGISTRIES.values():
        for entry in registry.values():
            for declared in (getattr(entry, "params", None), getattr(entry, "reads", None)):
                if not isinstance(declared, dict):   # an aggregation's reads name its inputs, not settings
                    continue
                for name, p in declared.items():
                    first = seen.setdefault(name, p)
                    assert dataclasses.replace(p, off_policy=False) == dataclasses.replace(first, off_policy=False), name


@pytest.mark.parametrize("name, value", [("eps_low", 1.5), ("cov_fraction", 0.0), ("gfpo_keep", 1), ("gae_gamma", 0.0),
                                         ("vespo_lambda_pos", 0.0), ("top_entropy_quantile", 0.0)])
def test_a_value_out_of_its_records_range_is_refused_naming_the_setting_and_the_range(name, value):
    p = param_table()[name]
    with pytest.raises(ConfigError, match=re.escape(f"method.{name}: must be {p.valid()}") + f".*got {value}$"):
        build_spec({name: value})


# -- a new axis value with one new setting, from its one declaration ---------------------------------

_TOY = Param("toy_alpha", "the toy estimator's baseline weight", low=0, high=1)
ToySpec = dataclasses.make_dataclass("ToySpec", [("toy_alpha", float, 0.25)], bases=(MethodSpec,), frozen=True)


@pytest.fixture
def toy_estimator():
    register_estimator(Estimator("toy_weighted", params=declare(_TOY), no_trl="a test's estimator"))
    try:
        yield
    finally:
        unregister_estimator("toy_weighted")


def _run(**axes):
    return SimpleNamespace(spec=ToySpec(**axes), reuses_rollouts=True)


def test_a_registered_value_brings_its_setting_checked_logged_and_warned_inert(toy_estimator):
    """The estimator's entry declares toy_alpha (its type and default: the spec's field); nothing
    else names it, yet it is range-checked, logged under its reader and warned inert elsewhere."""
    with pytest.raises(ConfigError, match=r"^method\.toy_alpha: must be in \[0, 1\], got 2\.0$"):
        validate_spec(ToySpec(advantage="toy_weighted", toy_alpha=2.0))
    validate_spec(ToySpec(advantage="toy_weighted", toy_alpha=0.5))
    assert method_params(ToySpec(advantage="toy_weighted"))["toy_alpha"] == 0.25
    assert "toy_alpha" not in method_params(ToySpec(toy_alpha=0.5))
    assert inert_settings(_run(advantage="toy_weighted", toy_alpha=0.5)) == []
    assert inert_settings(_run(toy_alpha=0.5)) == ["toy_alpha=0.5"]
    assert inert_notes(_run(toy_alpha=0.5)) == ["method.toy_alpha=0.5 needs advantage toy_weighted and is inert in "
                                                "this run: set method.advantage: toy_weighted"]


def test_spec_hashes_stay_what_runs_recorded():
    """A setting added after hashes were recorded is ``late`` on its Param (left out at its default):
    the hashes of the neutral spec, of a spec setting late settings, and of registered methods
    stay those stored with existing runs and studies."""
    from grpolab.method.registry import METHODS
    assert MethodSpec().spec_hash() == "6cc68e8fea5e"
    assert MethodSpec(step_omega=0.5, vespo_k_pos=1.0, gfpo_keep=4).spec_hash() == "707686641f06"
    recorded = {"grpo": "5e4c979a5d67", "dapo": "dab91856fb9f", "gigpo": "fb8608653627", "vespo": "ba52671125d4",
                "gfpo": "662fb7a0b030", "dro": "00b1fd793341", "vapo": "007418c561d7", "ppo": "c1c948220d28"}
    assert {name: METHODS[name].spec().spec_hash() for name in recorded} == recorded
