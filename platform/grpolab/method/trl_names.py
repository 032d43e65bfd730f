"""TRL 1.16's ``GRPOConfig.loss_type`` names as grpolab axis values, and the GRPOConfig that
trains a registered method's update rule exactly (data and pure functions; no TRL import).

``grpolab.trainer.trl_fields.TRL_FIELDS`` maps every GRPOConfig field; its ``loss_type`` entry
reads ``TRL_LOSS_TYPES`` here, on the method floor, so that ``grpolab methods`` can print TRL's
name next to a registered method's. TRL's ``loss_type`` encodes two axes at once (the surrogate
and the aggregation): TRL's "dapo" is DAPO's token-level aggregation only, not the paper's recipe
(grpolab's ``dapo`` adds Clip-Higher, overlong filtering, soft overlong punishment and dynamic
sampling). ``tests/trainer/test_trl_mapping.py`` checks ``trl_recipe`` against the field table, both ways.
"""

from __future__ import annotations

import math

from grpolab.method.advantages import ADVANTAGES
from grpolab.method.entropy_modes import ENTROPY_MODES
from grpolab.method.kl import KL_ESTIMATORS, KL_PLACEMENTS
from grpolab.method.ratios import RATIOS
from grpolab.method.spec import MethodSpec
from grpolab.method.surrogates import SURROGATES

# loss_type -> the axis values it sets (every other axis comes from its own GRPOConfig field), from
# the surrogate registry. Formulas: TRL's GRPOTrainer._compute_loss (1.16.0); grpolab's in grpolab.algorithms.
TRL_LOSS_TYPES: dict[str, dict] = {t.loss_type: {"surrogate": s.name, "aggregation": t.aggregation, **t.fixed}
                                   for s in SURROGATES.values() for t in s.trl}
TRL_LOSS_MEANING: dict[str, str] = {t.loss_type: t.meaning for s in SURROGATES.values() for t in s.trl}
# (surrogate, aggregation) -> loss_type
TRL_LOSS_PAIRS: dict[tuple[str, str], str] = {(s.name, t.aggregation): t.loss_type
                                              for s in SURROGATES.values() for t in s.trl}

# GRPOConfig's defaults for the fields a recipe may set (TRL 1.16; a test checks them)
TRL_DEFAULTS = {"loss_type": "dapo", "beta": 0.0, "epsilon": 0.2, "epsilon_high": None, "delta": None,
                "scale_rewards": "group", "multi_objective_aggregation": "sum_then_normalize",
                "importance_sampling_level": "token", "mask_truncated_completions": False,
                "top_entropy_quantile": 1.0, "entropy_coef": 0.0, "use_bias_correction_kl": True,
                "sapo_temperature_pos": 1.0, "sapo_temperature_neg": 1.05, "vespo_k_pos": 2.0, "vespo_lambda_pos": 3.0,
                "vespo_k_neg": 3.0, "vespo_lambda_neg": 2.0}
_NEUTRAL = MethodSpec()


def trl_recipe(spec: MethodSpec) -> dict | None:
    """The GRPOConfig settings (only those away from TRL's defaults) under which stock TRL trains
    exactly ``spec``'s update rule, or None when an axis has no TRL setting (dynamic sampling,
    soft overlong punishment, a reward-side KL, ...). Rollout reuse and reward weights are not
    axes of the update rule and are left out."""
    entry = SURROGATES[spec.surrogate]
    surrogate = entry.trl_as or spec.surrogate   # dual_clip: a clip loss type plus delta
    loss = next((name for name, axes in TRL_LOSS_TYPES.items()
                 if all((surrogate if k == "surrogate" else getattr(spec, k)) == v for k, v in axes.items())), None)
    advantage = ADVANTAGES[spec.advantage].trl   # the estimator's GRPOConfig settings (method/advantages.py)
    level = RATIOS[spec.ratio].trl   # TRL's importance_sampling_level (method/ratios.py)
    if loss is None or advantage is None or level is None:
        return None
    if ENTROPY_MODES[spec.entropy_mode].adaptive:   # TRL's controller is not a recipe field here
        return None
    out = {"loss_type": loss, **advantage, "importance_sampling_level": level,
           "mask_truncated_completions": spec.overlong_filter, "top_entropy_quantile": spec.top_entropy_quantile,
           "entropy_coef": spec.entropy_coef}
    explained = {"surrogate", "aggregation", "advantage", "ratio", "overlong_filter", "top_entropy_quantile",
                 "entropy_coef", "reward_weights", *TRL_LOSS_TYPES[loss]}
    for field, (axis, shift) in entry.trl_fields.items():   # the surrogate's own parameters
        out[field] = getattr(spec, axis) + shift
        explained.add(axis)
    if out.get("delta", math.inf) < 1.0 + spec.eps_high:
        return None   # TRL's delta caps rho for A < 0 exactly like dual-clip only when delta >= 1 + eps_high
    if spec.kl_coef > 0:
        if not (KL_ESTIMATORS[spec.kl_estimator].trl and KL_PLACEMENTS[spec.kl_placement].trl):   # method/kl.py
            return None
        out.update(beta=spec.kl_coef, use_bias_correction_kl=spec.kl_ratio_correction)
        explained |= {"kl_coef", "kl_estimator", "kl_placement", "kl_ratio_correction"}
    for name in MethodSpec.__dataclass_fields__:
        if name not in explained and getattr(spec, name) != getattr(_NEUTRAL, name):
            return None   # an axis value TRL has no setting for
    if out.get("epsilon_high") == out.get("epsilon", TRL_DEFAULTS["epsilon"]):
        del out["epsilon_high"]   # TRL reads epsilon_high=None as epsilon
    return {k: v for k, v in out.items() if k == "loss_type" or TRL_DEFAULTS.get(k, object()) != v}


def format_recipe(recipe: dict) -> str:
    """``loss_type="dr_grpo", scale_rewards="none"``: a recipe as GRPOConfig keyword arguments."""
    return ", ".join(f"{k}={v!r}".replace("'", '"') for k, v in recipe.items())
