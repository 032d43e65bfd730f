"""The aggregation axis as one registry: every value's facts, as data, in one entry.

Detail: docs/methods.md, "grpolab.method.aggregations".
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Aggregation:
    """One value of the aggregation axis. Formula: the docstring of its function in
    ``grpolab.algorithms.aggregations``."""
    name: str
    formula: str                    # for ``grpolab methods``
    source: str                     # the paper (arXiv id) or library that defines it
    token_level: bool               # the normaliser counts the valid tokens of the whole update batch (every
                                    # micro-batch and process): a row masked out of the loss leaves it, and
                                    # nothing else changes (what the group filters rely on)
    reads: tuple[str, ...] = ()     # what it needs beyond the micro-batch: "token_normaliser" (the global
                                    # token count per micro-batch), "max_completion_length"
    trl: str | None = None          # TRL 1.16's PPO-clip loss_type with this aggregation
    no_trl: str | None = None       # why TRL has none (None when ``trl`` says)
    inert_when: str | None = None   # the regime in which it trains exactly as another value; None: never


_ENTRIES = (
    Aggregation("seq_mean_token_mean", "(1/B) sum_i sum_t L_it m_it / |o_i|",
                "Shao et al. 2024, DeepSeekMath, arXiv:2402.03300 (GRPO)", token_level=False, trl="grpo"),
    Aggregation("token_mean", "sum_it L_it m_it / (valid tokens of the generation batch per micro-batch)",
                "Yu et al. 2025, DAPO, arXiv:2503.14476 (token-level policy gradient loss)", token_level=True,
                reads=("token_normaliser",), trl="dapo"),
    Aggregation("seq_mean_token_sum_norm", "sum_it L_it m_it / (B x max_completion_length)",
                "Liu et al. 2025, Understanding R1-Zero-Like Training, arXiv:2503.20783 (Dr. GRPO)",
                token_level=False, reads=("max_completion_length",), trl="dr_grpo"),
    Aggregation("token_mean_local", "sum_it L_it m_it / (valid tokens of this micro-batch)",
                "TRL 1.16 GRPOConfig(loss_type='bnpo') (TRL's name; no paper defines this normaliser)",
                # token-level within one micro-batch only: each micro-batch's mean is then divided by the
                # accumulation steps, so one a filter empties still counts in 1/GA and shrinks the step
                token_level=False, trl="bnpo"),
    Aggregation("seq_mean_token_sum", "(1/B) sum_i sum_t L_it m_it (each sequence weighted by its length)",
                "Liu et al. 2026, Length-Unbiased Sequence Policy Optimization, arXiv:2602.05261 (LUSPO)",
                token_level=False, trl="luspo"),
)
AGGREGATIONS: dict[str, Aggregation] = {a.name: a for a in _ENTRIES}
TOKEN_LEVEL: tuple[str, ...] = tuple(a.name for a in _ENTRIES if a.token_level)
