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

from grpolab.studies.study_config import StudyConfig, quiet_build
from grpolab.studies.time_limit import TimeLimit, completed_since, row_fits
from grpolab.tracking.naming import method_label

if TYPE_CHECKING:
    import optuna


# Optuna user attributes. On a trial: its row, how it ended, its MLflow run. On the study: the
# MLflow parent run that holds the study's tables and dashboard, and the study file's path.
ROW_ATTR, OUTCOME_ATTR, RUN_ATTR = "row", "outcome", "mlflow_run_id"
# a trial a worker opened when another had just claimed the last waiting row: failed at once, never a row
SPURIOUS_ATTR = "spurious"
PARENT_RUN_ATTR, STUDY_PATH_ATTR = "mlflow_parent_run_id", "study_path"
DEFINITION_ATTR = "definition_hash"   # the study file's definition its rows are made from (registration.definition_hash)
PASS_AT_1_ATTR = "final_pass_at_1"   # a finished row's final held-out pass@1 (the progress lines show it)


def row_key(rung: int, seed: int) -> str:
    return f"r{rung}-s{seed}"


def row_trials(study: optuna.Study) -> dict[str, list]:
    """Each ladder row's trials, oldest first (a row gets a new trial each time it is re-queued)."""
    by_row: dict[str, list] = {}
    for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
        if ROW_ATTR in t.user_attrs:
            by_row.setdefault(t.user_attrs[ROW_ATTR], []).append(t)
    return by_row


def deciding_trial(trials: list):
    """The trial that decides a row: its first completed trial (a row counts once, whatever ran
    after it), else its latest trial; None for a row never queued. The one rule for the row's
    state (progress), its value (the tidy frame) and whether it is queued again (coordinator)."""
    for t in trials:
        if t.state == TrialState.COMPLETE:
            return t
    return trials[-1] if trials else None


def trial_row_state(trial) -> str:
    """A deciding trial's row state: a FAIL is an error only when the trial recorded one;
    otherwise (Ctrl-C, SIGTERM, reaped after its worker died or hung) it was INTERRUPTED."""
    if trial is None:
        return "MISSING"
    if trial.state == TrialState.FAIL and trial.user_attrs.get(OUTCOME_ATTR) != "error":
        return "INTERRUPTED"
    return trial.state.name


def row_states(study: optuna.Study, cfg: StudyConfig) -> dict[str, str]:
    """Each ladder row's state, from its deciding trial."""
    by_row = row_trials(study)
    return {row_key(r, s): trial_row_state(deciding_trial(by_row.get(row_key(r, s), []))) for r, s in cfg.rows()}


def progress(study: optuna.Study, cfg: StudyConfig, started: float, workers: int) -> dict:
    trials, count = cfg.study_kind.row_counts(study, cfg)
    total = cfg.study_kind.total_rows(cfg)
    done = count["COMPLETE"]
    remaining = max(total - done, 0)
    eta = _eta(trials, started, remaining, workers)
    return {"done": done, "total": total, "running": count["RUNNING"], "waiting": count["WAITING"],
            "failed": count["FAIL"], "interrupted": count["INTERRUPTED"], "elapsed": time.time() - started, "eta": eta,
            "latest": latest_finished(trials)}


def _eta(trials, started: float, remaining: int, workers: int) -> float | None:
    """Seconds left: from this session's throughput (rows finished since it started, over its wall
    time: the slower first rows -- a warm start, imports -- and parallel workers are in it), else
    from the median duration of earlier rows per worker; None before any row finished."""
    complete = [t for t in trials if t.state == TrialState.COMPLETE and t.datetime_complete and t.datetime_start]
    recent = [t for t in complete if t.datetime_complete.timestamp() >= started]
    elapsed = time.time() - started
    if recent and elapsed > 0:
        return remaining * elapsed / len(recent)
    durations = sorted((t.datetime_complete - t.datetime_start).total_seconds() for t in complete)
    if not durations:
        return None
    return durations[len(durations) // 2] * math.ceil(remaining / max(workers, 1))


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


def summary(study, cfg: StudyConfig, final: dict, echo, limit: TimeLimit | None = None) -> int:
    """Say which rows failed or did not complete; the exit code: 0 only when every row is done, or
    when the command's time limit (time_limit.TimeLimit) left rows waiting after some row of this
    run completed (none did: no row fits the limit, 1)."""
    failed = final["failed"]   # rows left failed (not retried) are counted among them
    if failed:
        echo(f"{failed} row(s) failed; see `grpolab table {cfg.path}` and rerun with --retry-failed")
    missing, open_rows = cfg.study_kind.open_rows(study, cfg, final)
    if (open_rows and limit is not None and not failed and not final["interrupted"] and not final["running"]
            and not row_fits(study, limit)):   # the limit, not a failure, left them (the coordinator drops it for those)
        if not completed_since(study, limit.started):
            echo(f"no row fitted in the time limit ({(limit.claim_until - limit.started) / 60:.3g} min) and none ran; "
                 f"{missing} row(s) wait: run the command with a longer --time-limit")
            return 1
        echo(f"the time limit ended this run with {missing} row(s) waiting; run the same command again to go on "
             "(the rows made so far are kept)")
        return 0
    if open_rows:
        echo(f"{missing} row(s) did not complete: {', '.join(open_rows)}; "
             "run the same command again to resume them")
    return 1 if failed or open_rows else 0


def waiting_rows(study) -> int:
    return len(study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))


def study_run_identity(cfg, trial_number: int, labels: dict, exp) -> tuple[str, str]:
    """(run name, method label) of a study trial: ladder rows are named by rung and seed, and
    their method is named relative to the ladder's first rung (``naive_grpo + eps_high=0.28``)."""
    first = quiet_build(cfg.study_kind.reference_experiment(cfg, labels["seed"]))
    method = method_label(exp.spec, exp.method_name, first.spec if first.method_name == exp.method_name else None)
    return cfg.study_kind.run_name(cfg, trial_number, labels), method
