"""One contract for every method axis's registry: one entry per value holds its facts, one function
per entry on the algorithms floor (where the axis has one), and every other place derives from them.
Each generic check is made here once, for every axis and every entry; where the axes differ (the
field that holds the requirement, the toy entry's function, how TRL names a value) the difference is
a row of ``AXES`` below. Each axis's own behaviour (formulas by hand, placement, on-policy ratio = 1,
...) is tested in its own file (test_advantage_registry.py, test_aggregations.py, ...)."""

from __future__ import annotations

import ast
import dataclasses
import math
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Callable

import pytest
import torch

from grpolab.algorithms import AdvantageInputs, compute_advantages, gigpo, LossInputs, policy_loss
from grpolab.algorithms import aggregations as AG
from grpolab.algorithms import estimators as E
from grpolab.algorithms import kl as KL
from grpolab.algorithms import ratios as RA
from grpolab.algorithms import sampler_corrections as SC
from grpolab.algorithms import sampling_options as F
from grpolab.algorithms import surrogates as SU
from grpolab.errors import ConfigError
from grpolab.experiment import engines
from grpolab.method import sampler_corrections as sampler
from grpolab.method.advantages import ADVANTAGES, Estimator, trl_advantage
from grpolab.method.aggregations import AGGREGATIONS
from grpolab.method.entropy_modes import ENTROPY_MODES, trl_entropy_mode
from grpolab.method.episode_norms import EPISODE_NORMS, EpisodeNorm
from grpolab.method.kl import KL_ESTIMATORS, KL_PLACEMENTS, TRL_KL, KlEstimator
from grpolab.method.ratios import RATIOS, Ratio, trl_ratio
from grpolab.method.requirements import REUSE, requirement
from grpolab.method.sampling_modes import SAMPLING_MODES, readers
from grpolab.method.sampling_options import SAMPLING_OPTIONS, SamplingOption
from grpolab.method.spec import AXIS_CHOICES, AXIS_REGISTRIES, SPEC_FIELDS, MethodSpec, build_spec
from grpolab.method.surrogates import SURROGATES
from grpolab.method.table import methods_table
from grpolab.method.trl_names import TRL_LOSS_TYPES, trl_recipe
from grpolab.tracking.naming import method_params
from grpolab.trainer import sampling
from grpolab.trainer.trl_settings import _NoEquivalent, trl_settings
from registry_grep import PACKAGE, compares, lists_naming, toy_entry
from test_engines import two_steps
from test_sampling_option_registries import gigpo_advantages


@dataclass(frozen=True)
class Toy:
    """A new value added the registry's way: its entry, its function, and what the function gives
    (``use(built) == expected``) once the config accepts it (``context``: other axes it needs)."""
    entry: object
    fn: Callable
    use: Callable
    expected: tuple
    context: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Axis:
    """How one axis's registry differs from the others."""
    name: str
    entries: dict
    functions: dict | None = None     # the algorithms floor's function per entry (None: a trainer hook reads it)
    register: Callable | None = None
    fn: Callable = lambda f: f        # the callable in a ``functions`` value
    text: tuple[str, ...] = ()        # entry fields that must say something (formula, source, ...)
    trl: Callable = lambda e: e.trl is not None   # TRL 1.16 has the value (else its entry says why not)
    trl_back: Callable | None = None  # entry -> the value TRL's setting reads back to
    recipe: bool = False              # a TRL recipe exists exactly for the values TRL has
    inert: str | None = None          # the entry field saying when it is inert: the axis's requirement
    context: dict = field(default_factory=dict)   # other axes under which a value acts (and is logged)
    shown: str | None = None          # how ``grpolab methods`` names a value ({axis}, {name})
    dispatch: Callable | None = None  # calls the algorithms floor with a value's name
    refusal: str = ""                 # what ``dispatch`` says of an unknown name (before it)
    refusal_lists: bool = False       # ... and whether it goes on to name the valid values
    bogus: str = "no_such_value"
    homes: tuple[str, ...] = ()       # package files that may name the values (None below: no lint)
    lint: Callable | None = None      # extra nodes the lint flags (a comparison of the axis's attribute)
    lint_names: Callable = lambda entries: set(entries)
    toy: Toy | None = None


# -- the toy functions (each with the axis's own signature) -------------------------------------------

def _max_baseline(spec, x: E.AdvantageInputs) -> torch.Tensor:
    """A_i = r_i - max_g r: every completion but the group's best is pushed down."""
    g = x.rewards.view(-1, x.group_size)
    return (g - g.max(1, keepdim=True).values).view(-1)


