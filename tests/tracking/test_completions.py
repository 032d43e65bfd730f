"""The completions table grows as a run goes and survives a SIGKILL or a failure; the time/*
curves and the measured accelerator-hours of a toy run (checked on test_run's toy run)."""

import json
import math
import os
import signal
import subprocess
import sys
import time

from mlflow.tracking import MlflowClient

from conftest import REPO
from grpolab.tracking.completions import TRAIN_TABLE, CompletionsTable, last_step, read_table
from grpolab.tracking.recorder import tracking_uri


def test_table_appends_whole_rows_and_a_reader_skips_a_cut_last_line(tmp_path):
    table = CompletionsTable(tmp_path / "t.jsonl")
    table.append([{"completion": "a", "advantage": 0.5}, {"completion": "b", "advantage": float("nan")}], step=2)
    table.append([{"completion": "c", "advantage": -1.0}], step=4)
    with open(tmp_path / "t.jsonl", "a") as f:
        f.write('{"step": 6, "compl')   # a line cut short by a crash
    rows = read_table(tmp_path / "t.jsonl")
    assert [(r["step"], r["completion"], r["advantage"]) for r in rows] == [(2, "a", 0.5), (2, "b", None), (4, "c", -1.0)]
    assert [r["completion"] for r in read_table(tmp_path / "t.jsonl", step=2)] == ["a", "b"]
    assert last_step(tmp_path / "t.jsonl") == 4   # the cut line is not a row
    # a resumed run's table first drops the cut line, so its rows do not run on from it
    again = CompletionsTable(tmp_path / "t.jsonl")
    again.append([{"completion": "x" * 200_000}], step=6)   # a row longer than the tail last_step reads first
    assert [r["step"] for r in read_table(tmp_path / "t.jsonl")] == [2, 2, 4, 6]
    assert last_step(tmp_path / "t.jsonl") == 6
    # a resumed run drops what it trains again (steps past its checkpoint)
    CompletionsTable(tmp_path / "t.jsonl", keep_upto=2)
    assert [r["completion"] for r in read_table(tmp_path / "t.jsonl")] == ["a", "b"]
    assert last_step(tmp_path / "t.jsonl") == 2


def test_append_costs_milliseconds_per_rollout(tmp_path):
    table = CompletionsTable(tmp_path / "t.jsonl")
    row = {"prompt": "12+34=" * 20, "completion": "46" * 200, "reward": 1.0, "reward/correct": 1.0,
           "advantage": 0.25, "length": 200, "truncated": False, "correct": True, "group": 0}
    for step in range(50):
        table.append([row] * 16, step=step)
    per_rollout = table.seconds / 50
    print(f"completions table: {per_rollout * 1e3:.3f} ms per rollout of 16 rows")
    assert per_rollout < 5e-3 and len(read_table(tmp_path / "t.jsonl")) == 800


def _table_steps(state):
    tables = list((state / "runs").glob(f"*/{TRAIN_TABLE}"))
    return sorted({r["step"] for r in read_table(tables[0])}) if tables else []


def test_a_run_killed_by_sigkill_keeps_the_rollouts_logged_before_it(tmp_path):
    """A real SIGKILL after the second logged rollout: no finaliser runs, yet the table holds both
    rollouts' rows with their advantages, reward components and lengths."""
    state = tmp_path / "state"
    env = {**os.environ, "GRPOLAB_STATE": str(state), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "grpolab.cli", "run", str(REPO / "experiments/smoke.yaml"),
                             "train.steps=100000", "name=sigkill", "eval.every=0", "eval.prompts=4", "eval.k=1",
                             "warm_start.enabled=false", "train.group_size=4", "train.prompts_per_rollout=4",
                             "tracking.samples=8"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 300
    while len(_table_steps(state)) < 2 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.5)
    proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL, err[-2000:]
    (table,) = (state / "runs").glob(f"*/{TRAIN_TABLE}")
    rows = read_table(table)
    steps = sorted({r["step"] for r in rows})
    assert steps[:2] == [2, 4], steps   # one rollout per two optimizer steps (minibatches: 2)
    for step in (2, 4):
        kept = [r for r in rows if r["step"] == step]
        assert len(kept) == 8 and [r["group"] for r in kept] == [0] * 4 + [1] * 4   # the first 2 groups of 4
        assert all(isinstance(r["advantage"], float) for r in kept)
        assert all(r["length"] >= 0 and isinstance(r["truncated"], bool) and "reward/correct" in r for r in kept)
        # GRPO: a group's advantages are its rewards standardised, so they sum to ~0
        assert all(abs(sum(r["advantage"] for r in kept if r["group"] == g)) < 1e-3 for g in (0, 1))
    run = MlflowClient(tracking_uri(state)).get_run(table.parent.name)
    assert run.info.status == "RUNNING"   # nothing closed it: the table alone kept the rollouts


