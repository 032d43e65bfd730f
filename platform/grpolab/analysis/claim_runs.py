"""``grpolab verdicts``: run what the claims' studies are missing (through the study driver, so
every rung x seed row exists exactly once), read each row's metric windows back from MLflow
(``analysis/histories.py``), and judge every claim on its paired seeds. Nothing here trains directly.

Detail: docs/studies.md, "grpolab.analysis.claim_runs".
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np

from grpolab.analysis import inference
from grpolab.analysis.claims import Claim, Side, claim_files, load_claim
from grpolab.analysis.histories import mean_window, run_history, train_keys
from grpolab.analysis.regimes import RegimeCheck, check_regime, with_regime
from grpolab.analysis.verdicts import (Verdict, paired_verdict, stops, with_censoring, with_construction, with_family,
                                       with_interim_look, with_mechanism)
from grpolab.errors import ConfigError
from grpolab.studies import registration as preregistration
from grpolab.studies.definition import load_study
from grpolab.studies.study_run import StudyRun
from grpolab.studies.until_decided import run_until_decided
from grpolab.studies.objectives import censored_value, parse_threshold, window_value


@dataclass
class ClaimResult:
    claim: Claim
    verdict: Verdict
    censored: int = 0
    mechanism_value: float | None = None
    report: dict = field(default_factory=dict)      # metric -> (mean paired difference, n)
    treatment_values: dict = field(default_factory=dict)
    control_values: dict = field(default_factory=dict)
    preregistration: str = ""
    sequential: str = ""            # the look this verdict was made at, when seeds were added on demand
    premise: RegimeCheck | None = None   # the claim's premise gates, measured


def _side_values(claim: Claim, side: Side, metric: str, runs: dict, histories: dict) -> tuple[dict, set]:
    """seed -> value of one side (a rung's runs, or the fixed reference for every seed), and the
    seeds whose value was censored (counted at the budget)."""
    if side.value is not None:
        return {seed: side.value for seed in runs.get(claim.treatment.rung, {})}, set()
    out, censored = {}, set()
    for seed, run_id in runs.get(side.rung, {}).items():
        seed_metric = seed_threshold(claim, metric, seed, runs, histories)
        if seed_metric is None:   # the threshold's rung has no row for this seed: no value
            out[seed] = math.nan
            continue
        out[seed], was = censored_value(seed_metric, window_value(seed_metric, histories[run_id]), histories[run_id])
        if was:
            censored.add(seed)
    return out, censored


def seed_threshold(claim: Claim, metric: str, seed: int, runs: dict, histories: dict) -> str | None:
    """The metric with a threshold relative to ``claim.threshold_of`` (``claims``): for
    ``steps_to:K>=f`` the threshold of seed s is x_s = f x final:K of that rung's row of seed s,
    registered as a rule before any row; otherwise the metric as written."""
    agg, _, key = metric.partition(":")
    if claim.threshold_of is None or agg not in ("steps_to", "tokens_to"):
        return metric
    name, fraction = parse_threshold(key)
    run_id = runs.get(claim.threshold_of, {}).get(seed)
    if run_id is None:
        return None
    return f"{agg}:{name}>={fraction * window_value(f'final:{name}', histories[run_id])!r}"


def _scaled(claim: Claim, values: dict) -> dict:
    """log10 of each value for a ratio claim (``scale: log10``; a value <= 0 has none: NaN)."""
    if claim.scale != "log10":
        return values
    return {s: math.log10(v) if v > 0 and math.isfinite(v) else math.nan for s, v in values.items()}


def _claim_rows(claim: Claim, state: Path, storage_url: str | None, seeds: int | None = None):
    """(runs {rung name: {seed: run id}}, histories {run id: RunHistory}, (level, looks), plan note,
    interim: no planned look complete yet),
    on the study's first ``seeds`` seeds when given (a sequential look); under the study's own plan,
    on the largest planned look whose seeds are all complete on the claim's rungs, as its table
    judges a rung (``ladder_verdicts.judged_seeds``)."""
    from mlflow.tracking import MlflowClient

    from grpolab.analysis.ablation import ladder_rows, load_results
    from grpolab.analysis.ladder_verdicts import judged_seeds
    from grpolab.studies.storage import plan_looks, sequential_note, verdict_plan
    from grpolab.tracking.recorder import tracking_uri
    cfg, study = load_results(claim.study_path, state, storage_url, create=False)
    if study is None:   # never run: judged as not run, and no empty study left in the storage
        return {}, {}, (0.95, 1), "", False
    rows, where, interim = ladder_rows(study, cfg), "", False
    if seeds is not None:
        rows = rows[rows.seed.isin(cfg.seeds[:seeds])]
    elif plan := plan_looks(study):   # the study's own plan: the largest planned look complete on the claim's rungs
        names = [r.name for r in cfg.rungs]
        sides = tuple(sorted({names.index(s.rung) for s in (claim.treatment, claim.control) if s.rung}))
        judged = judged_seeds(rows[rows.state == "COMPLETE"], sides, cfg.seeds, plan)
        rows = rows[rows.seed.isin(judged.seeds)]
        interim = judged.look == -1
        where = (f"judged on look {judged.look} of {len(plan)} ({judged.size} seeds)" if not interim
                 else f"look 1 of {judged.size} seeds is incomplete on the claim's rungs")
        if claim.metric_of(claim.treatment) != cfg.objectives[0].metric:
            where += f"; the study's looks stopped on its own metric {cfg.objectives[0].metric}, not this claim's"
    runs: dict[str, dict] = {}
    for row in rows[rows.state == "COMPLETE"].itertuples():
        runs.setdefault(cfg.rungs[row.rung].name, {})[row.seed] = row.run_id
    metrics = [claim.metric_of(claim.treatment), claim.metric_of(claim.control), *claim.report,
               claim.mechanism.metric if claim.mechanism else None, *(claim.premise.windows() if claim.premise else ())]
    client, keys = MlflowClient(tracking_uri(state)), train_keys(metrics)
    rungs = {side.rung for side in (claim.treatment, claim.control) if side.rung} | {claim.threshold_of} - {None}
    needed = {r for rung in rungs for r in runs.get(rung, {}).values()}
    level, looks, _ = verdict_plan(study)
    note = "; ".join(filter(None, [where, sequential_note(study)]))
    return runs, {run_id: run_history(client, run_id, keys) for run_id in needed}, (level, looks), note, interim


def judge(claim: Claim, state: Path, storage_url: str | None, seeds: int | None = None) -> ClaimResult:
    """Read the claim's rows (already run) and return its verdict on the paired seeds (the first
    ``seeds`` only, at a sequential look), at its study's verdict level (0.95, or the per-look level
    of seeds added until decided)."""
    runs, histories, (level, looks), plan, interim = _claim_rows(claim, state, storage_url, seeds)

    def paired(t_metric: str, c_metric: str, scaled: bool = False):
        t, ct = _side_values(claim, claim.treatment, t_metric, runs, histories)
        c, cc = _side_values(claim, claim.control, c_metric, runs, histories)
        if scaled:   # the claim's own metric on its scale; the metrics beside it as they are
            t, c = _scaled(claim, t), _scaled(claim, c)
        common = sorted(set(t) & set(c))
        return ({s: t[s] - c[s] for s in common}, t, c,
                sum(s in ct for s in common), sum(s in cc for s in common))   # censored, paired seeds only

    diffs, t, c, ct, cc = paired(claim.metric_of(claim.treatment), claim.metric_of(claim.control), scaled=True)
    verdict = paired_verdict(diffs, claim.direction, claim.smallest_effect, level, looks)
    verdict = with_censoring(verdict, ct, cc, claim.metric)
    if claim.kind == "construction_check":
        verdict = with_construction(verdict)
    result = ClaimResult(claim, verdict, ct + cc, treatment_values=t, control_values=c, sequential=plan)
    for metric in claim.report if claim.control.rung else ():   # beside-metrics compare two rungs
        d = paired(metric, metric)[0]
        finite = [v for v in d.values() if math.isfinite(v)]
        result.report[metric] = (float(np.mean(finite)) if finite else math.nan, len(finite))
    if claim.mechanism:
        m = claim.mechanism
        side = claim.control if m.rows == "control" else claim.treatment
        value = mean_window(m.metric, [histories[r] for r in runs.get(side.rung, {}).values()])
        result.mechanism_value = value
        result.verdict = with_mechanism(result.verdict, m.metric, value, m.at_least, f"{side.rung!r} rows")
    if claim.premise:   # on the judged paired seeds only, as a ladder rung's regime
        side = claim.control if claim.premise.rows == "control" else claim.treatment
        on = runs.get(side.rung, {})
        result.premise = check_regime(claim.premise, [histories[on[s]] for s in sorted(diffs) if s in on],
                                      f"{side.rung!r} rows of the {len(diffs)} paired seeds")
        result.verdict = with_regime(result.verdict, result.premise)
    if interim:   # as a ladder rung's: an interim look joins no family
        result.verdict = with_interim_look(result.verdict, "look 1 is incomplete on the claim's rungs")
    study_cfg = load_study(claim.study_path)
    result.preregistration = preregistration.status(state, _prereg_key(claim), _registered(claim, study_cfg),
                                                    claim.deviations + study_cfg.deviations)
    return result


def _prereg_key(claim: Claim) -> str:
    return f"claim:{claim.name}"


def _registered(claim: Claim, study_cfg) -> dict:
    """A claim's registered fields: its verdict fields and its study's whole definition (as written)."""
    return {**claim.registered_fields, "study_definition": preregistration.definition_hash(study_cfg)}


def register_claims(claims: list[Claim], state: Path, storage_url: str | None) -> None:
    """Hash each claim's pre-registered fields the first time it is seen in this state, with the
    number of its study's rows already complete (0: registered before any row ran)."""
    from grpolab.analysis.ablation import ladder_rows, load_results
    done: dict[str, int] = {}
    for claim in claims:
        if claim.study_path not in done:
            cfg, study = load_results(claim.study_path, state, storage_url)
            rows = ladder_rows(study, cfg)
            done[claim.study_path] = int((rows.state == "COMPLETE").sum())
        preregistration.record(state, _prereg_key(claim), _registered(claim, load_study(claim.study_path)),
                               done[claim.study_path])


