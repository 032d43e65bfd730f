"""TRL 1.16's ``GRPOConfig.loss_type`` names as grpolab axis values, and the GRPOConfig that
trains a registered method's update rule exactly (data and pure functions; no TRL import).

``grpolab.trainer.trl_config.TRL_FIELDS`` maps every GRPOConfig field; its ``loss_type`` entry
reads ``TRL_LOSS_TYPES`` here, on the method floor, so that ``grpolab methods`` can print TRL's
name next to a registered method's. TRL's ``loss_type`` encodes two axes at once (the surrogate
and the aggregation): TRL's "dapo" is DAPO's token-level aggregation only, not the paper's recipe
(grpolab's ``dapo`` adds Clip-Higher, overlong filtering, soft overlong punishment and dynamic
sampling). ``tests/test_trl_mapping.py`` checks ``trl_recipe`` against the field table, both ways.
"""

from __future__ import annotations

from grpolab.method.spec import MethodSpec

# loss_type -> the axis values it sets (every other axis comes from its own GRPOConfig field).
# Formulas: TRL's GRPOTrainer._compute_loss (1.16.0); grpolab's in grpolab.algorithms.
TRL_LOSS_TYPES: dict[str, dict] = {
    "grpo": {"surrogate": "clip", "aggregation": "seq_mean_token_mean"},
    "dapo": {"surrogate": "clip", "aggregation": "token_mean"},
    "dr_grpo": {"surrogate": "clip", "aggregation": "seq_mean_token_sum_norm"},
    "bnpo": {"surrogate": "clip", "aggregation": "token_mean_local"},
    # TRL's cispo truncates the IS weight above at epsilon_high (an absolute bound) and never below
    "cispo": {"surrogate": "cispo", "aggregation": "token_mean", "eps_low": 1.0},
    "sapo": {"surrogate": "sapo", "aggregation": "seq_mean_token_mean"},
    # LUSPO (2602.05261): PPO clip, each sequence's token sum (length-weighted), mean over sequences
    "luspo": {"surrogate": "clip", "aggregation": "seq_mean_token_sum"},
    # VESPO (2602.10693): a detached Gamma weight of the sequence ratio times -A log pi, token_mean
    "vespo": {"surrogate": "vespo", "aggregation": "token_mean"},
}

TRL_LOSS_MEANING: dict[str, str] = {
    "grpo": "PPO clip; each completion's token mean, mean over completions (GRPO's length-normalised loss)",
    "dapo": "PPO clip; mean over every token of the generation batch (DAPO's token-level loss only; grpolab's "
            "dapo is the paper's recipe: + Clip-Higher, overlong filter, soft overlong punishment, dynamic sampling)",
    "dr_grpo": "PPO clip; token sum / (completions x max_completion_length) (Dr. GRPO's constant normaliser)",
    "bnpo": "PPO clip; mean over the tokens of the local micro-batch",
    "cispo": "truncated, detached IS weight min(rho, epsilon_high) x A x log pi; token-level (MiniMax-M1)",
    "sapo": "soft gate (4/tau) sigmoid(tau (rho - 1)) instead of a clip; like grpo's aggregation (SAPO)",
    "luspo": "PPO clip; each completion's token sum, mean over completions (LUSPO)",
    "vespo": "detached Gamma weight of the sequence ratio x A x log pi; token-level (VESPO)",
}

# GRPOConfig's defaults for the fields a recipe may set (TRL 1.16; a test checks them)
TRL_DEFAULTS = {"loss_type": "dapo", "beta": 0.0, "epsilon": 0.2, "epsilon_high": None, "delta": None,
                "scale_rewards": "group", "multi_objective_aggregation": "sum_then_normalize",
                "importance_sampling_level": "token", "mask_truncated_completions": False,
                "top_entropy_quantile": 1.0, "entropy_coef": 0.0, "use_bias_correction_kl": True,
                "sapo_temperature_pos": 1.0, "sapo_temperature_neg": 1.05}
_ADVANTAGE = {"group_std": {}, "batch_std": {"scale_rewards": "batch"}, "group_mean": {"scale_rewards": "none"},
              "decoupled": {"multi_objective_aggregation": "normalize_then_sum"}}
_CLIPS = ("clip", "dual_clip")
_NEUTRAL = MethodSpec()


def trl_recipe(spec: MethodSpec) -> dict | None:
    """The GRPOConfig settings (only those away from TRL's defaults) under which stock TRL trains
    exactly ``spec``'s update rule, or None when an axis has no TRL setting (dynamic sampling,
    soft overlong punishment, a reward-side KL, ...). Rollout reuse and reward weights are not
    axes of the update rule and are left out."""
    surrogate = "clip" if spec.surrogate == "dual_clip" else spec.surrogate
    loss = next((name for name, axes in TRL_LOSS_TYPES.items()
                 if all((surrogate if k == "surrogate" else getattr(spec, k)) == v for k, v in axes.items())), None)
    if loss is None or spec.advantage not in _ADVANTAGE or spec.ratio not in ("token", "sequence"):
        return None
    if spec.entropy_mode != "static":
        return None
    out = {"loss_type": loss, **_ADVANTAGE[spec.advantage], "importance_sampling_level": spec.ratio,
           "mask_truncated_completions": spec.overlong_filter, "top_entropy_quantile": spec.top_entropy_quantile,
           "entropy_coef": spec.entropy_coef}
    explained = {"surrogate", "aggregation", "advantage", "ratio", "overlong_filter", "top_entropy_quantile",
                 "entropy_coef", "reward_weights", *TRL_LOSS_TYPES[loss]}
    if spec.surrogate in _CLIPS:
        out.update(epsilon=spec.eps_low, epsilon_high=spec.eps_high)
        explained |= {"eps_low", "eps_high"}
    elif spec.surrogate == "cispo":
        out["epsilon_high"] = 1.0 + spec.eps_high
        explained.add("eps_high")
    if spec.surrogate == "dual_clip":   # TRL's delta caps rho for A < 0 exactly like dual-clip when delta >= 1 + eps_high
        if spec.dual_clip_c < 1.0 + spec.eps_high:
            return None
        out["delta"] = spec.dual_clip_c
        explained.add("dual_clip_c")
    if spec.surrogate == "sapo":
        out.update(sapo_temperature_pos=spec.sapo_tau_pos, sapo_temperature_neg=spec.sapo_tau_neg)
        explained |= {"sapo_tau_pos", "sapo_tau_neg"}
    if spec.kl_coef > 0:
        if spec.kl_estimator != "k3" or spec.kl_placement != "loss":
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
