"""The axes of the GRPO family as one validated, hashable dataclass.

A method is a named combination of these axis values (see ``method/registry.py``); an experiment may
override any axis. Validation happens here, before any model is loaded, and says what is valid.
Formulas for each value live in the docstrings of ``grpolab.algorithms``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, fields

from grpolab.errors import ConfigError
from grpolab.method.advantages import ADVANTAGES, estimators
from grpolab.method.aggregations import TOKEN_LEVEL
from grpolab.method.episode_norms import EPISODE_NORMS
from grpolab.method.kl import kl_in_reward
from grpolab.method.ratios import RATIOS, TOKEN
from grpolab.method.sampling_modes import SAMPLING_MODES
from grpolab.method.settings import AXIS_REGISTRIES, param, param_table
from grpolab.method.surrogates import CLIP, SURROGATES
from grpolab.validation import typed


class _AxisChoices(Mapping):
    """Each axis's valid values, read from its registry now (an entry a test registers counts)."""

    def __init__(self, registries: dict):
        self._registries = registries

    def __getitem__(self, axis: str) -> tuple[str, ...]:
        return tuple(self._registries[axis])

    def __iter__(self):
        return iter(self._registries)

    def __len__(self) -> int:
        return len(self._registries)


AXIS_CHOICES: Mapping[str, tuple[str, ...]] = _AxisChoices(AXIS_REGISTRIES)


@dataclass(frozen=True)
class MethodSpec:
    """Every axis of a GRPO-family update. Defaults are neutral; methods set what they use. Each
    field's meaning, valid range and when it acts and is logged: its Param (``method/settings.py``)."""

    advantage: str = "group_std"
    std_unbiased: bool = True
    adv_eps: float = 1e-4                 # TRL's value
    ratio: str = "token"
    surrogate: str = "clip"
    eps_low: float = 0.2
    eps_high: float = 0.2
    dual_clip_c: float = 3.0
    sapo_tau_pos: float = 1.0
    sapo_tau_neg: float = 1.05
    vespo_k_pos: float = 2.0              # TRL's value
    vespo_lambda_pos: float = 3.0
    vespo_k_neg: float = 3.0
    vespo_lambda_neg: float = 2.0
    cov_fraction: float = 2e-4
    cov_low: float = 1.0
    cov_high: float = 5.0
    kl_cov_coef: float = 1.0
    dpo_beta: float = 0.1
    dro_beta: float = 0.05
    aggregation: str = "seq_mean_token_mean"
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    kl_placement: str = "loss"
    kl_ratio_correction: bool = False
    sampling: str = "static"
    max_sampling_rounds: int = 4
    sampling_cap_policy: str = "fill"
    sampling_filter: str = "accuracy"
    gfpo_keep: int = 8
    gfpo_metric: str = "length"
    overlong_filter: bool = False
    soft_overlong: bool = False
    overlong_buffer: int = 0
    overlong_penalty: float = 1.0
    entropy_coef: float = 0.0
    entropy_mode: str = "static"
    entropy_target: float = 0.2
    entropy_coef_step: float = 1e-3
    entropy_coef_min: float = 0.0
    entropy_coef_max: float = float("inf")
    top_entropy_quantile: float = 1.0
    tracker_decay: float = 0.9
    gae_gamma: float = 1.0
    gae_lambda: float = 0.95
    gae_lambda_critic: float = 1.0
    gae_length_alpha: float = 0.0
    critic_lr: float = 5e-4
    critic_warmup: int = 0
    value_clip: float = 0.0
    whiten_advantages: bool = False
    positive_lm_coef: float = 0.0
    reward_weights: tuple[float, ...] | None = None
    step_omega: float = 0.0
    step_gamma: float = 0.95
    anchor_similarity: float = 1.0
    episode_norm: str = "episode"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def spec_hash(self) -> str:
        """Short hash of every axis value: equal hashes mean identical update rules. A setting whose
        Param is ``late`` is left out at its default (``method/params.py``)."""
        table = param_table()
        values = {k: v for k, v in self.to_dict().items()
                  if not (param(table, k).late and v == self.__dataclass_fields__[k].default)}
        return hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()[:12]

    @property
    def needs_reference(self) -> bool:
        return self.kl_coef > 0 or SURROGATES[self.surrogate].reference


SPEC_FIELDS = {f.name: f for f in fields(MethodSpec)}


def build_spec(values: dict) -> MethodSpec:
    """MethodSpec from a dict, rejecting unknown keys, wrong types and out-of-range values."""
    clean = {}
    for key, value in values.items():
        if key not in SPEC_FIELDS:
            raise ConfigError(f"method.{key}: unknown axis; valid: {', '.join(SPEC_FIELDS)}")
        clean[key] = typed(f"method.{key}", value, str(SPEC_FIELDS[key].type), SPEC_FIELDS[key].default)
    spec = MethodSpec(**clean)
    validate_spec(spec)
    return spec


def _check(cond: bool, message: str) -> None:
    if not cond:
        raise ConfigError(message)


def validate_spec(spec: MethodSpec) -> None:
    """Each axis value against its registry, each setting against its Param's range
    (``method/settings.py``), then the rules that tie settings together."""
    for axis, choices in AXIS_CHOICES.items():
        value = getattr(spec, axis)
        _check(value in choices, f"method.{axis}: unknown value {value!r}; valid: {', '.join(choices)}")
    own = {f.name for f in fields(spec)}   # a spec class extended with a setting (a test's) checks it too
    for name, setting in param_table().items():
        if name in own:
            refusal = setting.refusal(getattr(spec, name))
            _check(refusal is None, refusal)
    _validate_pairs(spec)
    _validate_sampling(spec)
    _validate_advantage(spec, ADVANTAGES[spec.advantage])