def _run_studies(claims: list[Claim], state: Path, storage_url: str | None, workers: int, echo, publish=None,
                 own_plans: bool = True) -> None:
    """Run each claim study's missing rows once, cheapest first; a study with a seeds-on-demand design
    (``seeds: {first, batch, cap}``) runs its own plan unless the claims' looks drive the seeds."""
    from grpolab.studies.coordinator import run_study

    def cost(path: str) -> int:   # cheapest study first: early verdicts come early
        cfg = load_study(path)
        return len(cfg.rows()) * int((cfg.base.get("train") or {}).get("steps", 1))
    for path in sorted(dict.fromkeys(c.study_path for c in claims), key=cost):
        started, run = time.time(), StudyRun.of(path, state, storage_url=storage_url, workers=workers, echo=echo,
                                                publish=publish)
        design = run.study.on_demand
        echo(f"study {Path(path).name}: running missing rows ({workers} worker(s))"
             + (f", seeds on demand up to {design.cap}" if design and own_plans else ""))
        if design and own_plans:   # the study's registered plan: its looks and levels, which the claims then use
            from grpolab.analysis.until_decided import LADDER_LOOKS
            code = run_until_decided(run, design, LADDER_LOOKS)
        else:
            code = run_study(run)
        echo(f"study {Path(path).name}: done in {time.time() - started:.0f}s" + (" (some rows failed)" if code else ""))


