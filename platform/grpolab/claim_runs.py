"""``grpolab verdicts``: run what the claims' studies are missing (through the study driver, so
every rung x seed row exists exactly once), read each row's metric windows back from MLflow, and
judge every claim on its paired seeds. Nothing here trains directly.

Metric windows go through the studies' own objective function (``study_trials.metric_value``, which
delegates to ``objectives.objective_value``: the one function behind tables, trial values and
the pruner), on a RunResult rebuilt from the run's MLflow history, so a claim
and a table never disagree on what ``tail:entropy`` means. Only the two within-run windows a
claim may add (``head:``, ``start:``) are computed here.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .claims import Claim, Side, claim_files, is_censored, load_claim
from .errors import ConfigError
from .verdicts import UNDERPOWERED, Verdict, paired_verdict

EVAL_KEYS = ("eval/pass_at_1", "eval/pass_at_k", "eval/greedy_accuracy", "eval/mean_length")


@dataclass
class _History:
    """The RunResult interface that ``study_trials.metric_value`` reads, filled from MLflow."""
    evals: dict
    train_curves: dict

    @property
    def start_eval(self) -> dict:
        return self.evals[min(self.evals)]

    @property
    def final_eval(self) -> dict:
        return self.evals[max(self.evals)]


def run_history(client, run_id: str, train_keys: set[str]) -> _History:
    from .tracking import clean_metric_name
    evals: dict[int, dict] = {}
    for key in EVAL_KEYS:
        for m in client.get_metric_history(run_id, clean_metric_name(key)):
            evals.setdefault(m.step, {})[key] = m.value
    curves = {}
    for key in train_keys | {"tokens/cumulative"}:
        curves[key] = sorted((m.step, m.value) for m in client.get_metric_history(run_id, clean_metric_name(key)))
    return _History(evals, curves)


def window_value(metric: str, history) -> float:
    """A metric window of one run: the shared objective function, plus head:/start: windows."""
    from .study_trials import metric_value
    agg, _, key = metric.partition(":")
    if agg == "head":   # the mirror of tail: finite points at steps <= 1/4 of the latest step (at least the first)
        points = sorted((s, v) for s, v in history.train_curves.get(key, []) if v is not None and math.isfinite(v))
        if not points:
            return math.nan
        head = [v for s, v in points if s <= 0.25 * points[-1][0]] or [points[0][1]]
        return sum(head) / len(head)
    if agg == "start":
        return history.start_eval[key]
    try:
        return metric_value(metric, history)
    except ConfigError:   # e.g. no finite point of the curve (nothing clipped): no value for this seed
        return math.nan


def _censor(metric: str, value: float, history, budget_steps: int) -> tuple[float, bool]:
    """A threshold never reached is at least the budget: use the budget (a conservative bound)."""
    if not is_censored(metric, value):
        return value, False
    if metric.startswith("steps_to"):
        return float(budget_steps), True
    tokens = history.train_curves.get("tokens/cumulative") or [(0, math.nan)]
    return float(tokens[-1][1]), True


@dataclass
class ClaimResult:
    claim: Claim
    verdict: Verdict
    censored: int = 0
    regime_value: float | None = None
    regime_met: bool = True
    report: dict = field(default_factory=dict)      # metric -> (mean paired difference, n)
    treatment_values: dict = field(default_factory=dict)
    control_values: dict = field(default_factory=dict)


def _train_keys(claim: Claim) -> set[str]:
    metrics = [claim.metric_of(claim.treatment), claim.metric_of(claim.control), *claim.report]
    if claim.regime_check:
        metrics.append(claim.regime_check["metric"])
    return {m.split(":", 1)[1] for m in metrics if m.split(":", 1)[0] in ("tail", "head")}


def _side_values(claim: Claim, side: Side, metric: str, runs: dict, histories: dict, budget: int) -> tuple[dict, int]:
    """seed -> value of one side (a rung's runs, or the fixed reference for every seed)."""
    if side.value is not None:
        return {seed: side.value for seed in runs.get(claim.treatment.rung, {})}, 0
    out, censored = {}, 0
    for seed, run_id in runs.get(side.rung, {}).items():
        value, was = _censor(metric, window_value(metric, histories[run_id]), histories[run_id], budget)
        out[seed], censored = value, censored + was
    return out, censored


def judge(claim: Claim, state: Path, storage_url: str | None) -> ClaimResult:
    """Read the claim's rows (already run) and return its verdict on the paired seeds."""
    from mlflow.tracking import MlflowClient

    from .study_tables import ladder_rows, load_results
    from .tracking import tracking_uri
    cfg, study = load_results(claim.study_path, state, storage_url)
    rows = ladder_rows(study, cfg)
    runs: dict[str, dict] = {}
    for row in rows[rows.state == "COMPLETE"].itertuples():
        runs.setdefault(cfg.rungs[row.rung].name, {})[row.seed] = row.run_id
    client, keys = MlflowClient(tracking_uri(state)), _train_keys(claim)
    needed = {r for side in (claim.treatment, claim.control) if side.rung for r in runs.get(side.rung, {}).values()}
    histories = {run_id: run_history(client, run_id, keys) for run_id in needed}
    budget = int((cfg.base.get("train") or {}).get("steps", 0))

    def paired(t_metric: str, c_metric: str):
        t, ct = _side_values(claim, claim.treatment, t_metric, runs, histories, budget)
        c, cc = _side_values(claim, claim.control, c_metric, runs, histories, budget)
        return {s: t[s] - c[s] for s in sorted(set(t) & set(c))}, t, c, ct + cc

    diffs, t, c, censored = paired(claim.metric_of(claim.treatment), claim.metric_of(claim.control))
    verdict = paired_verdict(diffs, claim.direction, claim.smallest_effect)
    result = ClaimResult(claim, verdict, censored, treatment_values=t, control_values=c)
    for metric in claim.report if claim.control.rung else ():   # beside-metrics compare two rungs
        d = paired(metric, metric)[0]
        finite = [v for v in d.values() if math.isfinite(v)]
        result.report[metric] = (float(np.mean(finite)) if finite else math.nan, len(finite))
    if claim.regime_check:
        side = claim.control if claim.control.rung else claim.treatment
        values = [window_value(claim.regime_check["metric"], histories[r]) for r in runs.get(side.rung, {}).values()]
        values = [v for v in values if math.isfinite(v)]
        result.regime_value = float(np.mean(values)) if values else math.nan
        result.regime_met = bool(values) and result.regime_value >= claim.regime_check["at_least"]
        if not result.regime_met and verdict.verdict != UNDERPOWERED:
            result.verdict = Verdict("inconclusive (regime not met)",
                                     f"{claim.regime_check['metric']} = {result.regime_value:.3g} < "
                                     f"{claim.regime_check['at_least']:g} on {side.rung!r}; at face value: {verdict.verdict}",
                                     verdict.n, verdict.n_resamples, verdict.mean, verdict.low, verdict.high,
                                     verdict.sd, verdict.seeds_needed, verdict.differences, verdict.level)
    return result


def run_claims(names: list[str] | None, state: Path, storage_url: str | None, workers: int, echo=print) -> list[ClaimResult]:
    """Validate every claim first, run each needed study's missing rows once, then judge."""
    from .studies import run_study
    claims = [load_claim(p) for p in claim_files(names)]      # bad claims stop here, before any training
    from .study_config import load_study

    def cost(path: str) -> int:   # cheapest study first: early verdicts come early
        cfg = load_study(path)
        return len(cfg.rows()) * int((cfg.base.get("train") or {}).get("steps", 1))
    for path in sorted(dict.fromkeys(c.study_path for c in claims), key=cost):
        started = time.time()
        echo(f"study {Path(path).name}: running missing rows ({workers} worker(s))")
        code = run_study(path, state, storage_url, workers, retry_failed=False, echo=echo)
        echo(f"study {Path(path).name}: done in {time.time() - started:.0f}s" + (" (some rows failed)" if code else ""))
    return [judge(c, state, storage_url) for c in claims]


@contextlib.contextmanager
def _stdout_to_stderr():
    """Send file descriptor 1 to stderr for the duration (this process and the worker processes
    it starts), so that stdout carries only the verdict table."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def verdicts_command(args) -> int:
    """`grpolab verdicts [claims...]`: run what is missing, print the verdict table, write the
    verdict dashboard. Exit 0 (verdicts are results, whatever they say). Only the table goes
    to stdout (``--format csv`` pipes into a CSV reader); progress, the dashboard path and the
    summary line go to stderr."""
    from .state import state_dir
    from .verdict_report import render_verdicts, write_claims_dashboard

    def note(line: str) -> None:
        print(line, file=sys.stderr, flush=True)
    if args.workers < 1:
        raise ConfigError(f"--workers: must be >= 1, got {args.workers}")
    state = state_dir(args.state)
    started = time.time()
    with _stdout_to_stderr():   # what the studies, their workers and libraries print is not table data
        if args.no_run:
            results = [judge(load_claim(p), state, args.storage) for p in claim_files(args.claims)]
        else:
            results = run_claims(args.claims, state, args.storage, args.workers, echo=note)
    table = render_verdicts(results, args.format)
    sys.stdout.write(table if table.endswith("\n") else table + "\n")
    sys.stdout.flush()
    out = write_claims_dashboard(results, state / "dashboards" / "verdicts.html")
    note(f"dashboard: {Path(out).resolve()}")
    note(f"{len(results)} claim(s) judged in {time.time() - started:.0f}s")
    return 0