def check_time_curves_and_tables(c, run_id, state):
    """What test_run's toy run (4 steps, a rollout every 2, held-out evaluations at 0, 2 and 4)
    records of its time: the time/* curves, the measured accelerator-hours, both tables."""
    run = c.get_run(run_id)
    for key in ("time/generation_s", "time/scoring_s", "time/update_s", "time/generated_tokens_per_s",
                "time/accelerator_hours"):
        assert [m.step for m in c.get_metric_history(run_id, key)] == [2, 4], key
    gen = {m.step: m.value for m in c.get_metric_history(run_id, "time/generation_s")}
    tokens = {m.step: m.value for m in c.get_metric_history(run_id, "tokens/generated")}
    rate = {m.step: m.value for m in c.get_metric_history(run_id, "time/generated_tokens_per_s")}
    for step in (2, 4):
        assert gen[step] > 0 and math.isclose(rate[step], tokens[step] / gen[step], rel_tol=1e-4)
    hours = [m.value for m in c.get_metric_history(run_id, "time/accelerator_hours")]
    tags = run.data.tags
    assert tags["grpolab.accelerator"] == "CPU" and tags["grpolab.processes"] == "1"
    total = float(tags["grpolab.accelerator_hours"])
    assert 0 < hours[0] < hours[1] < total <= float(tags["grpolab.wall_seconds"]) / 3600
    folder = state / "runs" / run_id
    rollouts, evals = read_table(folder / TRAIN_TABLE), read_table(folder / "eval_completions.jsonl")
    assert sorted({r["step"] for r in rollouts}) == [2, 4]
    assert sorted({r["step"] for r in evals}) == [0, 2, 4] and {r["benchmark"] for r in evals} == {"held_out"}
    assert set(rollouts[0]) >= {"step", "prompt", "completion", "reward", "advantage", "length", "truncated", "correct"}


def test_a_failed_run_keeps_both_rollouts_and_hands_the_table_to_mlflow(shared_state):
    """An injected failure after the second logged rollout: the run ends FAILED, its table (run
    folder and MLflow copy) holds both rollouts' rows with their advantages."""
    import pytest
    from transformers import TrainerCallback

    from grpolab.experiment.config import build_config
    from grpolab.experiment.runner import run_experiment

    class FailAfterSecondRollout(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if state.global_step == 4:
                raise RuntimeError("injected failure after the second rollout")
    cfg = build_config({"name": "fails-late", "method": "grpo", "task": {"name": "addition", "digits": 2},
                        "model": {"preset": "tiny"}, "warm_start": {"enabled": False},
                        "train": {"steps": 8, "group_size": 4, "prompts_per_rollout": 4, "minibatches": 2},
                        "eval": {"every": 0, "prompts": 4, "k": 1}, "tracking": {"samples": 8}})
    ids = []
    with pytest.raises(RuntimeError, match="injected failure"):
        run_experiment(cfg, shared_state, callbacks=[FailAfterSecondRollout()], on_run=ids.append)
    client = MlflowClient(tracking_uri(shared_state))
    assert client.get_run(ids[0]).info.status == "FAILED"
    local = read_table(shared_state / "runs" / ids[0] / TRAIN_TABLE)
    copy = json.loads("[" + ",".join(open(client.download_artifacts(ids[0], TRAIN_TABLE)).read().splitlines()) + "]")
    assert copy == local and [r["step"] for r in local] == [2] * 8 + [4] * 8
    assert all(isinstance(r["advantage"], float) for r in local)