def judge_family(claims: list[Claim], state: Path, storage_url: str | None) -> list[ClaimResult]:
    """Judge every claim, then Holm-adjust their label tests as one family."""
    results = [judge(c, state, storage_url) for c in claims]
    for r, v in zip(results, with_family([r.verdict for r in results])):
        r.verdict = v
    return results


class AddedSeeds(NamedTuple):
    """Whether seeds are added until every claim is decided (``--until-decided``), up to how many
    (``--max-seeds``), and how many per look (``--batch``)."""
    until_decided: bool = False
    max_seeds: int | None = None
    batch: int = 2


def run_claims(names: list[str] | None, state: Path, storage_url: str | None, workers: int, echo=print,
               added: AddedSeeds = AddedSeeds(), publish=None) -> list[ClaimResult]:
    """Validate every claim first, register them, run each needed study's missing rows once, then
    judge; with ``added.until_decided``, add seeds and look again (docs/studies.md,
    "grpolab.analysis.claim_runs"). ``publish`` is passed to each study run (``run_study``)."""
    claims = [load_claim(p) for p in claim_files(names)]      # bad claims stop here, before any training
    looks = _plan_looks(claims, *added)
    Path(state).mkdir(parents=True, exist_ok=True)
    register_claims(claims, state, storage_url)
    if not looks:
        _run_studies(claims, state, storage_url, workers, echo, publish)
        return judge_family(claims, state, storage_url)
    return _sequential(claims, looks, state, storage_url, workers, echo, publish)