def _validate_pairs(spec: MethodSpec) -> None:
    """The settings whose valid values depend on another setting."""
    clip = SURROGATES[spec.surrogate].clip
    _check(spec.eps_high >= 0 or (clip == "truncate" and spec.eps_high > -1),   # cispo: TRL's bound may be < 1
           f"method.eps_high: must be >= 0 (cispo: > -1, an upper bound 1 + eps_high > 0), got {spec.eps_high}")
    if clip in ("ppo", "dual") and not RATIOS[spec.ratio].log_space_clip:
        _check(spec.eps_high >= spec.eps_low,
               f"method.eps_high ({spec.eps_high}) < method.eps_low ({spec.eps_low}): Clip-Higher needs eps_high >= eps_low")
    _check(spec.entropy_coef_min <= spec.entropy_coef_max,
           f"method.entropy_coef_min/entropy_coef_max: need 0 <= min <= max, got {spec.entropy_coef_min}, "
           f"{spec.entropy_coef_max}")
    own_loss = RATIOS[spec.ratio].replaces_surrogate
    _check(own_loss is None or spec.surrogate == CLIP, f"method.ratio={spec.ratio} {own_loss}: use surrogate={CLIP}")
    own_ratio = SURROGATES[spec.surrogate].own_ratio
    _check(own_ratio is None or spec.ratio == TOKEN, f"method.surrogate={spec.surrogate} {own_ratio}: use ratio={TOKEN}")


def _validate_sampling(spec: MethodSpec) -> None:
    """The sampling mode's entry against the aggregation, surrogate and estimator."""
    sampling = SAMPLING_MODES[spec.sampling]
    if sampling.drops_rows:
        _check(spec.aggregation in TOKEN_LEVEL,
               f"method.sampling={spec.sampling} drops completions from the token normaliser: use aggregation "
               + " or ".join(TOKEN_LEVEL))
    pairwise = SURROGATES[spec.surrogate].pairwise
    _check(not sampling.retains or pairwise is None,
           f"method.sampling={spec.sampling} with surrogate={spec.surrogate}: {pairwise}, so a rejected "
           "(loss-masked) completion could be the pair's best or worst: use another surrogate")
    _check(not sampling.retains or spec.advantage in estimators(unscorable=True),
           f"method.sampling={spec.sampling} leaves the rejected completions out of the baselines (as rows without "
           f"a reward): use advantage {' or '.join(estimators(unscorable=True))}, got {spec.advantage!r}")


def _validate_advantage(spec: MethodSpec, entry) -> None:
    """The estimator's entry against the rest of the spec (method/advantages.py)."""
    _check(entry.missing is None, f"method.advantage={entry.name}: grpolab cannot train with it yet: {entry.missing}")
    reward_kl = kl_in_reward(spec)
    _check("greedy_rewards" not in entry.inputs or not SAMPLING_MODES[spec.sampling].regenerates,
           f"method.advantage={entry.name} scores one greedy completion per prompt of the update batch, which "
           f"dynamic sampling assembles from several rounds of prompts: use sampling=static or zero_variance_filter")
    if entry.kl_reward_only and spec.kl_coef > 0:
        _check(reward_kl, f"method.advantage={entry.name} folds the KL into the reward: "
                                              "set kl_placement=reward (or kl_coef=0)")
    _check(entry.no_reward_kl is None or not reward_kl,
           f"method.advantage={entry.name}: {entry.no_reward_kl}; use kl_placement=loss (or kl_coef=0)")
    stepped = " or ".join(estimators(step_norm="std") + estimators(step_norm="mean"))
    _check(spec.step_omega == 0 or entry.step_norm is not None,
           f"method.step_omega > 0 (GiGPO) adds step-level group advantages to a group estimator: use advantage "
           f"{stepped}, got {spec.advantage!r}")
    _check(not EPISODE_NORMS[spec.episode_norm].per_turn or entry.step_norm is not None,
           f"method.episode_norm={spec.episode_norm} weights the episode group's mean/std by turns: use advantage "
           f"{stepped}, got {spec.advantage!r}")


def with_reward_weights(spec: MethodSpec, given, source: str, names, error=ConfigError) -> MethodSpec:
    """``spec`` with ``given`` (one weight per named reward function, or None) as its
    ``reward_weights``, plus weight 1 for the method's soft-overlong component when on: the one
    place weights meet, for the CLI's task weights and for TRL's ``GRPOConfig.reward_weights``.
    Weights given in ``source`` and in the method that differ raise ``error``, and so does a
    weight list that is not one weight per reward component."""
    overlong = (1.0,) if spec.soft_overlong else ()
    if given is not None:
        weights = (*(float(w) for w in given), *overlong)
        if spec.reward_weights is not None and tuple(spec.reward_weights) != weights:
            raise error(f"method.reward_weights: {list(spec.reward_weights)} conflicts with {source} "
                        f"{list(weights)}; set weights in one place")
        spec = dataclasses.replace(spec, reward_weights=weights)
    n_components = len(names) + len(overlong)
    if spec.reward_weights is not None and len(spec.reward_weights) != n_components:
        raise error(f"method.reward_weights: {len(spec.reward_weights)} weights for {n_components} reward "
                    f"components ({', '.join(names)}{', overlong' if overlong else ''})")
    return spec
