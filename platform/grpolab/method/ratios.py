"""The ratio axis as one registry: every importance-ratio granularity's facts, as data, in one entry.

Detail: docs/methods.md, "grpolab.method.ratios".
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Ratio:
    """One value of the ratio axis. Formula: the docstring of its function in ``grpolab.algorithms.ratios``."""
    name: str
    formula: str                          # for ``grpolab methods``
    source: str                           # the paper (arXiv id) that defines it
    trl: str | None = None                # TRL 1.16's importance_sampling_level with this ratio
    no_trl: str | None = None             # why TRL has none (None when ``trl`` says)
    on_policy: str | None = None          # why it is inert on-policy (needs rollout reuse); None: it acts
    replaces_surrogate: str | None = None  # why it brings its own loss (then the surrogate must be clip); None: it
                                           # feeds rho to the surrogate
    log_space_clip: bool = False          # clips l = log rho at -eps_low / eps_high (clip counts use exp of them)


_NO_TRL = "TRL 1.16's importance_sampling_level has token and sequence only"
_ENTRIES = (
    Ratio("token", "rho_t = pi(o_t) / pi_old(o_t)",
          "Schulman et al. 2017, PPO, arXiv:1707.06347; Shao et al. 2024, GRPO, arXiv:2402.03300", trl="token"),
    Ratio("sequence", "s_i = exp(mean_t log rho_t), one per completion",
          "Zheng et al. 2025, GSPO, arXiv:2507.18071", trl="sequence"),
    Ratio("sequence_token", "s_i,t = sg(s_i) pi(o_t) / sg(pi(o_t)): s_i's value, a per-token gradient",
          "Zheng et al. 2025, GSPO-token, arXiv:2507.18071", no_trl=_NO_TRL),
    Ratio("geometric", "R_i = exp(mean_t clip(l_t)), sign-aware clip of l_t in log space",
          "Zhao et al. 2025, GMPO, arXiv:2507.20673", no_trl=_NO_TRL,
          on_policy="on-policy its clip never binds: it trains the policy gradient of the token ratio",
          replaces_surrogate="(GMPO) clips in log space itself", log_space_clip=True),
)
RATIOS: dict[str, Ratio] = {r.name: r for r in _ENTRIES}
TOKEN = "token"   # the plain per-token ratio: what a surrogate that builds its own ratio is combined with


def trl_ratio(level: str) -> str | None:
    """The ratio TRL trains under ``GRPOConfig.importance_sampling_level=level`` (None: no such level)."""
    return next((r.name for r in RATIOS.values() if r.trl == level), None)
