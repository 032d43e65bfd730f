"""The aggregation axis as one registry: every value's facts, as data, in one entry.

An aggregation turns per-token losses L_it (mask m_it) into the micro-batch's scalar loss. An entry
says its formula and source, whether its normaliser counts tokens (only such a normaliser can leave
a dropped group out: zero-variance filtering needs one), what it reads from the trainer beyond the
micro-batch, and how stock TRL 1.16 names it (TRL's ``loss_type`` encodes the surrogate and the
aggregation together: the name here is the PPO-clip loss type; the other surrogates' loss types are
in ``grpolab.method.surrogates``). Its torch function is attached by name one floor up
(``grpolab.algorithms.aggregations``; a test checks one function per entry and one entry per
function). The axis's valid values (``spec.AXIS_CHOICES``) and the checks that depend on a
normaliser's kind (``spec.validate_spec``) derive from here.
Adding an aggregation: one entry here, its function in ``algorithms/aggregations.py``, and its test.
Pure data, no torch: validating an experiment imports this.
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
