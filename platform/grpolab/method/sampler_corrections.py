"""The sampler-correction axis as one registry: how the loss corrects for a sampler that is not
the trained policy (vLLM samples with its own kernels, so its log-probs differ from the trainer's).

Detail: docs/methods.md, "grpolab.method.sampler_corrections".
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SamplerCorrection:
    """One value of ``generation.is_correction``. Formula: the docstring of its function."""
    name: str
    formula: str
    source: str
    level: str | None = None          # "token": one w per token; "sequence": one per completion; None: no w
    bound: str | None = None          # "truncate": clip w to [C_min, C_max]; "mask": w = 0 outside it
    params: tuple[str, ...] = ()      # generation keys it reads (logged with it)
    needs: str | None = None          # what the run must have for it to act (None: nothing)
    trl_mode: str | None = None       # TRL 1.16's vllm_importance_sampling_mode (None: the correction off)


_TRL_DOC = "TRL 1.16 GRPOConfig.vllm_importance_sampling_mode"
_TIS = ("Yao, Liu et al. 2025, Your Efficient RL Framework Secretly Brings You Off-Policy RL Training "
        "(fengyao.notion.site/off-policy-rl), truncated importance sampling (TIS)")
_MIS = ("Liu, Li et al. 2025, When Speed Kills Stability: Demystifying RL Collapse from the Training-Inference "
        "Mismatch (yingru.notion.site), sequence-level masked importance sampling (MIS)")
_BOUNDS = ("is_min", "is_max")
_VLLM = "generation.backend=vllm (with transformers the sampler is the trained policy: w = 1)"
NONE = "none"   # no correction: the entry a run without a separate sampler has

_ENTRIES = (
    SamplerCorrection("sequence_mask", "w_i = exp(sum_t d_t), 0 outside [C_min, C_max]", f"{_MIS}; {_TRL_DOC}",
                      level="sequence", bound="mask", params=_BOUNDS, needs=_VLLM, trl_mode="sequence_mask"),
    SamplerCorrection("sequence_truncate", "w_i = clip(exp(sum_t d_t), C_min, C_max)",
                      f"{_TIS}, per sequence; {_TRL_DOC}",
                      level="sequence", bound="truncate", params=_BOUNDS, needs=_VLLM, trl_mode="sequence_truncate"),
    SamplerCorrection("token_mask", "w_t = exp(d_t), 0 outside [C_min, C_max]",
                      "Ling Team 2025, IcePop (Every Step Evolves: Scaling RL for Trillion-Scale Thinking Model, "
                      f"arXiv:2510.18855); {_TRL_DOC}",
                      level="token", bound="mask", params=_BOUNDS, needs=_VLLM, trl_mode="token_mask"),
    SamplerCorrection("token_truncate", "w_t = clip(exp(d_t), C_min, C_max)", f"{_TIS}; {_TRL_DOC}",
                      level="token", bound="truncate", params=_BOUNDS, needs=_VLLM, trl_mode="token_truncate"),
    SamplerCorrection(NONE, "w = 1", "no correction (TRL: vllm_importance_sampling_correction=False)"),
)
SAMPLER_CORRECTIONS: dict[str, SamplerCorrection] = {c.name: c for c in _ENTRIES}
_TRL_DEFAULT_MODE = "sequence_mask"   # GRPOConfig's default vllm_importance_sampling_mode (a test checks it)


def trl_names(name: str) -> dict:
    """The GRPOConfig fields that name correction ``name`` in TRL 1.16 (its bounds aside)."""
    mode = SAMPLER_CORRECTIONS[name].trl_mode
    return {"vllm_importance_sampling_correction": mode is not None,
            **({"vllm_importance_sampling_mode": mode} if mode else {})}


def trl_settings(name: str, is_min: float, is_max: float) -> dict:
    """The GRPOConfig fields under which TRL 1.16 computes exactly correction ``name`` (C_min = 0: none)."""
    return {"vllm_importance_sampling_mode": _TRL_DEFAULT_MODE, **trl_names(name),
            "vllm_importance_sampling_clip_max": is_max, "vllm_importance_sampling_clip_min": is_min or None}


def trl_sampler_correction(correction: bool, mode: str) -> str | None:
    """The entry TRL computes under ``vllm_importance_sampling_correction`` / ``_mode`` (None: a mode
    TRL 1.16 does not have)."""
    if not correction:
        return NONE
    return next((c.name for c in SAMPLER_CORRECTIONS.values() if c.trl_mode == mode), None)


def logged(name: str, is_min: float, is_max: float) -> dict:
    """The ``generation.*`` params of a run whose sampler is vLLM: the correction and what it reads."""
    bounds = {"is_min": is_min, "is_max": is_max}
    return {"is_correction": name, **{p: bounds[p] for p in SAMPLER_CORRECTIONS[name].params}}
