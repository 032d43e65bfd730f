"""`grpolab bench --what throughput FILE`: one row's generated tokens per second on this machine,
the number `grpolab study FILE --plan --tokens-per-second X` turns into GPU-hours.

FILE is an experiment, or a study (its first rung at its first seed, a search's base). The row
runs for ``--rollouts`` generation batches with its own model, task, batch shape, lengths and
engines (vLLM included), untracked and with a one-prompt held-out evaluation; the rate is the
completion tokens it generated (``tokens/cumulative``) over the seconds of its optimizer steps
(generation and update: a step of GRPOTrainer generates its rollout when it needs one). The
first rollout includes the engines' warm-up, so measure at least 2 and read the rate as a
conservative one.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path

from transformers import TrainerCallback

from grpolab.errors import ConfigError


class _StepClock(TrainerCallback):
    def __init__(self):
        self.seconds, self._t = 0.0, None

    def on_step_begin(self, args, state, control, **kwargs):
        self._t = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.seconds += time.perf_counter() - self._t


def row_experiment(path: str) -> dict:
    """The experiment mapping of FILE's first row."""
    from grpolab.experiment.overrides import apply_overrides
    from grpolab.yaml_input import read_yaml_mapping
    data = read_yaml_mapping(Path(path), "bench file", "give an experiment or a study file")
    from grpolab.studies.definition import load_study
    from grpolab.studies.kinds import names_a_kind
    if names_a_kind(data.get("kind")):
        study = load_study(path)
        return study.study_kind.first_row(study)
    data.setdefault("name", Path(path).stem)
    return apply_overrides(data, [])


def bench_throughput(state: Path, path: str | None, rollouts: int = 2) -> dict:
    from grpolab.experiment.config import build_config
    from grpolab.experiment.overrides import apply_overrides
    from grpolab.experiment.runner import run_experiment
    if not path:
        raise ConfigError("bench --what throughput: give the experiment or study file to measure")
    if rollouts < 1:
        raise ConfigError(f"--rollouts: must be >= 1, got {rollouts}")
    data = row_experiment(path)
    with warnings.catch_warnings():   # the row's own notes were shown when its file was validated
        warnings.simplefilter("ignore")
        train = build_config(data).train
        steps = rollouts * train.minibatches * train.num_iterations
        cfg = build_config(apply_overrides(data, [f"train.steps={steps}", "train.save_every=0", "eval.every=0",
                                                  "eval.prompts=1", "eval.k=1", "tracking.enabled=false"]))
    clock = _StepClock()
    result = run_experiment(cfg, state, callbacks=[clock])
    tokens = (result.train_curves.get("tokens/cumulative") or [(0, 0.0)])[-1][1]
    rate = tokens / clock.seconds if clock.seconds else 0.0
    return {"file": str(path), "rollouts": rollouts, "steps": result.steps, "generated_tokens": int(tokens),
            "step_seconds": round(clock.seconds, 2), "tokens_per_second": round(rate, 1),
            "plan": f"grpolab study {path} --plan --tokens-per-second {round(rate, 1)}"}
