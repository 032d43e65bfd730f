"""The scores a benchmark reports from n samples per prompt, as papers report them.

For one prompt with n samples of which c are correct:

    pass@k = 1 - C(n-c, k) / C(n, k)                     (Chen et al. 2021, unbiased, k <= n)
           = 1 - prod_{i=n-c+1}^{n} (1 - k / i)           (the same, as a product: no huge binomials)

over the prompts, the mean. Every k <= n that is a power of 2 is reported, and k = n.

    avg@n  = mean over prompts of c / n                   (= pass@1; DAPO's "avg@32")
    maj@n  = fraction of prompts whose majority answer (the most frequent extracted answer among
             the n samples) is correct; samples without an answer do not vote; a tie goes to the
             tied answer that appears first in sample order (deterministic: sample order is the
             seeded generation order); no answer at all counts as wrong
    sd@n   = sample standard deviation, over the n sample indices j, of acc_j = the mean
             correctness of sample j over the prompts (the spread of a one-sample evaluation;
             0 when n = 1)

Keys are the names MLflow stores (``avg_at_32``; MLflow refuses '@' in metric names).
"""

from __future__ import annotations

import math
from collections.abc import Sequence


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


def majority_answer(answers: Sequence[str | None]) -> int | None:
    """Index of the first sample carrying the majority answer (ties: the answer seen first), or
    None when no sample has an answer (None or empty)."""
    counts: dict[str, int] = {}
    first: dict[str, int] = {}
    for i, answer in enumerate(answers):
        if answer is None or answer == "":
            continue
        counts[answer] = counts.get(answer, 0) + 1
        first.setdefault(answer, i)
    if not counts:
        return None
    best = max(counts.values())
    return min(first[a] for a, count in counts.items() if count == best)


def benchmark_scores(hits: Sequence[Sequence[bool]], answers: Sequence[Sequence[str | None]],
                     lengths: Sequence[int] = ()) -> dict[str, float]:
    """``hits[p][j]``: sample j of prompt p is correct; ``answers[p][j]``: its extracted answer.
    Every prompt has the same n samples. Returns avg_at_n, pass_at_k (each reported k), maj_at_n,
    sd_at_n and, given token lengths, mean_length."""
    if not hits:
        raise ValueError("a benchmark needs at least one prompt")
    n = len(hits[0])
    if any(len(row) != n for row in hits) or len(answers) != len(hits):
        raise ValueError("every prompt needs the same number of samples and answers")
    prompts = len(hits)
    correct = [sum(bool(h) for h in row) for row in hits]
    out = {f"avg_at_{n}": sum(correct) / (prompts * n)}
    for k in reported_ks(n):
        out[f"pass_at_{k}"] = sum(pass_at_k(n, c, k) for c in correct) / prompts
    majority = [majority_answer(row) for row in answers]
    out[f"maj_at_{n}"] = sum(bool(row[m]) for row, m in zip(hits, majority) if m is not None) / prompts
    per_sample = [sum(bool(row[j]) for row in hits) / prompts for j in range(n)]
    mean = sum(per_sample) / n
    out[f"sd_at_{n}"] = math.sqrt(sum((a - mean) ** 2 for a in per_sample) / (n - 1)) if n > 1 else 0.0
    if lengths:
        out["mean_length"] = sum(lengths) / len(lengths)
    return out
