"""A study worker: claims a row (a ladder's enqueued trial, or a search's sampled point) and
trains it, reporting exactly once. Each claimed trial carries a heartbeat (lifecycle.py) while it
runs; a trial whose worker is interrupted (Ctrl-C, SIGTERM, even when a library turned the
signal into another error) is reported ``interrupted`` and re-queued by the next coordinator;
one reaped by another process (its worker presumed dead or hung) is not reported at all.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import optuna
import yaml
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import TrialState

from grpolab.errors import ConfigError
from grpolab.experiment.config import apply_overrides, build_config
from grpolab.signals import RunKilled, forget_signals, raise_if_signalled, signal_pending
from grpolab.studies import ranks
from grpolab.studies.definition import StudyConfig, load_study
from grpolab.studies.lifecycle import (
    RESUMES_ATTR,
    Heartbeat,
    RowTimedOut,
    TrialReaped,
    abort_if_lost,
    checkpoint_to_resume,
    end_trial_runs,
    job_end_raises,
    link_restart,
    previous_holder_gone,
    running_trial,
    signals_raise,
    timeouts_interrupt,
)
from grpolab.studies.objectives import objective_value
from grpolab.studies.rows import OUTCOME_ATTR, PARENT_RUN_ATTR, PASS_AT_1_ATTR, ROW_ATTR, RUN_ATTR
from grpolab.studies.search_space import suggest
from grpolab.studies.storage import create_or_load, load_for_worker, with_added_seeds  # studies.py runs this module's worker loop
from grpolab.tracking.naming import ladder_run_name, method_label

log = logging.getLogger(__name__)

def objective_values(cfg: StudyConfig, result) -> list[float]:
    return [metric_value(o.metric, result) for o in cfg.objectives]


def metric_value(metric: str, result) -> float:
    """The study metric of a finished (or partial) run: ``objectives.objective_value``, the one
    function behind tables, trial values and the pruner."""
    return objective_value(metric, result.evals, result.train_curves)


ADDED_SEED_MAX = 2**31 - 1


def _trial_experiment(cfg: StudyConfig, trial: optuna.Trial) -> tuple[dict, dict]:
    """(experiment dict, labels) for the trial: a ladder row or a sampled search point."""
    if cfg.kind == "ladder":
        rung = trial.suggest_int("rung", 0, len(cfg.rungs) - 1)
        row_seed = int(trial.user_attrs.get(ROW_ATTR, "s-1").rsplit("-s", 1)[-1])
        if row_seed in cfg.added_seeds:   # enqueued by studies.enqueue_missing_rows as added_seed
            seed = trial.suggest_int("added_seed", 0, ADDED_SEED_MAX)
        else:
            seed = trial.suggest_categorical("seed", [s for s in cfg.seeds if s not in cfg.added_seeds])
        return cfg.rung_experiment(rung, seed), {"rung": rung, "rung_name": cfg.rungs[rung].name, "seed": seed}
    point = suggest(trial, cfg.space)
    seed = cfg.seeds[trial.number % len(cfg.seeds)]
    overrides = [f"{k}={yaml.safe_dump(v, default_flow_style=True).strip()}" for k, v in point.items()]
    data = apply_overrides(cfg.base, overrides + [f"seed={seed}"])
    data["name"] = f"{cfg.name}-t{trial.number}"
    return data, {"seed": seed, **{k: v for k, v in point.items()}}


class PrunedRun(Exception):
    """Raised from the eval hook when Optuna prunes: the MLflow run ends KILLED, tagged pruned."""
    grpolab_status = "KILLED"


def run_one_trial(study: optuna.Study, cfg: StudyConfig, state: Path, parent_run_id: str, procs_per_row: int = 1,
                  storage_url: str | None = None) -> bool:
    """Run one trial; False when a ladder has no waiting row left. The trial is claimed with a
    heartbeat (lifecycle.py) for as long as it runs. ``procs_per_row`` > 1: the row trains as that
    many processes (ranks.py), which load the study from ``storage_url`` to prune."""
    if cfg.kind == "ladder" and not study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        return False
    if procs_per_row == 1:   # (several: the rank processes import it, not this one)
        from grpolab.experiment import runner  # noqa: F401 - the heavy imports happen before a row is claimed, not on its clock
    trial = study.ask()
    try:
        if cfg.kind == "ladder" and ROW_ATTR not in trial.user_attrs:
            # another worker took the last waiting row between our check and ask(): not a row
            study.tell(trial, state=TrialState.FAIL)
            study.set_user_attr(f"spurious_{trial.number}", True)
            return False
        heartbeat = Heartbeat(trial)
    except BaseException:
        _hand_back_claim(study, trial)
        raise
    try:
        with running_trial(trial.number):
            values = _train_trial(study, cfg, trial, state, parent_run_id, heartbeat, procs_per_row, storage_url)
    except PrunedRun:
        _report(study, trial, heartbeat, state, "pruned", TrialState.PRUNED)
    except (TrialReaped, RowTimedOut) as exc:   # handed back: its run is KILLED, the next row goes on
        log.warning("%s", exc)
    except (KeyboardInterrupt, SystemExit, RunKilled):
        forget_signals()   # this is the signal's exception: the unwinding must not raise it again
        _report(study, trial, heartbeat, state, "interrupted", TrialState.FAIL)
        raise
    except Exception as exc:  # noqa: BLE001 - recorded on the trial and in MLflow, the study goes on
        if signal_pending():   # a library turned the signal's raise into this error (Optuna's journal lock)
            _report(study, trial, heartbeat, state, "interrupted", TrialState.FAIL)
            raise_if_signalled(exc)
        _report(study, trial, heartbeat, state, "error", TrialState.FAIL, error=f"{type(exc).__name__}: {exc}"[:2000])
        log.error("trial %d failed: %s", trial.number, exc)
    else:
        undefined = _nan_objectives(cfg, values)
        if undefined:   # Optuna would FAIL a NaN silently, and the row would read interrupted, re-queued forever
            _report(study, trial, heartbeat, state, "error", TrialState.FAIL, error=undefined)
            log.error("trial %d failed: %s", trial.number, undefined)
        else:
            _report(study, trial, heartbeat, state, "complete", TrialState.COMPLETE, values=values)
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


def _train_trial(study, cfg: StudyConfig, trial, state: Path, parent_run_id: str, heartbeat,
                 procs_per_row: int = 1, storage_url: str | None = None) -> list[float]:
    data, labels = _trial_experiment(cfg, trial)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exp = build_config(data)

    previous = trial.user_attrs.get(RESUMES_ATTR)
    resume_run_id = checkpoint_to_resume(previous, state, exp.resolved())
    if resume_run_id and not previous_holder_gone(study, resume_run_id):
        log.warning("run %s is not continued: the worker that ran it may still be alive; "
                    "the row restarts in a fresh run", resume_run_id)
        resume_run_id = None

    def on_run(run_id: str) -> None:
        heartbeat.progressed()
        trial.set_user_attr(RUN_ATTR, run_id)
        if previous and run_id != previous:
            link_restart(state, previous, run_id)

    run_name, method = study_run_identity(cfg, trial.number, labels, exp)
    tags = {"grpolab.study": cfg.name, "optuna.study": cfg.name, "optuna.trial_number": trial.number,
            **{f"grpolab.{k}": v for k, v in labels.items()}, "grpolab.method": method,
            **({"grpolab.restart_of": previous} if previous and not resume_run_id else {}),
            **({"grpolab.cuda_visible_devices": os.environ["CUDA_VISIBLE_DEVICES"]}   # this worker's devices
               if "CUDA_VISIBLE_DEVICES" in os.environ else {})}
    prunes = cfg.kind == "search" and len(cfg.objectives) == 1   # Optuna prunes single-objective searches only
    if procs_per_row > 1:
        spec = {"experiment": data, "state": str(state), "parent_run_id": parent_run_id,
                "tags": {**tags, "grpolab.processes": procs_per_row,   # and the launcher's file, when one launched them
                         **({"grpolab.accelerate_config": cfg.launcher.accelerate_config}
                            if cfg.launcher.accelerate_config else {})}, "run_name": run_name,
                "resume_run_id": resume_run_id, "metric": cfg.objectives[0].metric,
                "prune": {"study": cfg.path, "storage": storage_url, "trial_id": trial._trial_id}
                if prunes else None}
        result = _run_on_ranks(procs_per_row, spec, heartbeat, on_run, cfg.launcher.accelerate_config, exp.train.dtype)
    else:
        result = _run_row(exp, state, parent_run_id, tags, run_name, resume_run_id, heartbeat, on_run,
                          trial if prunes else None, cfg.objectives[0].metric)
    if "eval/pass_at_1" in result.final_eval:   # for the progress lines (rows.latest_finished)
        try:
            trial.set_user_attr(PASS_AT_1_ATTR, result.final_eval["eval/pass_at_1"])
        except UpdateFinishedTrialError:   # reaped meanwhile: _report discards the row
            pass
    return objective_values(cfg, result)


def _run_row(exp, state: Path, parent_run_id: str, tags: dict, run_name: str, resume_run_id, heartbeat, on_run,
             prune_trial=None, metric: str = ""):
    """Train one row's run (in this process, or as one rank of several); ``prune_trial``: report
    the partial objective at each evaluation and stop the run when Optuna prunes it."""
    from grpolab.experiment.runner import run_experiment
    seen: dict[int, dict] = {}   # the history so far, for the pruner
    trainers: list = []

    def curves_so_far() -> dict:
        from grpolab.experiment.runner import TrackingCallback
        callbacks = trainers[0].callback_handler.callbacks if trainers else []
        return next((cb.curves for cb in callbacks if isinstance(cb, TrackingCallback)), {})

    def report(step: int, metrics: dict) -> None:
        abort_if_lost(heartbeat)
        seen[step] = metrics
        value = _partial_value(metric, seen, curves_so_far) if prune_trial is not None else None
        if step > 0 and value is not None:
            prune_trial.report(value, step)
            if prune_trial.should_prune():
                raise PrunedRun(f"pruned at step {step}")

    return run_experiment(exp, state, parent_run_id=parent_run_id, extra_tags=tags, run_name=run_name,
                          eval_hook=report, on_trainer=lambda t: (trainers.append(t), heartbeat.progressed()),
                          on_run=on_run, callbacks=[_abort_callback(heartbeat)], resume_run_id=resume_run_id)


@dataclass
class RowResult:
    """What the worker needs of a row run on several processes (rank 0's RunResult, by file)."""
    evals: dict
    train_curves: dict

    @property
    def final_eval(self) -> dict:
        return self.evals[max(self.evals)] if self.evals else {}


def _run_on_ranks(world: int, spec: dict, heartbeat, on_run, accelerate_config: str | None = None,
                  dtype: str = "fp32") -> RowResult:
    """The worker's side of a row on ``world`` processes (ranks.py): start them, watch them with
    the heartbeat (a reaped row or a signal stops them), record rank 0's run on the trial."""
    row_dir = Path(tempfile.mkdtemp(prefix="grpolab-row-"))
    told: list[str] = []

    def progressed() -> None:
        heartbeat.progressed()
        run_id = (row_dir / ranks.RUN_ID).read_text().strip() if (row_dir / ranks.RUN_ID).exists() else ""
        if run_id and not told:
            told.append(run_id)
            on_run(run_id)
    try:
        ranks.write_atomic(row_dir / ranks.SPEC, json.dumps({**spec, "row_dir": str(row_dir)}))
        procs = ranks.start_ranks(world, row_dir, accelerate_config, dtype)
        codes = ranks.watch_ranks(procs, row_dir, lambda: abort_if_lost(heartbeat), progressed)
        result = ranks.read_result(row_dir)
    finally:
        if not told and (row_dir / ranks.RUN_ID).exists():   # stopped early: the trial still names its run
            with contextlib.suppress(Exception):
                progressed()
        shutil.rmtree(row_dir, ignore_errors=True)
    if "pruned" in result:
        raise PrunedRun(result["pruned"])
    if "values" not in result or any(codes):
        why = result.get("error") or "no result"
        who = (lambda r: "the accelerate launcher") if accelerate_config else (lambda r: f"rank {r}")
        failed = ", ".join(f"{who(r)} " + (f"killed by signal {-c}" if c < 0 else f"exit code {c}")
                           for r, c in enumerate(codes) if c)
        raise RuntimeError(f"the row's {world} processes did not finish ({failed or 'all exited 0'}): {why}")
    evals = {int(step): metrics for step, metrics in result["values"]["evals"].items()}
    return RowResult(evals, {k: [tuple(p) for p in v] for k, v in result["values"]["curves"].items()})


def run_rank(spec_path: str) -> None:
    """One process of a row run on several (``grpolab study-rank``, started by _run_on_ranks)."""
    ranks.die_with_worker()
    pin_worker_threads()
    spec = json.loads(Path(spec_path).read_text())
    row_dir, rank = Path(spec["row_dir"]), int(os.environ.get("RANK", "0"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exp = build_config(spec["experiment"])
    prune_trial = None
    if rank == 0 and spec.get("prune"):   # rank 0 evaluates, so it reports to Optuna's pruner
        prune = spec["prune"]
        prune_trial = optuna.Trial(create_or_load(load_study(prune["study"]), prune["storage"]), prune["trial_id"])

    def on_run(run_id: str) -> None:
        ranks.write_atomic(row_dir / ranks.RUN_ID, run_id)
        beat.progressed()
    beat = ranks.RankBeat(row_dir if rank == 0 else None)
    with signals_raise():
        try:
            result = _run_row(exp, Path(spec["state"]), spec["parent_run_id"], spec["tags"], spec["run_name"],
                              spec["resume_run_id"], beat, on_run, prune_trial, spec["metric"])
        except PrunedRun as exc:
            if rank == 0:
                ranks.write_atomic(row_dir / ranks.RESULT, json.dumps({"pruned": str(exc)}))
            return
        except Exception as exc:
            if rank == 0:
                ranks.write_atomic(row_dir / ranks.RESULT, json.dumps({"error": f"{type(exc).__name__}: {exc}"[:2000]}))
            raise
    if rank == 0:
        import torch.distributed as dist
        grouped = dist.is_available() and dist.is_initialized()
        world = dist.get_world_size() if grouped else 1
        if result.run_id:   # measured: the process group the run trained in
            from grpolab.tracking.recorder import client_for
            client = client_for(Path(spec["state"]))
            client.set_tag(result.run_id, "grpolab.world_size", world)
            client.set_tag(result.run_id, "grpolab.dist_backend", dist.get_backend() if grouped else "none")
        values = {"evals": result.evals, "curves": result.train_curves, "world_size": world}
        ranks.write_atomic(row_dir / ranks.RESULT, json.dumps({"values": values}))


def _abort_callback(heartbeat):
    """A trainer callback that stops training at the next step once the trial was reaped (or a
    termination signal was swallowed)."""
    from transformers import TrainerCallback

    class AbortIfReaped(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            abort_if_lost(heartbeat)
    return AbortIfReaped()


def _report(study, trial, heartbeat, state: Path, outcome: str, trial_state, values=None, error=None) -> None:
    """Stop the heartbeat, then report. If a reaper finished the trial first (this worker was
    presumed dead), nothing is reported and the trial's runs end KILLED: the row was handed back."""
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


def _partial_value(metric: str, evals: dict, curves_fn) -> float | None:
    """The objective over the history up to an eval step (training curves logged before it);
    None while it is not defined yet (e.g. no tail: point logged), so nothing is reported."""
    try:
        return objective_value(metric, evals, curves_fn())
    except ConfigError:
        return None


def worker_loop(cfg: StudyConfig, storage_url: str, state: Path, after_trial=None, procs_per_row: int = 1,
                accelerate_config: str | None = None) -> None:
    if accelerate_config is not None:   # the coordinator's choice (its flag or the file's), already checked
        cfg = dataclasses.replace(cfg, launcher=dataclasses.replace(cfg.launcher, accelerate_config=accelerate_config))
    if procs_per_row == 1:   # (several: each rank pins its own share; this process does not train)
        pin_worker_threads()
    study = load_for_worker(cfg, storage_url)   # created by the coordinator; a worker never creates one
    cfg = with_added_seeds(cfg, study)
    parent = study.user_attrs[PARENT_RUN_ATTR]
    with signals_raise(), timeouts_interrupt(), job_end_raises():
        while True:
            if after_trial is not None:
                after_trial()
            if cfg.kind == "search":
                finished = [t for t in study.get_trials(deepcopy=False) if t.state != TrialState.FAIL or
                            t.user_attrs.get(OUTCOME_ATTR) == "error"]
                if len(finished) >= cfg.n_trials:
                    return
            raise_if_signalled()   # a SIGTERM swallowed outside a trial still stops the worker
            if not run_one_trial(study, cfg, state, parent, procs_per_row, storage_url):
                return


def pin_worker_threads() -> None:
    """A worker process of a multi-worker study uses only its share of the cores: torch's
    intra-op pool from GRPOLAB_WORKER_THREADS (set by the coordinator) and a single inter-op
    thread; N workers with a full pool each would oversubscribe the machine (2 workers on 2 cores
    measured 1.16x one worker before this). A single in-process worker keeps torch's default."""
    threads = os.environ.get("GRPOLAB_WORKER_THREADS")
    if threads:
        import torch
        torch.set_num_threads(int(threads))
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:  # already set in this process (inter-op work started): keep it
            pass


def study_run_identity(cfg, trial_number: int, labels: dict, exp) -> tuple[str, str]:
    """(run name, method label) of a study trial: ladder rows are named by rung and seed, and
    their method is named relative to the ladder's first rung (``naive_grpo + eps_high=0.28``)."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first = build_config(cfg.rung_experiment(0, labels["seed"]) if cfg.kind == "ladder" else cfg.base)
    method = method_label(exp.spec, exp.method_name, first.spec if first.method_name == exp.method_name else None)
    if cfg.kind == "ladder":
        return ladder_run_name(labels["rung"], labels["rung_name"], labels["seed"]), method
    return f"trial {trial_number} · seed {labels['seed']}", method