def _plan_looks(claims: list[Claim], until_decided: bool, max_seeds: int | None, batch: int) -> list[int]:
    if not until_decided:
        if max_seeds is not None:
            raise ConfigError("--max-seeds: only with --until-decided")
        return []
    planned = sorted({Path(c.study_path).name for c in claims if load_study(c.study_path).on_demand})
    if planned:
        raise ConfigError(f"--until-decided: {', '.join(planned)} register their own seeds-on-demand plan "
                          "(seeds: {first, batch, cap}), which plain `grpolab verdicts` runs; leave out those claims "
                          "or the flag")
    start = max(len(load_study(c.study_path).seeds) for c in claims)
    if max_seeds is None or max_seeds < start:
        raise ConfigError(f"--until-decided needs --max-seeds N with N >= the studies' seeds ({start})")
    if batch < 1:
        raise ConfigError(f"--batch: must be >= 1, got {batch}")
    return inference.planned_looks(start, batch, max_seeds)


def _sequential(claims, looks, state, storage_url, workers, echo, publish=None) -> list[ClaimResult]:
    """Look at start, start + batch, ..., max seeds, each at level 1 - alpha/K; stop at the first look
    where every verdict is decided. Undecided claims get seeds; decided ones keep theirs."""
    from grpolab.studies.storage import add_seeds, default_storage, record_sequential
    level = inference.sequential_level(0.95, len(looks))
    storage = storage_url or default_storage(state)
    for path in dict.fromkeys(c.study_path for c in claims):
        record_sequential(load_study(path), storage, looks, level)
    pending, final = list(claims), {}
    for j, n in enumerate(looks, 1):
        for path in dict.fromkeys(c.study_path for c in pending):
            add_seeds(load_study(path), storage, n)
        _run_studies(pending, state, storage_url, workers, echo, publish, own_plans=False)
        results = [judge(c, state, storage_url, seeds=n) for c in pending]
        echo(f"look {j}/{len(looks)} at {n} seeds (per-look level {100 * level:.4g} %): " +
             ", ".join(f"{r.claim.name}: {r.verdict.verdict}" for r in results))
        for r in results:
            r.sequential = f"decided at look {j} of {len(looks)}; {r.sequential}"
            final[r.claim.name] = r
        # decided on an unflagged interval, not a test, or censored (more seeds cannot remove censoring): no more seeds
        pending = [r.claim for r in results if not stops(r.verdict) and not r.censored]
        for r in results:
            if r.claim in pending and j == len(looks):
                r.sequential = r.sequential.replace("decided at", "undecided after")
        if not pending:
            break
    ordered = [final[c.name] for c in claims]
    for r, v in zip(ordered, with_family([r.verdict for r in ordered])):
        r.verdict = v
    return ordered


