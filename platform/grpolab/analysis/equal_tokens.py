"""A rung judged a second time at equal generated tokens, where its rows generate more tokens than
its control's (paired token ratio >= TOKEN_RATIO_FLOOR, measured, whatever the method): the
treatment read at its last evaluation within the control's final token count, the control at its
end, both on the curve's prompts. A secondary analysis outside the familywise family.

Detail: docs/studies.md, "Equal generated tokens (secondary)".
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from grpolab.analysis.verdicts import Verdict, paired_verdict
from grpolab.experiment.config import EvalCfg
from grpolab.studies.definition import StudyConfig
from grpolab.tracking.held_out import CURVE_SET_KEY

TOKEN_RATIO_FLOOR = 1.05   # below it the rungs generated about the same tokens: equal steps is equal tokens
NEAR = 0.85   # the treatment is read at 85-100 % of the control's tokens (one 8-step rollout window of a 60-step
             # equal-token point is 13 %), or the seed has no equal-token point
METRIC = "final:eval/pass_at_1"   # the one objective with a value on the curve's prompts at every evaluation
TOKENS = "tokens/cumulative"
NOT_JUDGED = "not judged at equal generated tokens"


@dataclass(frozen=True)
class EqualTokens:
    ratio: float                      # mean over the judged seeds of treatment's final tokens / control's
    verdict: Verdict | None = None    # None: not judged, ``reason`` says why
    reason: str = ""
    steps: tuple[int, ...] = ()       # the treatment's evaluation step per judged seed
    treatment_tokens: float = math.nan   # mean over those seeds of the treatment's tokens at that step
    control_tokens: float = math.nan     # mean over the judged seeds of the control's final tokens
    prompts: int = 0                  # the curve's prompts (eval.prompts), the common set compared


def tokens_at(history, step: int) -> float:
    """Cumulative generated tokens of the model evaluated at ``step``: the first ``tokens/cumulative``
    point at or after it, since a rollout's tokens are generated at the start of its window of
    optimizer steps and logged at the window's end (0 at step 0: nothing is generated before
    training); NaN with none."""
    if step == 0:
        return 0.0
    points = [v for s, v in sorted(history.train_curves.get(TOKENS, [])) if s >= step]
    return float(points[0]) if points else math.nan


def final_tokens(history) -> float:
    points = sorted(history.train_curves.get(TOKENS, []))
    return float(points[-1][1]) if points else math.nan


def token_ratio(pairs: list) -> float:
    """Mean over (seed, treatment history, control history) of final tokens treatment / control;
    NaN where no pair logged both."""
    ratios = [t / c for t, c in ((final_tokens(a), final_tokens(b)) for _, a, b in pairs)
              if math.isfinite(t) and math.isfinite(c) and c > 0]
    return sum(ratios) / len(ratios) if ratios else math.nan


def _eval_cfg(cfg: StudyConfig, rung: int) -> dict:
    return {**dataclasses.asdict(EvalCfg()), **(cfg.rung_experiment(rung, cfg.seeds[0]).get("eval") or {})}


def curve_value(history, step: int, final_on_curve: bool) -> float:
    """pass@1 on the curve's prompts at ``step``: an earlier evaluation's own value; the final one's
    ``CURVE_SET_KEY`` (or its pass@1 where it scores the curve's prompts only); NaN when not logged."""
    ev = history.evals.get(step, {})
    if step == max(history.evals):
        return ev.get(CURVE_SET_KEY, ev.get("eval/pass_at_1", math.nan) if final_on_curve else math.nan)
    return ev.get("eval/pass_at_1", math.nan)


def matched_step(treatment, control_tokens: float) -> int | None:
    """The treatment's last evaluation after step 0 whose cumulative tokens lie in
    [NEAR * ``control_tokens``, ``control_tokens``] (a measured point, no interpolation: it never
    credits the treatment with tokens it had not yet generated, and is never read at far fewer);
    None when no evaluation is that close."""
    steps = [s for s in sorted(treatment.evals)
             if s > 0 and NEAR * control_tokens <= tokens_at(treatment, s) <= control_tokens]
    return steps[-1] if steps else None


def prompt_mismatch(cfg: StudyConfig, rung: int) -> str:
    """Why the two rungs' curve evaluations cannot be compared on a common prompt set, or ''."""
    t, c = _eval_cfg(cfg, rung), _eval_cfg(cfg, rung - 1)
    if (t["prompts"], t["seed"]) != (c["prompts"], c["seed"]):
        return (f"the curve evaluations differ in prompts (treatment {t['prompts']} of eval.seed {t['seed']}, "
                f"control {c['prompts']} of eval.seed {c['seed']}): no common prompt set")
    return ""


def equal_tokens(cfg: StudyConfig, rung: int, obj, pairs: list, direction: str, level: float = 0.95,
                 looks: int = 1) -> EqualTokens | None:
    """The rung's equal-token line on objective ``obj`` from its judged ``pairs`` [(seed, treatment
    history, control history)]; None where the token ratio is below TOKEN_RATIO_FLOOR or unmeasured. Judged with
    the main line's paired test (level, smallest effect, direction, looks); d_s = y_t(s*) - y_c(T),
    s* = ``matched_step``, y on the curve's prompts (``curve_value``)."""
    ratio = token_ratio(pairs)
    if not ratio >= TOKEN_RATIO_FLOOR:
        return None
    ev = _eval_cfg(cfg, rung)
    out = EqualTokens(ratio, prompts=ev["prompts"], control_tokens=_mean([final_tokens(c) for _, _, c in pairs]))
    on = f"(token ratio {ratio:.2f} >= {TOKEN_RATIO_FLOOR:g})"
    if obj.metric != METRIC:
        return dataclasses.replace(out, reason=f"{NOT_JUDGED}: only {METRIC} has a value on the curve's prompts at "
                                               f"every evaluation, the objective is {obj.metric} {on}")
    if obj.smallest_effect is None:
        return dataclasses.replace(out, reason=f"{NOT_JUDGED}: no smallest_effect for {obj.metric} {on}")
    if why := prompt_mismatch(cfg, rung):
        return dataclasses.replace(out, reason=f"{NOT_JUDGED}: {why} {on}")
    # each side's own config: whether its final evaluation scores the curve's prompts only
    on_curve = {r: (_eval_cfg(cfg, r)["final_prompts"] or ev["prompts"]) == ev["prompts"] for r in (rung - 1, rung)}
    diffs, steps, at, early, unlogged = {}, [], [], 0, 0
    for seed, treatment, control in pairs:
        step = matched_step(treatment, final_tokens(control))
        if step is None:
            early += 1
            continue
        before = curve_value(control, max(control.evals), on_curve[rung - 1]) if control.evals else math.nan
        diff = curve_value(treatment, step, on_curve[rung]) - before
        if not math.isfinite(diff):
            unlogged += 1
        else:
            diffs[int(seed)] = diff
            steps.append(step)
            at.append(tokens_at(treatment, step))
    if unlogged:
        why = (f"{unlogged} of {len(pairs)} paired seeds logged no {CURVE_SET_KEY}, the final evaluation's value on "
               f"the curve's {ev['prompts']} prompts (rows recorded before it was logged: rerun them)")
        return dataclasses.replace(out, reason=f"{NOT_JUDGED}: {why} {on}")
    if early:
        # all or none: judging only the seeds that had an evaluation in time would select seeds by
        # their own token ratio (the seeds that regenerated most drop out), a biased subset
        why = (f"{early} of {len(pairs)} paired seeds have no evaluation at {NEAR * 100:.0f}-100 % of the control's "
               f"generated tokens (mean {out.control_tokens:,.0f}), and judging the rest would select seeds by their "
               "token ratio (add evaluations: eval.every)")
        return dataclasses.replace(out, reason=f"{NOT_JUDGED}: {why} {on}")
    v = paired_verdict(diffs, direction, obj.smallest_effect, level, looks)
    return dataclasses.replace(out, verdict=v, steps=tuple(steps), treatment_tokens=_mean(at),
                               control_tokens=_mean([final_tokens(c) for s, _, c in pairs if int(s) in diffs]))


def _mean(values: list[float]) -> float:
    finite = [x for x in values if math.isfinite(x)]
    return sum(finite) / len(finite) if finite else math.nan


def equal_tokens_text(et: EqualTokens | None, direction: str = "increase") -> str:
    """The rung's second answer line ('' without one): its label, paired difference with the
    interval, seeds, and where each side was read."""
    if et is None:
        return ""
    if et.verdict is None:
        return et.reason
    v = et.verdict
    interval = f"[{v.low:+.3f}, {v.high:+.3f}]" if math.isfinite(v.low) and math.isfinite(v.high) else \
        "[interval not measured]"
    steps = sorted(set(et.steps))
    where = f"step {steps[0]}" if len(steps) == 1 else f"steps {steps[0]}-{steps[-1]}"
    drop = "" if direction == "increase" else " (tested: drop)"
    return (f"at equal generated tokens (secondary, outside the familywise family; token ratio {et.ratio:.2f}): "
            f"{v.verdict}{drop}, {v.mean:+.3f} {interval}, {v.n} paired seed{'s' if v.n != 1 else ''}; treatment at "
            f"{where} ({et.treatment_tokens:,.0f} tokens), control at its end ({et.control_tokens:,.0f} tokens), "
            f"on the curve's {et.prompts} prompts; {'; '.join([v.reason, *v.diagnostics])}")
