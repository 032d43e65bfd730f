"""How strongly a label holds: whether its deciding bound clears its boundary by more than the
evaluation draw alone could move it (*fragile* when not), and how many labels of a family stand.

Detail: docs/studies.md, "grpolab.analysis.strength".
"""

from __future__ import annotations

import dataclasses
import math
import re

from grpolab.analysis.verdicts import (DECIDED, EFFECT, NO_EFFECT, OPPOSITE, REPRODUCED, SMALLER, UNDETERMINED,
                                       Verdict, paired_verdict)
from grpolab.tasks.sources import locate_rows, read_rows

AVG_AT = re.compile(r"^final:eval/([A-Za-z0-9][A-Za-z0-9_.-]*)/(?:avg(?:@|_at_)([1-9][0-9]*)|pass_at_1)$")
FRAGILE_SDS = 2.0   # a bound closer than this many sigma_eval crosses on a fresh draw with probability > 2.3 %


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
    source = bench.get("source", "held_out")
    size = bench.get("size") or ((ev["final_prompts"] or ev["prompts"]) if source == "held_out" else file_rows(source))
    samples = int(match.group(2)) if match.group(2) else int(bench.get("n", 1))   # pass_at_1 averages its n samples
    return (int(size), samples) if size else None


def file_rows(source) -> int:
    """Rows of a benchmark file or hub dataset read whole (size 0); 0 where it is not readable here
    (a hub dataset not in the cache: no download for a fragility check)."""
    if not isinstance(source, dict) or "path" not in source:
        return 0
    rows = locate_rows(source["path"], source.get("split"), source.get("config"), source.get("revision"),
                       "eval.benchmarks")
    return len(read_rows(rows)[0]) if rows.available else 0


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


def crossing_probability(distance: float, noise: float) -> float:
    """Phi(-|b - e| / sigma_eval): the chance a fresh evaluation draw moves a bound across its boundary."""
    return 0.5 * math.erfc(abs(distance) / noise / math.sqrt(2))


def fragility(v: Verdict, noise: float, which: str = "") -> str:
    """Why ``v``'s label is fragile at evaluation noise ``noise`` (sigma_eval), or ''. ``which``:
    a word naming the interval (e.g. 'familywise ')."""
    if v.verdict not in DECIDED or v.face_value or not math.isfinite(noise) or not math.isfinite(v.low):
        return ""
    close = [(name, b, edge) for name, b, edge in deciding_bounds(v) if abs(b - edge) < FRAGILE_SDS * noise]
    return "; ".join(f"fragile: the {which}{name} bound {b:+.4f} is {abs(b - edge):.4f} from its boundary {edge:+g}, "
                     f"within {FRAGILE_SDS:g} x the evaluation noise sd {noise:.4f} of the mean paired difference: "
                     f"a fresh evaluation draw crosses it with probability "
                     f"{100 * crossing_probability(b - edge, noise):.2g} %" for name, b, edge in close)


def family_fragility(v: Verdict, noise: float) -> str:
    """Why ``v``'s familywise label is fragile: the same check on the family's Bonferroni interval
    (``verdicts.with_family``), or ''."""
    if not v.family_label or v.face_value or not v.differences or not math.isfinite(v.family_level):
        return ""
    fam = paired_verdict(v.differences, v.direction, v.smallest_effect, v.family_level)
    return fragility(dataclasses.replace(fam, verdict=v.family_label), noise, "familywise ")


def with_family_fragility(v: Verdict, noise: float) -> Verdict:
    note = family_fragility(v, noise)
    return dataclasses.replace(v, family_fragile=note, diagnostics=v.diagnostics + (note,)) if note else v


def with_fragility(v: Verdict, noise: float) -> Verdict:
    note = fragility(v, noise)
    return dataclasses.replace(v, fragile=note, diagnostics=v.diagnostics + ((note,) if note else ())) if note else v


def shown_label(v: Verdict) -> str:
    """The label as every output shows it: '*fragile*' marked after a fragile one."""
    return v.verdict + (" (*fragile*)" if v.fragile else "")


def shown_family_label(v: Verdict) -> str:
    """The familywise label as every output shows it, '*fragile*' marked the same way."""
    return v.family_label + (" (*fragile*)" if v.family_fragile and v.family_label else "")


def decided_counts(verdicts: list[Verdict | None]) -> tuple[int, int, int, int, int]:
    """(decided per rung or claim, of those fragile, decided familywise, of those fragile, judged):
    a label counts as decided when it is one of ``DECIDED`` (not a check outside the data such as
    ``regime absent``), fragile or not."""
    judged = [v for v in verdicts if v is not None]
    decided = [v for v in judged if v.verdict in DECIDED]
    family = [v for v in judged if v.family_label in DECIDED]
    return (len(decided), sum(bool(v.fragile) for v in decided), len(family),
            sum(bool(v.family_fragile) for v in family), len(judged))


def counts_text(decided: int, fragile: int, family: int, family_fragile: int, judged: int) -> str:
    """'k of 5 decided (f fragile), j familywise (g fragile)': the header's counts."""
    return f"{decided} of {judged} decided ({fragile} fragile), {family} familywise ({family_fragile} fragile)"
