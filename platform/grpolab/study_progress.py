"""Study progress: the state of every ladder row (or search trial), the live progress line and
the final summary, read from the Optuna storage only.

Row states: COMPLETE (a trial of the row completed: counted once, whatever else happened), FAIL
(its latest trial raised an error; re-run only with --retry-failed), INTERRUPTED (its latest
trial was stopped by Ctrl-C or SIGTERM, or reaped after its worker died: re-queued by the next
``grpolab study``), RUNNING, WAITING, MISSING (never queued).
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

from optuna.trial import TrialState

if TYPE_CHECKING:
    import optuna

    from .study_config import StudyConfig

ROW_ATTR, OUTCOME_ATTR, RUN_ATTR = "row", "outcome", "mlflow_run_id"
PASS_AT_1_ATTR = "final_pass_at_1"   # a finished row's final held-out pass@1 (the progress lines show it)


def row_key(rung: int, seed: int) -> str:
    return f"r{rung}-s{seed}"


def row_states(study: optuna.Study, cfg: StudyConfig) -> dict[str, str]:
    """Each ladder row's state: COMPLETE if one of its trials completed, else its latest trial's
    state, a FAIL split into FAIL (an error) and INTERRUPTED (Ctrl-C, SIGTERM, or reaped); MISSING
    when it has no trial."""
    latest: dict[str, str] = {}
    for t in study.get_trials(deepcopy=False):
        key = t.user_attrs.get(ROW_ATTR)
        if key is None or latest.get(key) == "COMPLETE":
            continue
        name = t.state.name
        if t.state == TrialState.FAIL and t.user_attrs.get(OUTCOME_ATTR) != "error":
            name = "INTERRUPTED"
        latest[key] = name
    return {row_key(r, s): latest.get(row_key(r, s), "MISSING") for r, s in cfg.rows()}


def progress(study: optuna.Study, cfg: StudyConfig, started: float, workers: int) -> dict:
    trials = [t for t in study.get_trials(deepcopy=False) if cfg.kind == "search" or ROW_ATTR in t.user_attrs]
    if cfg.kind == "ladder":
        states = list(row_states(study, cfg).values())
        count = {name: states.count(name) for name in ("COMPLETE", "RUNNING", "WAITING", "FAIL", "INTERRUPTED")}
        count["INTERRUPTED"] += states.count("MISSING")
    else:
        count = {s.name: sum(t.state == s for t in trials) for s in TrialState}
        errors = sum(t.state == TrialState.FAIL and t.user_attrs.get(OUTCOME_ATTR) == "error" for t in trials)
        count.update(COMPLETE=count["COMPLETE"] + count["PRUNED"], FAIL=errors, INTERRUPTED=count["FAIL"] - errors)
    total = len(cfg.rows()) if cfg.kind == "ladder" else cfg.n_trials
    done = count["COMPLETE"]
    durations = [(t.datetime_complete - t.datetime_start).total_seconds() for t in trials
                 if t.state == TrialState.COMPLETE and t.datetime_complete and t.datetime_start]
    remaining = max(total - done, 0)
    eta = (sum(durations) / len(durations)) * math.ceil(remaining / max(workers, 1)) if durations else None
    return {"done": done, "total": total, "running": count["RUNNING"], "waiting": count["WAITING"],
            "failed": count["FAIL"], "interrupted": count["INTERRUPTED"], "elapsed": time.time() - started, "eta": eta,
            "latest": latest_finished(trials)}


def latest_finished(trials) -> tuple[str, float] | None:
    """(row, final held-out pass@1) of the row that finished last, or None before any did."""
    finished = [t for t in trials if t.state == TrialState.COMPLETE and t.datetime_complete
                and isinstance(t.user_attrs.get(PASS_AT_1_ATTR), (int, float))]
    if not finished:
        return None
    last = max(finished, key=lambda t: (t.datetime_complete, t.number))
    return last.user_attrs.get(ROW_ATTR) or f"trial {last.number}", float(last.user_attrs[PASS_AT_1_ATTR])


def format_progress(p: dict) -> str:
    eta = "?" if p["eta"] is None else f"{int(p['eta'] // 60)}m{int(p['eta'] % 60):02d}s"
    interrupted = f", {p['interrupted']} interrupted" if p.get("interrupted") else ""
    latest = f", last finished {p['latest'][0]}: pass@1 {p['latest'][1]:.3g}" if p.get("latest") else ""
    return (f"rows {p['done']}/{p['total']} done, {p['running']} running, {p['failed']} failed{interrupted}, "
            f"elapsed {int(p['elapsed'])}s, ETA {eta}{latest}")


def summary(study, cfg: StudyConfig, final: dict, echo) -> int:
    """Say which rows failed or did not complete; the exit code: 0 only when every row is done."""
    failed = final["failed"]   # rows left failed (not retried) are counted among them
    if failed:
        echo(f"{failed} row(s) failed; see `grpolab table {cfg.path}` and rerun with --retry-failed")
    if cfg.kind == "ladder":
        open_rows = [f"{k} ({v.lower()})" for k, v in row_states(study, cfg).items() if v not in ("COMPLETE", "FAIL")]
    else:
        missing = final["total"] - final["done"] - final["failed"]
        open_rows = [f"{missing} trial(s)"] if missing > 0 else []
    if open_rows:
        echo(f"{len(open_rows) if cfg.kind == 'ladder' else missing} row(s) did not complete: {', '.join(open_rows)}; "
             "run the same command again to resume them")
    return 1 if failed or open_rows else 0
