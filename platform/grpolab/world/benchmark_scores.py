"""The scores a benchmark reports from n samples per prompt, as papers report them.

Detail: docs/runs.md, "grpolab.world.benchmark_scores".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one prompt with ``c`` of ``n`` samples correct (formula above)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:   # every k-subset holds a correct sample
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def reported_ks(n: int) -> list[int]:
    """The k of pass@k a benchmark with n samples reports: powers of 2 up to n, and n."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    return sorted({2 ** e for e in range(n.bit_length()) if 2 ** e <= n} | {n})


def majority_answer(answers: Sequence[str | None], equivalent: Callable[[str, str], bool] | None = None) -> int | None:
    """Index of the first sample carrying the majority answer, answers clustered by ``equivalent``
    (default: string equality; ties: the cluster seen first), or None when no sample has an answer
    (None or empty)."""
    firsts: list[int] = []    # per cluster: the sample index of its first answer
    counts: list[int] = []
    for i, answer in enumerate(answers):
        if answer is None or answer == "":
            continue
        for c, first in enumerate(firsts):
            rep = answers[first]
            if rep == answer or (equivalent is not None and equivalent(rep, answer)):
                counts[c] += 1
                break
        else:
            firsts.append(i)
            counts.append(1)
    if not counts:
        return None
    return firsts[counts.index(max(counts))]   # index() finds the earliest of the tied clusters


def benchmark_scores(hits: Sequence[Sequence[bool]], answers: Sequence[Sequence[str | None]] | None,
                     lengths: Sequence[int] = (), equivalent: Callable[[str, str], bool] | None = None) -> dict[str, float]:
    """``hits[p][j]``: sample j of prompt p is correct; ``answers[p][j]``: its extracted answer
    (None: no answers known, so no maj_at_n); ``equivalent``: the grader's equivalence the
    majority vote clusters answers by. Every prompt has the same n samples. Returns avg_at_n,
    pass_at_k (each reported k), maj_at_n, sd_at_n and, given token lengths, mean_length."""
    if not hits:
        raise ValueError("a benchmark needs at least one prompt")
    n = len(hits[0])
    _check_shape(hits, answers, n)
    prompts = len(hits)
    correct = [sum(bool(h) for h in row) for row in hits]
    out = {f"avg_at_{n}": sum(correct) / (prompts * n)}
    for k in reported_ks(n):
        out[f"pass_at_{k}"] = sum(pass_at_k(n, c, k) for c in correct) / prompts
    if answers is not None:
        majority = [majority_answer(row, equivalent) for row in answers]
        out[f"maj_at_{n}"] = sum(bool(row[m]) for row, m in zip(hits, majority) if m is not None) / prompts
    per_sample = [sum(bool(row[j]) for row in hits) / prompts for j in range(n)]
    mean = sum(per_sample) / n
    out[f"sd_at_{n}"] = math.sqrt(sum((a - mean) ** 2 for a in per_sample) / (n - 1)) if n > 1 else 0.0
    if lengths:
        out["mean_length"] = sum(lengths) / len(lengths)
    return out


def _check_shape(hits, answers, n: int) -> None:
    """Every prompt's hits and answers hold the same n samples; errors name the first bad row."""
    for p, row in enumerate(hits):
        if len(row) != n:
            raise ValueError(f"hits[{p}] holds {len(row)} samples, hits[0] holds {n}: every prompt needs the same n")
    if answers is None:
        return
    if len(answers) != len(hits):
        raise ValueError(f"answers holds {len(answers)} prompts, hits {len(hits)}: one answer row per prompt")
    for p, row in enumerate(answers):
        if len(row) != n:
            raise ValueError(f"answers[{p}] holds {len(row)} answers, expected n = {n} (one per sample)")
