"""Training one study row's run, in the worker's process or as one rank of several: the run
reports its held-out evals to Optuna's pruner and stops when the trial was reaped."""

from __future__ import annotations

from pathlib import Path

from grpolab.errors import ConfigError
from grpolab.experiment.run_identity import RunIdentity
from grpolab.studies.heartbeat import abort_if_lost
from grpolab.studies.objectives import objective_value


class PrunedRun(Exception):
    """Raised from the eval hook when Optuna prunes: the MLflow run ends KILLED, tagged pruned."""
    grpolab_status = "KILLED"


def run_row(exp, state: Path, identity: RunIdentity, heartbeat, on_run, prune_trial=None, metric: str = ""):
    """Train one row's run (in this process, or as one rank of several) into the MLflow run
    ``identity`` names; ``prune_trial``: report the partial objective at each evaluation and stop
    the run when Optuna prunes it."""
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
        value = partial_value(metric, seen, curves_so_far) if prune_trial is not None else None
        if step > 0 and value is not None:
            prune_trial.report(value, step)
            if prune_trial.should_prune():
                raise PrunedRun(f"pruned at step {step}")

    return run_experiment(exp, state, identity, eval_hook=report,
                          on_trainer=lambda t: (trainers.append(t), heartbeat.progressed()),
                          on_run=on_run, callbacks=[abort_callback(heartbeat)])


def abort_callback(heartbeat):
    """A trainer callback that stops training at the next step once the trial was reaped (or a
    termination signal was swallowed)."""
    from transformers import TrainerCallback

    class AbortIfReaped(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            abort_if_lost(heartbeat)
    return AbortIfReaped()


def partial_value(metric: str, evals: dict, curves_fn) -> float | None:
    """The objective over the history up to an eval step (training curves logged before it);
    None while it is not defined yet (e.g. no tail: point logged), so nothing is reported."""
    try:
        return objective_value(metric, evals, curves_fn())
    except ConfigError:
        return None
