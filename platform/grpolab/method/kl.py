"""The KL term's two axes as registries: the estimator of KL(pi_theta || pi_ref) per token, and
where the penalty beta * KL enters (the loss, or the reward before the advantages).

Detail: docs/methods.md, "grpolab.method.kl".
"""

from __future__ import annotations

from dataclasses import dataclass, field

from grpolab.method.params import Param, declare


@dataclass(frozen=True)
class KlEstimator:
    """One value of ``kl_estimator``. Formula: the docstring of its function in ``grpolab.algorithms.kl``."""
    name: str
    formula: str                # x = log pi_theta - log pi_ref, per token
    source: str
    trl: bool = False           # TRL 1.16's beta term uses it
    no_trl: str | None = None   # why TRL has none (None when ``trl``)


@dataclass(frozen=True)
class KlPlacement:
    """One value of ``kl_placement``."""
    name: str
    formula: str
    source: str
    in_loss: bool                      # added to the per-token loss (else subtracted from the reward)
    params: dict[str, Param] = field(default_factory=dict)  # settings only it reads (logged, inert elsewhere)
    trl: bool = False                  # TRL 1.16's beta term sits here
    no_trl: str | None = None


_SCHULMAN = "Schulman 2020, Approximating KL Divergence, joschu.net/blog/kl-approx.html"
_NO_TRL_ESTIMATOR = "TRL 1.16's beta term is the k3 estimator only"
KL_ESTIMATORS: dict[str, KlEstimator] = {e.name: e for e in (
    KlEstimator("k1", "x", _SCHULMAN, no_trl=_NO_TRL_ESTIMATOR),
    KlEstimator("k2", "x^2 / 2", _SCHULMAN, no_trl=_NO_TRL_ESTIMATOR),
    KlEstimator("k3", "exp(-x) - 1 + x", f"{_SCHULMAN}; Shao et al. 2024, GRPO, arXiv:2402.03300", trl=True),
)}
KL_PLACEMENTS: dict[str, KlPlacement] = {p.name: p for p in (
    KlPlacement("loss", "loss_t += beta * KL_t (times rho with kl_ratio_correction)",
                "Shao et al. 2024, GRPO, arXiv:2402.03300", in_loss=True, trl=True,
                params=declare(Param("kl_ratio_correction", "multiply the in-loss KL by the IS ratio (DeepSeek-V3.2; "
                                                            "TRL's default)"))),
    KlPlacement("reward", "r_i -= beta * sum_t KL_t (per token for per-token estimators)",
                "Ouyang et al. 2022, InstructGPT, arXiv:2203.02155; Hu 2025, REINFORCE++, arXiv:2501.03262",
                in_loss=False, no_trl="TRL 1.16 has no reward-side KL"),
)}
# the axis values TRL's beta sets (GRPOConfig(beta > 0) is this estimator in this placement)
TRL_KL = {"kl_estimator": next(e.name for e in KL_ESTIMATORS.values() if e.trl),
          "kl_placement": next(p.name for p in KL_PLACEMENTS.values() if p.trl)}


def kl_in_loss(spec) -> bool:
    """A KL penalty that the loss adds per token (``kl_coef > 0`` and an in-loss placement)."""
    return spec.kl_coef > 0 and KL_PLACEMENTS[spec.kl_placement].in_loss


def kl_in_reward(spec) -> bool:
    """A KL penalty that the reward carries (``kl_coef > 0`` and a reward-side placement)."""
    return spec.kl_coef > 0 and not KL_PLACEMENTS[spec.kl_placement].in_loss
