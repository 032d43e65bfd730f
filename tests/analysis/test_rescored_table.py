"""`grpolab table STUDY --metric rescored:...`: a ladder's table read from the models `grpolab eval`
re-scored (nested MLflow runs), with the same verdicts and intervals as the study's own metric."""

import io
import math
import shlex
from contextlib import redirect_stdout

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from conftest import own_state, run_study_data, tiny_two_rung_ladder
from grpolab.analysis.ablation import mean_ci
from grpolab.analysis.rescored import parse_rescored
from grpolab.cli import main
from grpolab.errors import ConfigError

BENCH = ["--benchmark", "held_out", "--n", "2", "--size", "2", "--max-tokens", "24"]
# completion lengths up to 24 tokens differ between rows, steps and rungs (a tiny model's pass rates are all 0)
METRIC = "rescored[n=2,size=2,max_tokens=24]:eval/held_out/mean_length"


@pytest.fixture(scope="module")
def ladder(tmp_path_factory):
    """A 2-rung x 2-seed ladder of 2-step rows on the tiny preset, in a state folder of its own."""
    state = own_state(tmp_path_factory, "rescored-state")
    folder = tmp_path_factory.mktemp("rescored-study")
    data = tiny_two_rung_ladder(name="rescored_toy", seeds=[0, 1], budget={"train.steps": 2, "eval.every": 0})
    data["base"]["train"]["save_every"] = 1   # a checkpoint at step 1 beside the final model: a re-scored curve
    # a coin-flip reward gives the untrained model non-zero advantages, so each step and rung changes the model
    data["base"]["task"]["name"], data["base"]["train"]["learning_rate"] = "random_reward", 0.3
    data["rungs"][1]["changes"]["train.learning_rate"] = 0.6
    cfg, study = run_study_data(folder, data, state)
    from grpolab.analysis.ablation import ladder_rows
    rows = ladder_rows(study, cfg)
    assert list(rows.state) == ["COMPLETE"] * 4
    return state, folder / "study.yaml", rows


def table(state, path, metric, fmt="csv"):
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["--state", str(state), "table", str(path), "--format", fmt, "--metric", metric])
    return code, out.getvalue()


def nested_values(state, run_id, key):
    """{(temperature, max_tokens, step): value} of ``key`` in the re-scorings nested under ``run_id`` (the latest
    of equal settings, as the table reads them)."""
    from grpolab.tracking.recorder import tracking_uri
    client = MlflowClient(tracking_uri(state))
    parent = client.get_run(run_id)
    runs = client.search_runs([parent.info.experiment_id], f"tags.mlflow.parentRunId = '{run_id}'")
    return {(r.data.params.get("benchmarks.held_out.temperature", "1.0"), r.data.params["benchmarks.held_out.max_tokens"],
             int(r.data.tags["grpolab.eval.step"])): r.data.metrics[key] for r in reversed(runs)}   # newest first


def by_rung(rows, values, rung):
    return [values[r] for r in rows[rows.rung == rung].sort_values("seed").run_id]


def error_of(state, path, metric, capsys) -> str:
    assert table(state, path, metric)[0] == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: --metric ")
    return err