def _in_order(by_group, informative, target):
    """At the cap: the informative groups, then the others in generation order."""
    rest = [i for i in range(by_group.size(0)) if i not in set(informative.tolist())]
    return torch.cat([informative, torch.tensor(rest[:target - len(informative)], dtype=torch.long)])


def _best_centred(episode_adv, batch):
    """A population that centres A^E on the group's best episode: A^E - max_g A^E."""
    g = episode_adv.view(-1, batch.group_size)
    return (g - g.max(1, keepdim=True).values).view(-1)


def _filtered(spec):
    values = sampling.filter_values(spec.sampling_filter, torch.tensor([0.5, 2.0, -1.0, 3.0]), torch.ones(4))
    return values.tolist(), (sampling.group_spread(values, 2) > 0).tolist()


def _in_loss(spec, logp, ref=None):
    loss, stats = policy_loss(spec, LossInputs(logp, torch.zeros_like(logp), torch.tensor([1.0 if ref is None else 0.0]),
                              torch.ones_like(logp), ref))
    return loss.item(), stats.get("kl")


def _option(name, rule="a test's toy"):
    return SamplingOption(name, rule, "a test", no_trl="a test's toy")


_NO_TRL = "a test's toy"
_FILTER_MODE = {"sampling": readers("sampling_filter")[0], "aggregation": "token_mean"}

_TOYS = {
    "advantage": Toy(Estimator("toy_max_baseline", no_trl=_NO_TRL), _max_baseline,
                     lambda s: compute_advantages(s, AdvantageInputs(torch.tensor([1.0, 0.0, 0.5, 0.5, 2.0, 1.0]), 3))
                     .advantages.tolist(),
                     [0.0, -1.0, -0.5, -1.5, 0.0, -1.0]),
    # |x|: on-policy with A = 0 the loss is beta * mean_t |x_t|
    "kl_estimator": Toy(KlEstimator("toy_abs", "|x|", "a test", no_trl=_NO_TRL), lambda x: x.abs(),
                        lambda s: _in_loss(s, torch.zeros(1, 2), torch.tensor([[0.5, -1.0]])),
                        (pytest.approx(0.1 * 0.75), pytest.approx(0.75)), {"kl_coef": 0.1}),
    # log rho = l / 2; inside the clip [0.8, 1.2]: loss = -mean_t rho_t A = -(e^0.1 + e^-0.2) / 2
    "ratio": Toy(Ratio("toy_half", "rho_t = sqrt(pi / pi_old)", "a test", no_trl=_NO_TRL),
                 lambda log_ratio, mask: log_ratio / 2,
                 lambda s: (isinstance(trl_settings(s)["importance_sampling_level"], _NoEquivalent),
                            _in_loss(s, torch.tensor([[0.2, -0.4]]))[0]),
                 (True, pytest.approx(-(math.exp(0.1) + math.exp(-0.2)) / 2))),
    # keeps a group when the signs of its rewards vary: values = [r > 0]
    "sampling_filter": Toy(_option("toy_sign"), lambda r, c: (r > 0).float(), _filtered,
                           ([1.0, 1.0, 0.0, 1.0], [False, True]), {**_FILTER_MODE, "sampling": "zero_variance_filter"}),
    "sampling_cap_policy": Toy(_option("toy_in_order"), _in_order,
                               lambda s: (lambda g, filled: (g.tolist(), filled))(*sampling.select_groups(
                                   torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0]), 2, 4,
                                   s.sampling_cap_policy)),
                               ([0, 3, 1, 2], 2), {"sampling": "dynamic", "aggregation": "token_mean"}),
    # retains the longest: score = |o_i|
    "gfpo_metric": Toy(_option("toy_longest"), lambda lengths, rewards: lengths,
                       lambda s: sampling.gfpo_retained(torch.tensor([5, 2, 7, 2, 3, 9, 1, 4]), torch.zeros(8), 4,
                                                        s.gfpo_keep, s.gfpo_metric).nonzero().view(-1).tolist(),
                       [0, 2, 5, 7], {"sampling": "gfpo", "gfpo_keep": 2, "aggregation": "token_mean"}),
    "episode_norm": Toy(EpisodeNorm("toy_best", "A^E - max_g A^E", "a test", no_trl=_NO_TRL), _best_centred,
                        lambda s: gigpo_advantages(s).tolist(),
                        [0.0, -1.0], {"advantage": "group_mean"}),
    # w = 1/2 everywhere
    "is_correction": Toy(sampler.SamplerCorrection("toy_half", "w = 1/2", "a test"),
                         lambda d, c_min, c_max: torch.full((d.shape[0], 1), 0.5),
                         lambda cfg: (sampler.logged(cfg.generation.is_correction, 0.5, 2.0), SC.sampler_weights(
                             torch.zeros(2, 3), torch.ones(2, 3), torch.ones(2, 3), "toy_half", None, None).tolist()),
                         ({"is_correction": "toy_half"}, [[0.5], [0.5]])),
}


