"""How strongly a label holds: whether its deciding bound clears its boundary by more than the
evaluation draw alone could move it (*fragile* when not), and how many labels of a family stand.

Evaluation noise. A row's final metric avg@k over P held-out prompts averages P x k Bernoulli
draws, so re-scoring the same checkpoint moves it with sd at most sqrt(p (1 - p) / (P k)) (the
binomial bound; per-prompt heterogeneity only lowers it). A paired difference holds two
independent draws and the label reads the mean over n seeds, so the evaluation draw alone moves
the mean paired difference with sd

    sigma_eval = sqrt(2 p (1 - p) / (P k n))

with p the mean of the metric over both rungs' judged rows. Only a pass-rate metric has this
bound (``eval_draws``): ``final:eval/pass_at_1`` (P = eval.final_prompts, k = eval.final_k, each
falling back to eval.prompts, eval.k) and a named benchmark's ``final:eval/<name>/avg@n`` (P its
size, k = n; DAPO's AIME 2024 avg@32 is P 30, k 32); any other metric gets no fragility check.

Deciding bounds (signed so the claimed direction is positive, delta the smallest effect):
reproduced lo vs delta; direction holds, smaller than claimed: lo vs 0 and hi vs delta;
direction holds, size undetermined: lo vs 0; opposite direction: hi vs 0; no effect that
matters: lo vs -delta and hi vs delta; (claim of no effect) reproduced: lo vs -delta and hi vs
delta; effect that matters: lo vs delta or hi vs -delta. A label is fragile when some deciding
bound lies within sigma_eval of its boundary: a fresh evaluation draw of the same checkpoints
could cross it.
"""

from __future__ import annotations

import dataclasses
import math
import re

from grpolab.analysis.verdicts import (DECIDED, EFFECT, NO_EFFECT, OPPOSITE, REPRODUCED, SMALLER, UNDETERMINED,
                                       Verdict)

AVG_AT = re.compile(r"^final:eval/([A-Za-z0-9][A-Za-z0-9_.-]*)/avg(?:@|_at_)([1-9][0-9]*)$")


def eval_draws(metric: str, ev: dict) -> tuple[int, int] | None:
    """(prompts P, samples per prompt k) of a pass-rate metric's final evaluation, given the rung's
    ``eval`` settings (every field present); None for any other metric, or a benchmark of unknown size."""
    if metric == "final:eval/pass_at_1":
        return ev["final_prompts"] or ev["prompts"], ev["final_k"] or ev["k"]
    match = AVG_AT.match(metric)
    if not match:
        return None
    bench = next((b for b in ev.get("benchmarks") or () if b.get("name") == match.group(1)), None)
    if bench is None:
        return None
    size = bench.get("size") or ((ev["final_prompts"] or ev["prompts"]) if bench.get("source") == "held_out" else 0)
    return (int(size), int(match.group(2))) if size else None


def eval_noise_sd(p: float, prompts: int, samples: int, seeds: int) -> float:
    """sigma_eval = sqrt(2 p (1 - p) / (P k n)) (the module doc); NaN without a valid p or count."""
    if not (0 <= p <= 1) or prompts < 1 or samples < 1 or seeds < 1:
        return math.nan
    return math.sqrt(2 * p * (1 - p) / (prompts * samples * seeds))


def deciding_bounds(v: Verdict) -> list[tuple[str, float, float]]:
    """(which bound, its value, its boundary) of the label, unsigned (in the metric's direction)."""
    sign = -1.0 if v.direction == "decrease" else 1.0
    lo, hi = sorted((sign * v.low, sign * v.high))
    d = v.smallest_effect
    names = ("lower", "upper") if sign > 0 else ("upper", "lower")   # lo is the unsigned upper bound on a decrease
    pairs = {REPRODUCED: [(0, lo, d)] if v.direction != "none" else [(0, lo, -d), (1, hi, d)],
             SMALLER: [(0, lo, 0.0), (1, hi, d)], UNDETERMINED: [(0, lo, 0.0)], OPPOSITE: [(1, hi, 0.0)],
             NO_EFFECT: [(0, lo, -d), (1, hi, d)],
             EFFECT: [(0, lo, d)] if lo >= d else [(1, hi, -d)]}.get(v.verdict, [])
    return [(names[i], sign * b, sign * edge) for i, b, edge in pairs]


def fragility(v: Verdict, noise: float) -> str:
    """Why ``v``'s label is fragile at evaluation noise ``noise`` (sigma_eval), or ''."""
    if v.verdict not in DECIDED or v.face_value or not math.isfinite(noise) or not math.isfinite(v.low):
        return ""
    close = [(name, b, edge) for name, b, edge in deciding_bounds(v) if abs(b - edge) < noise]
    return "; ".join(f"fragile: the {name} bound {b:+.4f} is {abs(b - edge):.4f} from its boundary {edge:+g}, within "
                     f"the evaluation noise sd {noise:.4f} of the mean paired difference" for name, b, edge in close)


def with_fragility(v: Verdict, noise: float) -> Verdict:
    note = fragility(v, noise)
    return dataclasses.replace(v, fragile=note, diagnostics=v.diagnostics + ((note,) if note else ())) if note else v


def shown_label(v: Verdict) -> str:
    """The label as every output shows it: '*fragile*' marked after a fragile one."""
    return v.verdict + (" (*fragile*)" if v.fragile else "")


def decided_counts(verdicts: list[Verdict | None]) -> tuple[int, int, int]:
    """(decided per rung or claim, decided familywise, judged): a label counts as decided when it
    is one of ``DECIDED`` (not a check outside the data such as ``regime absent``)."""
    judged = [v for v in verdicts if v is not None]
    return (sum(v.verdict in DECIDED for v in judged), sum(v.family_label in DECIDED for v in judged), len(judged))
