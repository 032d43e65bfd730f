"""Each rung of a ladder judged against the previous one, paired by seed: the one function behind
the ladder table's verdict column and the dashboard's rung panels, so they cannot disagree.

Detail: docs/studies.md, "grpolab.analysis.ladder_verdicts".
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from grpolab.analysis.equal_tokens import EqualTokens, equal_tokens
from grpolab.analysis.histories import mean_window, run_history, train_keys
from grpolab.analysis.regimes import RegimeCheck, check_regime, with_regime
from grpolab.analysis.strength import eval_draws, eval_noise_sd, with_family_fragility, with_fragility
from grpolab.analysis.verdicts import (Verdict, paired_verdict, with_censoring, with_family, with_interim_look,
                                       with_mechanism)
from grpolab.experiment.config import EvalCfg
from grpolab.studies.definition import StudyConfig
from grpolab.studies.objectives import censored_value


@dataclass(frozen=True)
class RungVerdict:
    rung: int
    direction: str           # increase | decrease (of this rung minus the previous)
    verdict: Verdict | None  # None: the objective has no smallest effect, nothing is judged
    mechanism_value: float | None = None
    seeds: tuple[int, ...] = ()   # the paired seeds of the rung's difference that were judged
    regime: RegimeCheck | None = None   # the rung's regime gates, measured on the previous rung's rows
    eval_noise: float = math.nan        # sigma_eval of the mean paired difference (``strength``)
    equal_tokens: EqualTokens | None = None   # the secondary line at equal generated tokens (``equal_tokens``)


@dataclass(frozen=True)
class JudgedSeeds:
    """The seeds a rung's check may use under a sequential plan, and what that leaves out."""
    seeds: frozenset       # the first n_j seeds of the study (every seed when there is no plan)
    look: int              # 1-based planned look; 0: no plan; -1: not even the first look is complete
    size: int              # n_j


def judged_seeds(done: pd.DataFrame, rungs: tuple[int, ...], seeds: tuple[int, ...], plan: tuple[int, ...]) -> JudgedSeeds:
    """The largest planned look n_j (of ``plan``) whose first n_j ``seeds`` all have a complete row
    (``done``) on every rung of ``rungs``; without a plan every seed; with no complete look, the
    first look's seeds (its complete ones only are paired)."""
    if not plan:
        return JudgedSeeds(frozenset(seeds), 0, len(seeds))
    complete = set.intersection(*(set(int(s) for s in done[done.rung == r].seed) for r in rungs))
    # a look whose seeds were never added (the plan stopped before it) did not run
    looks = [j for j, n in enumerate(plan, 1) if len(seeds) >= n and set(seeds[:n]) <= complete]
    look = looks[-1] if looks else -1
    size = plan[look - 1] if looks else plan[0]
    return JudgedSeeds(frozenset(seeds[:size]), look, size)


def look_note(judged: JudgedSeeds, paired: int, beyond: int) -> str:
    """What a rung's ``why`` says when its complete pairs are not exactly one planned look's."""
    if judged.look == -1:
        return (f"look 1 is incomplete for this pair ({paired} of its {judged.size} seeds have both rows complete)"
                + (f"; {beyond} more paired seed(s) beyond it" if beyond else ""))
    if beyond:
        return (f"judged on the {judged.size} seeds of look {judged.look}; {beyond} more paired seed(s) beyond it not "
                "judged (a look is judged once all its seeds are complete)")
    return ""


def rung_eval_noise(cfg: StudyConfig, rung: int, metric: str, values: list[float], n: int,
                    draws: dict | None = None) -> float:
    """sigma_eval of the rung's mean paired difference (``strength.eval_noise_sd``) from the draws of
    the rung's final evaluation (``strength.eval_draws``), or ``draws[rung]`` (prompts, samples) where
    the metric is measured apart from it (a re-scored one); NaN for a metric that is no pass rate."""
    if draws is not None:
        draws = draws.get(rung)
    else:
        ev = {**dataclasses.asdict(EvalCfg()), **(cfg.rung_experiment(rung, cfg.seeds[0]).get("eval") or {})}
        draws = eval_draws(metric, ev)
    finite = [x for x in values if math.isfinite(x)]
    if draws is None or not finite:
        return math.nan
    return eval_noise_sd(sum(finite) / len(finite), *draws, n)


def rung_direction(cfg: StudyConfig, rung: int, objective: int) -> str:
    now, prev = cfg.rungs[rung], cfg.rungs[rung - 1]
    if objective == 0 and now.published is not None and prev.published is not None and now.published != prev.published:
        return "increase" if now.published > prev.published else "decrease"
    return "increase" if cfg.objectives[objective].direction == "maximize" else "decrease"


