"""A study worker: claims a row (a ladder's enqueued trial, or a search's sampled point) and
trains it, reporting exactly once. Each claimed trial carries a heartbeat (heartbeat.py) while it
runs; a trial whose worker is interrupted (Ctrl-C, SIGTERM, even when a library turned the
signal into another error) is reported ``interrupted`` and re-queued by the next coordinator;
one reaped by another process (its worker presumed dead or hung) is not reported at all.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from pathlib import Path
from typing import NamedTuple

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import TrialState

from grpolab.errors import ConfigError
from grpolab.experiment.run_identity import RunIdentity
from grpolab.signals import (RunKilled, forget_signals, raise_if_signalled, signal_behind, signal_pending,
                             signals_raise)
from grpolab.studies.study_config import StudyConfig, quiet_build
from grpolab.studies.heartbeat import Heartbeat, TrialReaped
from grpolab.studies.objectives import objective_value
from grpolab.studies.processes import pin_worker_threads
from grpolab.studies.resume import RESUMES_ATTR, checkpoint_to_resume, previous_holder_gone
from grpolab.studies.row_interrupts import RowTimedOut, job_end_raises, running_trial, timeouts_interrupt
from grpolab.studies.row_on_ranks import run_on_ranks
from grpolab.studies.row_run import PrunedRun, run_row
from grpolab.studies.registration import definition_hash
from grpolab.studies.rows import (DEFINITION_ATTR, OUTCOME_ATTR, PARENT_RUN_ATTR, PASS_AT_1_ATTR, ROW_ATTR, RUN_ATTR,
                                  SPURIOUS_ATTR, study_run_identity)
from grpolab.studies.run_closing import end_trial_runs, link_restart
from grpolab.studies.storage import load_for_worker, with_added_seeds
from grpolab.studies.time_limit import TimeLimit, row_fits

log = logging.getLogger(__name__)


def objective_values(cfg: StudyConfig, result) -> list[float]:
    return [metric_value(o.metric, result) for o in cfg.objectives]


def metric_value(metric: str, result) -> float:
    """The study metric of a finished (or partial) run: ``objectives.objective_value``, the one
    function behind tables, trial values and the pruner."""
    return objective_value(metric, result.evals, result.train_curves)


class ClaimedTrial(NamedTuple):
    """A trial this worker claimed, with what its row reports through: the study it belongs to,
    its heartbeat, and the state folder its runs live in."""
    study: optuna.Study
    trial: optuna.Trial
    heartbeat: Heartbeat
    state: Path


def run_one_trial(study: optuna.Study, cfg: StudyConfig, state: Path, parent_run_id: str, procs_per_row: int = 1,
                  storage_url: str | None = None) -> bool:
    """Run one trial; False when a ladder has no waiting row left. The trial is claimed with a
    heartbeat (heartbeat.py) for as long as it runs. ``procs_per_row`` > 1: the row trains as that
    many processes (ranks.py), which load the study from ``storage_url`` to prune."""
    waiting = lambda: study.get_trials(deepcopy=False, states=(TrialState.WAITING,))  # noqa: E731
    if cfg.study_kind.queued_rows and not waiting():
        return False
    if procs_per_row == 1:   # (several: the rank processes import it, not this one)
        from grpolab.experiment import runner  # noqa: F401 - the heavy imports happen before a row is claimed, not on its clock
        # looked at again after the import, which takes seconds where no go-signal preloaded it (a Slurm
        # job's worker): another worker may have claimed the last row meanwhile
        if cfg.study_kind.queued_rows and not waiting():
            return False
    trial = study.ask()
    try:
        if cfg.study_kind.queued_rows and ROW_ATTR not in trial.user_attrs:
            # another worker took the last waiting row between our check and ask(): not a row (marked
            # first, so that a process stopped between the two writes leaves no unexplained failure)
            trial.set_user_attr(SPURIOUS_ATTR, True)
            study.tell(trial, state=TrialState.FAIL)
            return False
        heartbeat = Heartbeat(trial)
        claim = ClaimedTrial(study, trial, heartbeat, state)
        raise_if_signalled()   # a signal deferred inside the claim's store calls: hand the row back now
    except BaseException:
        _hand_back_claim(study, trial)
        raise
    try:
        with running_trial(trial.number):
            values = _train_trial(claim, cfg, parent_run_id, procs_per_row, storage_url)
    except PrunedRun:
        _report(claim, "pruned", TrialState.PRUNED)
    except (TrialReaped, RowTimedOut) as exc:   # handed back: its run is KILLED, the next row goes on
        log.warning("%s", exc)
    except (KeyboardInterrupt, SystemExit, RunKilled):
        forget_signals()   # this is the signal's exception: the unwinding must not raise it again
        _report(claim, "interrupted", TrialState.FAIL)
        raise
    except Exception as exc:  # noqa: BLE001 - recorded on the trial and in MLflow, the study goes on
        # a library turned the signal's raise into this error (Optuna's journal lock), or a store write
        # failed while the row unwound from the signal (a locked MLflow database): interrupted, not an error
        behind = signal_behind(exc)
        if signal_pending() or behind is not None:
            _report(claim, "interrupted", TrialState.FAIL)
            raise_if_signalled(exc)
            raise type(behind)(*behind.args) from exc
        _report(claim, "error", TrialState.FAIL, error=f"{type(exc).__name__}: {exc}"[:2000])
        log.error("trial %d failed: %s", trial.number, exc)
    else:
        undefined = _nan_objectives(cfg, values)
        if undefined:   # Optuna would FAIL a NaN silently, and the row would read interrupted, re-queued forever
            _report(claim, "error", TrialState.FAIL, error=undefined)
            log.error("trial %d failed: %s", trial.number, undefined)
        else:
            _report(claim, "complete", TrialState.COMPLETE, values=values)
    finally:
        heartbeat.stop()
    return True


def _hand_back_claim(study, trial) -> None:
    """A Ctrl-C or a storage error between ``study.ask()`` and the heartbeat: the trial has no
    holder yet, and would stay RUNNING until the reaper's grace ran out. It is failed at once as
    ``interrupted``, so the next coordinator re-queues its row."""
    try:
        trial.set_user_attr(OUTCOME_ATTR, "interrupted")
        study.tell(trial, state=TrialState.FAIL)
    except Exception as exc:  # noqa: BLE001 - the claim's own error is the one to raise; the reaper is the fallback
        log.warning("trial %d: could not hand back the claim: %s", trial.number, exc)


def _nan_objectives(cfg: StudyConfig, values: list[float]) -> str | None:
    """The error for a row whose objective value is NaN (undefined), or None. inf is a value:
    ``steps_to:``/``tokens_to:`` give it to a run that never reached the threshold."""
    undefined = [o.metric for o, v in zip(cfg.objectives, values) if math.isnan(v)]
    if not undefined:
        return None
    return f"objective {', '.join(undefined)} is NaN for this run: the row has no value to report"


def _train_trial(claim: ClaimedTrial, cfg: StudyConfig, parent_run_id: str, procs_per_row: int = 1,
                 storage_url: str | None = None) -> list[float]:
    study, trial, heartbeat, state = claim
    data, labels = cfg.study_kind.trial_experiment(cfg, trial)   # a ladder row or a sampled search point
    exp = quiet_build(data)

    previous = trial.user_attrs.get(RESUMES_ATTR)
    resume_run_id = checkpoint_to_resume(previous, state, exp.resolved())
    if resume_run_id and not previous_holder_gone(study, resume_run_id):
        log.warning("run %s is not continued: the worker that ran it may still be alive; "
                    "the row restarts in a fresh run", resume_run_id)
        resume_run_id = None

    def on_run(run_id: str) -> None:
        heartbeat.progressed()
        # The restart link is written before the trial names its run, so no signal lands between a
        # named run and its link. Reaping needs no run id on the trial (it finds runs by their tags).
        if previous and run_id != previous:
            link_restart(state, previous, run_id)
        trial.set_user_attr(RUN_ATTR, run_id)

    run_name, method = study_run_identity(cfg, trial.number, labels, exp)
    tags = {"grpolab.study": cfg.name, "optuna.study": cfg.name, "optuna.trial_number": trial.number,
            **{f"grpolab.{k}": v for k, v in labels.items()}, "grpolab.method": method,
            **({"grpolab.restart_of": previous} if previous and not resume_run_id else {}),
            **({"grpolab.cuda_visible_devices": os.environ["CUDA_VISIBLE_DEVICES"]}   # this worker's devices
               if "CUDA_VISIBLE_DEVICES" in os.environ else {})}
    prunes = cfg.study_kind.prunes(cfg)
    if procs_per_row > 1:
        spec = {"experiment": data, "state": str(state), "parent_run_id": parent_run_id,
                "tags": {**tags, "grpolab.processes": procs_per_row,   # and the launcher's file, when one launched them
                         **({"grpolab.accelerate_config": cfg.launcher.accelerate_config}
                            if cfg.launcher.accelerate_config else {})}, "run_name": run_name,
                "resume_run_id": resume_run_id, "metric": cfg.objectives[0].metric,
                "prune": {"study": cfg.path, "storage": storage_url, "trial_id": trial._trial_id}
                if prunes else None}
        result = run_on_ranks(procs_per_row, spec, heartbeat, on_run, cfg.launcher.accelerate_config,
                              exp.train.dtype)
    else:
        result = run_row(exp, state, RunIdentity(parent_run_id, tags, run_name, resume_run_id), heartbeat, on_run,
                          trial if prunes else None, cfg.objectives[0].metric)
    if "eval/pass_at_1" in result.final_eval:   # for the progress lines (rows.latest_finished)
        try:
            trial.set_user_attr(PASS_AT_1_ATTR, result.final_eval["eval/pass_at_1"])
        except UpdateFinishedTrialError:   # reaped meanwhile: _report discards the row
            pass
    return objective_values(cfg, result)


def _report(claim: ClaimedTrial, outcome: str, trial_state, values=None, error=None) -> None:
    """Stop the heartbeat, then report. If a reaper finished the trial first (this worker was
    presumed dead), nothing is reported and the trial's runs end KILLED: the row was handed back."""
    study, trial, heartbeat, state = claim
    heartbeat.stop()
    try:
        if error is not None:
            trial.set_user_attr("error", error)
        trial.set_user_attr(OUTCOME_ATTR, outcome)
        if values is not None:
            study.tell(trial, values if len(values) > 1 else values[0])
            return
        study.tell(trial, state=trial_state)
    except (UpdateFinishedTrialError, ValueError):
        current = study.get_trials(deepcopy=False)[trial.number]
        if current.state == TrialState.RUNNING:
            raise   # not a reaped trial: a real error
        reason = (f"trial {trial.number} was reaped before its worker reported ({outcome}); "
                  "its row was handed back and this result is discarded")
        log.warning("%s", reason)
        end_trial_runs(study, state, trial, reason)
        return
    # A signal between the run's creation and its recorder taking charge leaves it RUNNING: end it.
    end_trial_runs(study, state, trial, f"trial {trial.number} ended {outcome} before its run was closed",
                   status="FAILED" if outcome == "error" else "KILLED", from_statuses=("RUNNING",))


