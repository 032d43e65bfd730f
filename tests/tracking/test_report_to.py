"""``tracking.report_to``: transformers' trackers beside grpolab's own MLflow run, checked at
parse time (names from the pinned transformers, the package present) and handed to TRL's args."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from grpolab.errors import ConfigError
from grpolab.experiment.config import build_config
from grpolab.experiment.runner import run_experiment
from test_trl_passthrough import _data


@pytest.mark.parametrize("names, message", [
    (["mlflow"], "tracking.report_to: mlflow is grpolab's own tracker"),
    (["tensorbaord"], "tracking.report_to: unknown integration 'tensorbaord' (did you mean 'tensorboard'?)"),
    ("wandb", "tracking.report_to: expected a list of names, got 'wandb'"),
])
def test_mlflow_unknown_names_and_non_lists_are_refused(names, message):
    with pytest.raises(ConfigError) as err:
        build_config(_data(tracking={"report_to": names}))
    assert message in str(err.value)


@pytest.mark.skipif(importlib.util.find_spec("wandb") is not None, reason="wandb is installed here")
def test_a_tracker_whose_package_is_missing_exits_before_the_run():
    with pytest.raises(ConfigError, match="tracking.report_to: wandb needs the wandb package, which is not installed"):
        build_config(_data(tracking={"report_to": ["wandb"]}))


def test_tensorboard_receives_the_curves_beside_mlflow(shared_state):
    pytest.importorskip("tensorboard")
    seen = {}
    cfg = build_config(_data(tracking={"report_to": ["tensorboard"]}))
    result = run_experiment(cfg, shared_state, on_trainer=lambda trainer: seen.update(args=trainer.args))
    assert seen["args"].report_to == ["tensorboard"] and result.run_id is not None
    events = list(Path(seen["args"].output_dir).rglob("events.out.tfevents.*"))
    assert events, f"no TensorBoard event file under {seen['args'].output_dir}"
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    scalars = set()
    for path in events:
        acc = EventAccumulator(str(path))
        acc.Reload()
        scalars |= set(acc.Tags()["scalars"])
    assert any("loss" in tag for tag in scalars), scalars