def test_the_table_reads_the_rescored_values_and_refuses_what_is_missing_or_ambiguous(ladder, capsys):
    state, path, rows = ladder
    # nothing re-scored yet: every row is named, with the command that re-scores the study
    err = error_of(state, path, METRIC, capsys)
    assert "4 of 4 complete rows have no re-scoring of eval/held_out/mean_length for the final model" in err
    assert "'a' seed 0, 'a' seed 1, 'b' seed 0, 'b' seed 1;" in err
    command = err.split("re-score them first: ")[1]
    assert command == f"grpolab eval {path} --benchmark held_out --n 2 --max-tokens 24 --size 2 --state {state}"
    # one row re-scored: the three others are named, with a command for their runs alone
    first = rows.run_id[0]
    assert main(["--state", str(state), "eval", first, *BENCH]) == 0
    err = error_of(state, path, METRIC, capsys)
    assert "3 of 4 complete rows have no re-scoring" in err and "'a' seed 1, 'b' seed 0, 'b' seed 1;" in err
    assert f"for run in {' '.join(rows.run_id[1:])}; do grpolab eval $run --benchmark held_out --n 2 --max-tokens 24" in err
    # the command the first error named, as given
    parts = shlex.split(command)
    assert parts[0] == "grpolab" and main(parts[1:]) == 0
    capsys.readouterr()
    code, out = table(state, path, METRIC)
    assert code == 0
    frame = pd.read_csv(io.StringIO(out))
    lengths = {run: nested_values(state, run, "eval/held_out/mean_length")[("1.0", "24", 2)] for run in rows.run_id}
    assert len(set(lengths.values())) > 1
    for rung, name in enumerate(("a", "b")):
        mean, half = mean_ci(by_rung(rows, lengths, rung))
        row = frame[frame.rung == name].iloc[0]
        assert row["mean"] == pytest.approx(mean) and row.n == 2
        assert (math.isnan(half) and math.isnan(row.ci95)) or row.ci95 == pytest.approx(half)
    diffs = [y - x for x, y in zip(by_rung(rows, lengths, 0), by_rung(rows, lengths, 1))]
    mean, half = mean_ci(diffs)
    assert frame.delta_vs_prev[1] == pytest.approx(mean) and frame.pairs[1] == 2
    assert (math.isnan(half) and math.isnan(frame.delta_ci95[1])) or frame.delta_ci95[1] == pytest.approx(half)
    assert frame.verdict_vs_prev[1] == f"not judged: no smallest_effect for {parse_rescored(METRIC).label}"
    assert frame.metric[0] == (f"{parse_rescored(METRIC).label} (re-scored: n 2, temperature 1, top_p 1, max_tokens 24, "
                               "2 prompts, seed the run seed)")
    # a pass rate borrows the study objective's smallest effect and is judged; the caption says what was re-scored
    passes = {run: nested_values(state, run, "eval/held_out/avg_at_2")[("1.0", "24", 2)] for run in rows.run_id}
    code, markdown = table(state, path, "rescored[size=2,max_tokens=24]:eval/held_out/avg@2", "markdown")
    label = "rescored[max_tokens=24,size=2]:eval/held_out/avg_at_2"
    assert code == 0 and markdown.startswith(f"rescored_toy [{label}]: ")
    assert (f"{label}: re-scored by `grpolab eval`, not the training-time evaluation: eval/held_out/avg_at_2 of each "
            "row's final model on benchmark 'held_out' (the run's held-out draw), n 2, temperature 1, top_p 1, "
            "max_tokens 24, 2 prompts, seed the run seed; verdicts take the direction and smallest effect of the study "
            "objective final:eval/pass_at_1") in markdown
    assert f"- a: reference, mean {sum(by_rung(rows, passes, 0)) / 2:.3f} (2 seeds)" in markdown
    assert "- b: underpowered" in markdown   # 2 < 5 paired seeds, judged against smallest effect 0.05
    # a second temperature on one row: the unqualified metric is ambiguous, each qualified one is not
    assert main(["--state", str(state), "eval", first, *BENCH, "--temperature", "0.5"]) == 0
    err = error_of(state, path, METRIC, capsys)
    assert ("the rows' models were re-scored with 2 settings (temperature differs); name one: "
            "'rescored[max_tokens=24,n=2,size=2,temperature=1]:eval/held_out/mean_length' (4 of 4 rows); "
            "'rescored[max_tokens=24,n=2,size=2,temperature=0.5]:eval/held_out/mean_length' (1 of 4 rows)") in err
    code, again = table(state, path, "rescored[max_tokens=24,size=2,temperature=1]:eval/held_out/mean_length")
    assert code == 0 and list(pd.read_csv(io.StringIO(again))["mean"]) == list(frame["mean"])
    err = error_of(state, path, "rescored[temperature=0.5]:eval/held_out/mean_length", capsys)
    assert "3 of 4 complete rows have no re-scoring" in err and "--temperature 0.5" in err
    # the row's own max_tokens (6) beside 24 on one row: that row names both
    assert main(["--state", str(state), "eval", first, *BENCH[:-2]]) == 0
    err = error_of(state, path, "rescored[size=2,temperature=1]:eval/held_out/mean_length", capsys)
    assert (f"run {first} was re-scored with max_tokens [6, 24]; name one: "
            "'rescored[max_tokens=6,size=2,temperature=1]:eval/held_out/mean_length'") in err
    # the re-scored curve needs the checkpoints: none was re-scored here
    err = error_of(state, path, "rescored[size=2,max_tokens=24,temperature=1]:auc:eval/held_out/avg@2", capsys)
    assert "4 of 4 complete rows have no re-scoring of eval/held_out/avg_at_2 for at least 2 re-scored steps" in err
    assert err.endswith(f"re-score them first: grpolab eval {path} --benchmark held_out --n 2 --temperature 1 "
                        f"--max-tokens 24 --size 2 --checkpoints all --state {state}")
    # the command it names; then the area over steps 1 and 2, and the checkpoint at step 1 alone
    assert main(shlex.split(err.split("re-score them first: ")[1])[1:]) == 0
    capsys.readouterr()
    curves = {run: nested_values(state, run, "eval/held_out/mean_length") for run in rows.run_id}
    qualified = "rescored[size=2,max_tokens=24,temperature=1"
    for metric, of_row in ((f"{qualified}]:auc:eval/held_out/mean_length",
                            lambda c: (c[("1.0", "24", 1)] + c[("1.0", "24", 2)]) / 2),   # trapezoid / span 1
                           (f"{qualified},step=1]:eval/held_out/mean_length", lambda c: c[("1.0", "24", 1)])):
        code, out = table(state, path, metric)
        assert code == 0
        frame = pd.read_csv(io.StringIO(out))
        for rung, name in enumerate(("a", "b")):
            expected = [of_row(curves[r]) for r in rows[rows.rung == rung].sort_values("seed").run_id]
            assert frame[frame.rung == name]["mean"].iloc[0] == pytest.approx(sum(expected) / 2)
    assert any(c[("1.0", "24", 1)] != c[("1.0", "24", 2)] for c in curves.values()), curves   # two models, two values


@pytest.mark.parametrize("text, match", [
    ("rescored:eval/pass_at_1", "is no benchmark score"),
    ("rescored:tail:eval/a/avg@2", r"\(final: or auc:\), got tail:"),
    ("rescored[temp=1]:eval/a/avg@2", "qualifier 'temp=1': expected setting=value"),
    ("rescored[step=2]:auc:eval/a/avg@2", "step= names one model"),
])
def test_a_bad_rescored_metric_is_one_line_naming_the_syntax(text, match):
    with pytest.raises(ConfigError, match=match):
        parse_rescored(text)
    assert parse_rescored("rescored[n=16,step=4]:final:eval/aime/avg@16").label == "rescored[n=16,step=4]:eval/aime/avg_at_16"