def _sampling_option(axis: str, dispatch: Callable, refusal: str, bogus: str, aliases: tuple[str, ...]) -> Axis:
    """``aliases``: the names the trainer's hooks give the value (trainer/sampling.py); compared there,
    they would bypass the function registry."""
    entries = SAMPLING_OPTIONS[axis]
    return Axis(axis, entries, *_OPTION_FUNCTIONS[axis], text=("rule", "source", "no_trl"), trl=lambda e: False,
                recipe=True, context={"sampling": readers(axis)[0], "aggregation": "token_mean"},
                shown="{axis}={name}", dispatch=dispatch, refusal=refusal, refusal_lists=True, bogus=bogus,
                homes=_OPTION_HOMES,
                lint=compares(axis, aliases, set(entries)), toy=_TOYS[axis])


_OPTION_FUNCTIONS = {"sampling_filter": (F.FILTER_FUNCTIONS, F.register_filter),
                     "sampling_cap_policy": (F.CAP_FUNCTIONS, F.register_cap),
                     "gfpo_metric": (F.GFPO_SCORES, F.register_score)}
_OPTION_HOMES = ("method/sampling_options.py", "algorithms/sampling_options.py", "method/episode_norms.py")
_KL_HOMES = ("method/kl.py", "algorithms/kl.py")
_KL_ON = {"kl_coef": 0.1}

# one row per axis registry; is_correction (generation.is_correction) is not in AXIS_REGISTRIES: it
# corrects for the sampler of a run (a generation setting, read only with vLLM), not a MethodSpec axis
AXES: dict[str, Axis] = {a.name: a for a in (
    Axis("advantage", ADVANTAGES, E.ESTIMATORS, E.register, fn=lambda f: f.fn,
         trl_back=lambda e: trl_advantage(e.trl), homes=("method/advantages.py", "algorithms/estimators.py"),
         lint=compares("advantage"), toy=_TOYS["advantage"]),
    Axis("surrogate", SURROGATES, SU.SURROGATE_LOSSES, SU.register, fn=lambda f: f.fn,
         trl=lambda e: bool(e.trl or e.trl_as), inert="on_policy",
         homes=("method/surrogates.py", "algorithms/surrogates.py"), lint=compares("surrogate")),
    Axis("aggregation", AGGREGATIONS, AG.AGGREGATION_FUNCTIONS, AG.register, text=("formula", "source"),
         trl_back=lambda e: TRL_LOSS_TYPES[e.trl]["surrogate"] == "clip" and TRL_LOSS_TYPES[e.trl]["aggregation"],
         inert="inert_when", dispatch=lambda n: AG.aggregate(torch.zeros(1, 2), torch.ones(1, 2), n),
         refusal="unknown aggregation", bogus="token_sum",
         homes=("method/aggregations.py", "algorithms/aggregations.py"), lint=compares("aggregation")),
    Axis("ratio", RATIOS, RA.RATIO_FUNCTIONS, RA.register, fn=lambda f: f.log_weights, text=("formula", "source"),
         trl_back=lambda e: trl_ratio(e.trl), recipe=True, inert="on_policy",
         dispatch=lambda n: RA.log_importance_weights(torch.zeros(1, 2), torch.ones(1, 2), n),
         refusal="unknown ratio granularity", bogus="tokens", homes=("method/ratios.py", "algorithms/ratios.py"),
         lint=compares("ratio"), toy=_TOYS["ratio"]),
    Axis("kl_estimator", KL_ESTIMATORS, KL.KL_FUNCTIONS, KL.register, text=("formula", "source"),
         trl=lambda e: e.trl, trl_back=lambda e: TRL_KL["kl_estimator"], context=_KL_ON,
         dispatch=lambda n: KL.kl_estimate(torch.zeros(1), torch.zeros(1), n), refusal="unknown KL estimator",
         bogus="k4", homes=_KL_HOMES, lint=compares("kl_estimator"), toy=_TOYS["kl_estimator"]),
    # "loss" and "reward" name much else: only comparisons of .kl_placement are flagged
    Axis("kl_placement", KL_PLACEMENTS, text=("formula", "source"), trl=lambda e: e.trl,
         trl_back=lambda e: TRL_KL["kl_placement"], context=_KL_ON, bogus="advantage", homes=_KL_HOMES,
         lint=compares("kl_placement"), lint_names=lambda entries: set()),
    Axis("sampling", SAMPLING_MODES, text=("label", "source"), trl=lambda e: e.trl, recipe=True,
         context={"aggregation": "token_mean"}, homes=("method/sampling_modes.py",), lint=compares("sampling")),
    Axis("entropy_mode", ENTROPY_MODES, text=("rule", "source"),
         trl_back=lambda e: trl_entropy_mode(e.trl["use_adaptive_entropy"]), context={"entropy_coef": 0.1},
         homes=("method/entropy_modes.py",), lint=compares("entropy_mode")),
    _sampling_option("sampling_filter", lambda n: sampling.filter_values(n, torch.zeros(2), torch.zeros(2)),
                     "unknown sampling filter", "acc", ("name", "metric")),
    _sampling_option("sampling_cap_policy", lambda n: sampling.select_groups(torch.zeros(4), 2, 1, n),
                     "unknown cap policy", "drop", ("policy",)),
    _sampling_option("gfpo_metric", lambda n: sampling.gfpo_retained(torch.ones(4), torch.zeros(4), 4, 2, n),
                     "unknown gfpo metric", "short", ("metric",)),
    Axis("episode_norm", EPISODE_NORMS, gigpo.EPISODE_NORM_FUNCTIONS, gigpo.register_episode_norm,
         text=("formula", "source"), recipe=True, shown="{axis}={name}", homes=_OPTION_HOMES,
         lint=compares("episode_norm"), toy=_TOYS["episode_norm"]),
    Axis("is_correction", sampler.SAMPLER_CORRECTIONS, SC.CORRECTION_FUNCTIONS, SC.register,
         text=("formula", "source"), trl=lambda e: True,
         trl_back=lambda e: sampler.trl_sampler_correction(e.trl_mode is not None, e.trl_mode), shown="{name}",
         dispatch=lambda n: SC.sampler_weights(torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1), n, None, None),
         refusal="unknown sampler correction", bogus="token_clip",
         homes=("method/sampler_corrections.py", "algorithms/sampler_corrections.py"),
         lint=compares("is_correction"), lint_names=lambda entries: set(entries) - {sampler.NONE},
         toy=_TOYS["is_correction"]),
)}
ENTRIES = [(axis, name) for axis, a in AXES.items() for name in a.entries]


