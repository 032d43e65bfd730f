"""What `grpolab run` prints while it works (stderr, so stdout stays one JSON document) and where
its run lives: the MLflow run id, the UI address of the experiment's runs and the state folder."""

from __future__ import annotations

import sys
from pathlib import Path

from transformers import TrainerCallback

MLFLOW_UI_PORT = 5000   # `mlflow ui` / `mlflow server` default


class TrainProgress(TrainerCallback):
    """A tqdm bar over optimizer steps with the latest reward, entropy and held-out pass@1
    (``on_eval`` must be the run's ``eval_hook`` for the latter)."""

    SHOWN = (("reward/mean", "reward"), ("entropy", "entropy"), ("eval/pass_at_1", "pass@1"))

    def __init__(self, stream=sys.stderr):
        self.stream, self.bar, self.latest = stream, None, {}
        self.evaluated = False   # the step-0 eval runs before the bar exists; it is shown on the bar

    def on_train_begin(self, args, state, control, **kwargs):
        from tqdm.auto import tqdm
        self.bar = tqdm(total=state.max_steps, desc="training", unit="step", file=self.stream,
                        dynamic_ncols=True, mininterval=0.5)

    def on_log(self, args, state, control, logs=None, **kwargs):
        for key, short in self.SHOWN:
            if isinstance((logs or {}).get(key), (int, float)):
                self.latest[short] = f"{logs[key]:.3g}"

    def on_eval(self, step: int, metrics: dict) -> None:
        """The run's eval hook: held-out results are not TRL logs (grpolab evaluates between
        steps), so they reach the bar here. After training the bar is closed: print a line."""
        value = metrics.get("eval/pass_at_1")
        if not isinstance(value, (int, float)):
            return
        self.latest["pass@1"] = f"{value:.3g}"
        if self.bar is not None:
            self.bar.set_postfix(self.latest)
        elif self.evaluated:
            print(f"held-out pass@1 at step {step}: {value:.3g}", file=self.stream, flush=True)
        self.evaluated = True

    def on_step_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.set_postfix(self.latest, refresh=False)
            self.bar.update(state.global_step - self.bar.n)

    def on_train_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        print("final held-out evaluation ...", file=self.stream, flush=True)


def where(run_id: str, state: Path) -> dict:
    """MLflow coordinates of a run: id, experiment, tracking URI and the UI addresses (the
    experiment's runs page: MLflow 3's UI otherwise opens on its GenAI overview)."""
    from .tracking import client_for, is_server_uri
    client = client_for(state)
    run = client.get_run(run_id)
    uri = client.tracking_uri
    eid = run.info.experiment_id
    base = uri.rstrip("/") if is_server_uri(uri) else f"http://127.0.0.1:{MLFLOW_UI_PORT}"
    out = {"run_id": run_id, "experiment_id": eid, "tracking_uri": uri,
           "experiment_runs_url": f"{base}/#/experiments/{eid}/runs",
           "run_url": f"{base}/#/experiments/{eid}/runs/{run_id}"}
    if not is_server_uri(uri):
        out["ui_command"] = f"mlflow ui --backend-store-uri {uri} --port {MLFLOW_UI_PORT}"
    return out