def _check_same_definition(study, cfg: StudyConfig) -> None:
    """A worker process reads the study file itself, maybe long after its coordinator did (a Slurm
    job that waited in the queue): rows trained from an edited file would join rows of the stored
    definition in one table, so the worker refuses before it claims any row."""
    stored = study.user_attrs.get(DEFINITION_ATTR)
    if stored is not None and stored != definition_hash(cfg):
        raise ConfigError(f"{cfg.path}: the study file changed after study {cfg.name!r} was set up from it; this "
                          "worker runs no row: restore the file, or run the study command again (with "
                          "--accept-changed to keep the rows made so far under the edited definition)")


def worker_loop(cfg: StudyConfig, storage_url: str, state: Path, after_trial=None, procs_per_row: int = 1,
                accelerate_config: str | None = None, limit: TimeLimit | None = None) -> None:
    """Claim and train rows until none waits (a search: its budget is spent), a signal stops the
    worker, or a row would not fit in ``limit`` (time_limit.TimeLimit, this command's only)."""
    if accelerate_config is not None:   # the coordinator's choice (its flag or the file's), already checked
        cfg = dataclasses.replace(cfg, launcher=dataclasses.replace(cfg.launcher, accelerate_config=accelerate_config))
    if procs_per_row == 1:   # (several: each rank pins its own share; this process does not train)
        pin_worker_threads()
    study = load_for_worker(cfg, storage_url)   # created by the coordinator; a worker never creates one
    _check_same_definition(study, cfg)
    cfg = with_added_seeds(cfg, study)
    parent = study.user_attrs[PARENT_RUN_ATTR]
    rows_run = 0
    with signals_raise(), timeouts_interrupt(), job_end_raises():
        while True:
            if after_trial is not None:
                after_trial()
            if cfg.study_kind.budget_spent(study, cfg) or (limit is not None and not row_fits(study, limit)):
                return
            raise_if_signalled()   # a SIGTERM swallowed outside a trial still stops the worker
            if not run_one_trial(study, cfg, state, parent, procs_per_row, storage_url):
                return
            rows_run += 1