def _in_spec(axis: Axis) -> bool:
    return axis.name in AXIS_REGISTRIES


def _build(axis: Axis, name: str, context: dict | None = None):
    """The spec (a MethodSpec axis) or the config (generation.is_correction) choosing ``name``."""
    if _in_spec(axis):
        return build_spec({**axis.context, **(context or {}), axis.name: name})
    return two_steps(f"contract-{name}", generation__is_correction=name)


def _chosen(axis: Axis, built) -> str:
    return getattr(built, axis.name) if _in_spec(axis) else built.generation.is_correction


def _key(axis: Axis) -> str:
    """The key a run logs the value under."""
    return axis.name if _in_spec(axis) else "is_correction"


def _logged(axis: Axis, built) -> dict:
    if _in_spec(axis):
        return method_params(built)
    g = built.generation
    return sampler.logged(g.is_correction, g.is_min, g.is_max)


def _default(axis: Axis) -> str:
    return SPEC_FIELDS[axis.name].default if _in_spec(axis) else engines.GenerationCfg().is_correction


def _unknown(axis: Axis, name: str):
    """The refusal of ``name`` by the config, naming the valid values."""
    valid = ", ".join(axis.entries)
    where = f"method.{axis.name}: unknown value" if _in_spec(axis) else "generation.is_correction: unknown"
    return pytest.raises(ConfigError, match=f"{where} '{name}'; valid: {valid}$")


def _registered_function_dicts() -> list[tuple[str, object]]:
    """Every ``registrar(entries, functions, ...)`` in the package: its module and functions dict."""
    import importlib
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "registrar":
                module = ".".join(("grpolab", *path.relative_to(PACKAGE).with_suffix("").parts))
                found.append((module, getattr(importlib.import_module(module), node.args[1].id)))
    return found