class _Histories:
    """MLflow histories of ladder rows, read only when a check needs them, and each curve only for
    the rows whose check reads it (a precondition or regime window: ``windows``), once."""

    def __init__(self, state: Path | None):
        self.state, self.cache, self.client = state, {}, None

    def __call__(self, run_id: str, windows=()):
        if self.client is None:
            from mlflow.tracking import MlflowClient

            from grpolab.tracking.recorder import tracking_uri
            self.client = MlflowClient(tracking_uri(self.state))
        keys = train_keys(windows)
        if run_id not in self.cache:
            self.cache[run_id] = run_history(self.client, run_id, keys)
        elif missing := keys - set(self.cache[run_id].train_curves):
            self.cache[run_id].train_curves.update(run_history(self.client, run_id, missing, evals=False).train_curves)
        return self.cache[run_id]


def censored_rows(rows: pd.DataFrame, metric: str, histories) -> pd.DataFrame:
    """The rows with threshold metrics never reached counted at their budget (``censored`` True):
    the one censoring policy of claims and tables."""
    rows = rows.copy()
    rows["censored"] = False
    for i, row in rows[(rows.state == "COMPLETE") & (rows.value == math.inf)].iterrows():
        rows.at[i, "value"], rows.at[i, "censored"] = censored_value(metric, math.inf, histories(row.run_id))
    return rows


def rung_verdicts(rows: pd.DataFrame, cfg: StudyConfig, objective: int = 0, state: Path | None = None,
                  sequential: tuple | None = None,
                  draws: dict | None = None) -> tuple[pd.DataFrame, list[RungVerdict]]:
    """(rows with censored values at their budget, one RungVerdict per rung >= 1); ``sequential``
    (``ablation.SequentialLooks``; None: no plan, level 0.95): a sequential plan's per-look level and
    number of looks (``studies.verdict_plan``) and its looks' seed counts (``studies.plan_looks``),
    each rung then judged on its largest complete look; ``draws``: per rung
    the evaluation draws of a metric measured apart from the rung's evaluation (``rung_eval_noise``).
    A rung whose rows generate more tokens than its control's is also judged at equal generated
    tokens (``equal_tokens``), outside the family: it changes no familywise label."""
    level, looks, plan = sequential if sequential is not None else (0.95, 1, ())
    obj = cfg.objectives[objective]
    histories = _Histories(state)
    rows = censored_rows(rows, obj.metric, histories)
    done = rows[rows.state == "COMPLETE"]
    out = []
    for i in range(1, len(cfg.rungs)):
        direction = rung_direction(cfg, i, objective)
        value, mech = None, cfg.rungs[i].mechanism
        if mech is not None:   # measured even where nothing is judged: the table shows it either way
            on = i if mech.rows == "this" else i - 1
            within = judged_seeds(done, (on,), cfg.seeds, plan).seeds
            value = mean_window(mech.metric, [histories(r, [mech.metric])
                                              for r in done[(done.rung == on) & done.seed.isin(within)].run_id])
        mine, before = (done[done.rung == r].set_index("seed") for r in (i, i - 1))
        paired = sorted(set(mine.index) & set(before.index))
        judged = judged_seeds(done, (i - 1, i), cfg.seeds, plan)
        common = [s for s in paired if s in judged.seeds]
        regime = cfg.rungs[i].regime and check_regime(
            cfg.rungs[i].regime, [histories(before.run_id[s], cfg.rungs[i].regime.windows()) for s in common],
            f"{cfg.rungs[i - 1].name!r} rows")
        noise = rung_eval_noise(cfg, i, obj.metric, [*mine.value[common], *before.value[common]], len(common),
                                draws)
        same = equal_tokens(cfg, i, obj, [(s, histories(mine.run_id[s]), histories(before.run_id[s])) for s in common
                                          if mine.run_id[s] and before.run_id[s]], direction, level, looks)
        if obj.smallest_effect is None:
            out.append(RungVerdict(i, direction, None, value, tuple(common), regime, noise, same))
            continue
        diffs = {int(s): float(mine.value[s] - before.value[s]) for s in common}
        v = paired_verdict(diffs, direction, obj.smallest_effect, level, looks)
        note = look_note(judged, len(common), len(paired) - len(common))
        v = dataclasses.replace(v, diagnostics=v.diagnostics + (note,)) if note and judged.look != -1 else v
        v = with_censoring(v, int(mine.censored[common].sum()), int(before.censored[common].sum()), obj.metric)
        if mech is not None:
            v = with_mechanism(v, mech.metric, value, mech.at_least, f"{cfg.rungs[on].name!r} rows")
        v = with_fragility(with_regime(v, regime), noise)
        if judged.look == -1:
            v = with_interim_look(v, note)
        out.append(RungVerdict(i, direction, v, value, tuple(common), regime, noise, same))
    scored = [r for r in out if r.verdict is not None]
    for r, v in zip(scored, with_family([r.verdict for r in scored])):   # then the family label's own fragility
        out[out.index(r)] = dataclasses.replace(r, verdict=with_family_fragility(v, r.eval_noise))
    return rows, out