def test_the_table_covers_every_axis_registry():
    """Each MethodSpec field whose value is a name reads its values from a registry of entries (no
    fixed tuple of values), and each registry, and each function registry, is a row of AXES."""
    named = [f.name for f in SPEC_FIELDS.values() if isinstance(getattr(MethodSpec(), f.name), str)]
    assert sorted(named) == sorted(AXIS_REGISTRIES) == sorted(AXIS_CHOICES)
    assert sorted(AXIS_REGISTRIES) == sorted(a for a in AXES if a != "is_correction")
    assert all(AXES[axis].entries is entries for axis, entries in AXIS_REGISTRIES.items())
    functions = _registered_function_dicts()
    assert len(functions) >= 10
    for module, registry in functions:
        assert any(registry is a.functions for a in AXES.values()), module


@pytest.mark.parametrize("axis", AXES)
def test_one_function_per_entry_and_one_entry_per_function(axis):
    a = AXES[axis]
    assert all(e.name == k for k, e in a.entries.items()) and _default(a) in a.entries
    if a.functions is not None:
        assert sorted(a.functions) == sorted(a.entries)
    if _in_spec(a):
        assert AXIS_CHOICES[axis] == tuple(a.entries)


@pytest.mark.parametrize("axis, name", ENTRIES)
def test_every_entry_is_complete(axis, name):
    """Function, what it is in words, params that exist, a TRL mapping (read back to this entry) or a
    reason why none, a requirement exactly when its entry says it can be inert, logged where it acts."""
    a, entry = AXES[axis], AXES[axis].entries[name]
    assert a.functions is None or callable(a.fn(a.functions[name]))
    assert all(getattr(entry, f) for f in a.text), a.text
    valid = SPEC_FIELDS if _in_spec(a) else {f.name for f in dataclasses.fields(engines.GenerationCfg)}
    assert set(getattr(entry, "params", ())) <= set(valid)
    assert a.trl(entry) == (getattr(entry, "no_trl", None) is None), "a TRL mapping, or a reason why none"
    if a.trl(entry) and a.trl_back is not None:
        assert a.trl_back(entry) == name
    built = _build(a, name)
    assert _chosen(a, built) == name
    if a.recipe:
        assert (trl_recipe(built) is not None) == a.trl(entry)
    if a.inert is not None:   # inert on-policy: the requirement is rollout reuse
        req = requirement(axis, name)
        assert (req is None) == (getattr(entry, a.inert) is None)
        if req is not None and a.inert == "on_policy":
            assert (req.holds, req.name) == (REUSE.holds, REUSE.name)
            assert not req.holds(SimpleNamespace(spec=built, reuses_rollouts=False))
    assert _logged(a, built).get(_key(a), _default(a)) == name
    if a.shown is not None:
        assert a.shown.format(axis=axis, name=name) in methods_table()


@pytest.mark.parametrize("axis", AXES)
def test_an_unknown_value_is_refused_naming_the_valid_ones(axis):
    a = AXES[axis]
    with _unknown(a, a.bogus):
        _build(a, a.bogus)
    if a.dispatch is not None:
        valid = f"; valid: {', '.join(a.entries)}" if a.refusal_lists else ""
        with pytest.raises(ValueError, match=f"{a.refusal} '{a.bogus}'{valid}"):
            a.dispatch(a.bogus)


@pytest.mark.parametrize("axis", [a for a in AXES if AXES[a].toy is not None])
def test_a_toy_value_needs_only_its_entry_and_its_function(axis):
    """Accepted by the config, logged, and its function is what the algorithms floor gives; gone
    (and refused) once its entry and function are."""
    a, toy = AXES[axis], AXES[axis].toy
    name = toy.entry.name
    with toy_entry(a.entries, a.functions, a.register, toy.entry, toy.fn):
        built = _build(a, name, toy.context)
        assert _chosen(a, built) == name
        assert _logged(a, built)[_key(a)] == name
        assert not _in_spec(a) or trl_recipe(built) is None
        assert toy.use(built) == toy.expected
    assert name not in a.entries and name not in a.functions
    assert not _in_spec(a) or name not in AXIS_CHOICES[axis]
    with _unknown(a, name):
        _build(a, name, toy.context)


@pytest.mark.parametrize("axis", [a for a in AXES if AXES[a].homes])
def test_no_hand_written_list_of_values_outside_the_registry(axis):
    """A collection literal naming two or more values of the axis, or ``.<axis>`` compared with a
    value's name, would be a second home for a value's fact: read the entry instead."""
    a = AXES[axis]
    homes = {PACKAGE / home for home in a.homes}
    assert lists_naming(a.lint_names(a.entries), homes, a.lint) == []
