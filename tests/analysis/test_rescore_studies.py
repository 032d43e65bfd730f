"""`grpolab eval STUDY.yaml` on a search (every trial's run with a final model re-scored, nested under
it; a pruned trial named and left out) and on a ladder: on both, the re-scored table and its page are
put on the study's MLflow parent run, the same table `grpolab table STUDY --metric rescored:...` prints."""

import io
import math
import re
import shutil
from contextlib import redirect_stdout
from pathlib import Path

import optuna
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from conftest import own_state, run_study_data, tiny_two_rung_ladder
from grpolab.analysis.ablation import mean_ci
from grpolab.analysis.rescore import benchmark_specs, read_saved_run, score_model
from grpolab.analysis.tidy import study_results
from grpolab.cli import main
from grpolab.report.publish import rescored_folder
from grpolab.studies.rows import PARENT_RUN_ATTR
from grpolab.tracking.recorder import tracking_uri

BENCH = ["--benchmark", "held_out", "--n", "2", "--size", "2", "--max-tokens", "6"]
METRIC = "rescored[max_tokens=6,size=2]:eval/held_out/avg_at_2"


@pytest.fixture(scope="module")
def state(tmp_path_factory):
    return own_state(tmp_path_factory, "rescore-studies")


def _base(data):
    # a coin-flip reward gives the untrained model non-zero advantages and pass rates: rows differ
    data["base"]["task"]["name"], data["base"]["train"]["learning_rate"] = "random_reward", 0.3
    return data


def _eval(state, target, *extra):
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["--state", str(state), "eval", str(target), *BENCH, *extra])
    return code, out.getvalue()


def _nested(client, run_id):
    parent = client.get_run(run_id)
    return client.search_runs([parent.info.experiment_id], f"tags.`grpolab.eval.of_run` = '{run_id}'")


def test_a_search_studys_trials_are_each_rescored_nested_under_their_run(state, tmp_path_factory, capsys):
    data = _base(tiny_two_rung_ladder(name="rescore_search", seeds=[0], budget={"train.steps": 2, "eval.every": 0}))
    data = {"kind": "search", "name": "rescore_search", "base": data["base"], "seeds": [0], "n_trials": 2,
            "budget": data["budget"], "objectives": [{"metric": "final:eval/pass_at_1", "direction": "maximize"}],
            "space": {"train.learning_rate": {"type": "float", "low": 0.1, "high": 0.5}},
            "sampler": {"name": "random", "seed": 0}}
    folder = tmp_path_factory.mktemp("rescore-search")
    cfg, study = run_study_data(folder, data, state, "search.yaml")
    path = folder / "search.yaml"
    runs = [r for r in dict.fromkeys(study_results(study, cfg).run_id) if r]
    assert len(runs) == 2
    pruned = _add_pruned_trial(state, study, runs[1])
    # nothing re-scored yet: no table, the command that re-scores the study instead
    assert main(["--state", str(state), "table", str(path), "--metric", METRIC]) == 2
    assert (f"no trial of rescore_search has a re-scoring of eval/held_out/avg_at_2 for the model it reads with "
            f"these settings; re-score them first: grpolab eval {path} --benchmark held_out") in capsys.readouterr().err
    code, out = _eval(state, path)
    assert code == 0
    # the pruned trial's run is named before any model is scored, the others scored, the table published
    skipped = f"{pruned}: not re-scored, pruned at step 2: no final model (checkpoints kept at steps: 2; " \
              "--checkpoints all re-scores them)\n"
    assert skipped in out and out.index(skipped) < out.index(" step 2: "), out
    client = MlflowClient(tracking_uri(state))
    assert _nested(client, pruned) == []
    for run in runs:   # one nested run each, at the final step, with the numbers re-scoring gives again
        (nested,) = _nested(client, run)
        assert nested.data.tags["mlflow.parentRunId"] == run and nested.data.tags["grpolab.eval.step"] == "2"
        assert f"{run} step 2: held_out/avg_at_2 " in out and f"(nested run {nested.info.run_id})" in out
        saved = read_saved_run(state / "runs" / run)
        specs = benchmark_specs(["held_out"], saved, {"n": 2, "size": 2, "max_tokens": 6})
        again = score_model(saved, specs, state / "runs" / run / "final")
        assert nested.data.metrics == again and 1 <= again["eval/held_out/mean_length"] <= 6
    _search_parent_holds_the_rescored_table(state, path, study, runs, pruned, out, tmp_path_factory)


def _add_pruned_trial(state, study, like: str) -> str:
    """A trial pruned at step 2 as the median pruner leaves one: a PRUNED trial at its last report,
    its MLflow run KILLED, its run folder with its checkpoint but without final/ (which trial a real
    pruner prunes at 2 steps of a tiny model is not reproducible)."""
    client = MlflowClient(tracking_uri(state))
    done = client.get_run(like)
    run = client.create_run(done.info.experiment_id,
                            tags={"mlflow.parentRunId": done.data.tags["mlflow.parentRunId"]}).info.run_id
    client.set_terminated(run, "KILLED")
    shutil.copytree(state / "runs" / like, state / "runs" / run, ignore=shutil.ignore_patterns("final"))
    study.add_trial(optuna.trial.create_trial(
        state=optuna.trial.TrialState.PRUNED, value=0.0, intermediate_values={2: 0.0},
        params={"train.learning_rate": 0.3},
        distributions={"train.learning_rate": optuna.distributions.FloatDistribution(0.1, 0.5)},
        user_attrs={"outcome": "pruned", "mlflow_run_id": run}))
    return run


def _search_parent_holds_the_rescored_table(state, path, study, runs, pruned, out, tmp_path_factory):
    """The search's parent run holds the re-scored table (what `grpolab table --metric` prints) and its
    page; each trial's value is its nested run's; a trial re-scored otherwise, or pruned, is named,
    not dropped."""
    client, dest = MlflowClient(tracking_uri(state)), tmp_path_factory.mktemp("search-artifacts")
    parent, folder = study.user_attrs[PARENT_RUN_ATTR], rescored_folder(METRIC)
    assert f"{METRIC}: table.md, table.csv and dashboard.html in {folder}/ on the study's MLflow parent run {parent}" in out
    text = {name: Path(client.download_artifacts(parent, f"{folder}/{name}", str(dest))).read_text()
            for name in ("table.md", "table.csv", "dashboard.html")}
    assert _table(state, path, "markdown") == text["table.md"] + "\n"   # print's newline
    assert _table(state, path, "csv") == text["table.csv"] + "\n"
    caption = text["table.md"].splitlines()[0]
    assert caption.startswith(f"rescore_search: 3 trials, 2 re-scored, 1 not (rescored_missing says why); {METRIC}: "
                              "re-scored by `grpolab eval`, not the training-time evaluation: eval/held_out/avg_at_2 of "
                              "each trial's final model on benchmark 'held_out' (the run's held-out draw), n 2, "
                              "temperature 1, top_p 1, max_tokens 6, 2 prompts, seed the run seed; shown beside the "
                              "study objective final:eval/pass_at_1 (training-time value at the final evaluation), "
                              "trials best first"), caption
    assert "prompts per trial" not in caption   # every trial's run re-scored 2 prompts
    frame = pd.read_csv(io.StringIO(text["table.csv"]))
    assert list(frame.columns[:8]) == ["metric", "trial", "state", "train.learning_rate", "run_id",
                                       "final:eval/pass_at_1", METRIC, "rescored_missing"]   # beside the original
    assert set(frame.metric) == {f"{METRIC} (re-scored: n 2, temperature 1, top_p 1, max_tokens 6, 2 prompts, "
                                 "seed the run seed)"}
    values = {run: _nested(client, run)[0].data.metrics["eval/held_out/avg_at_2"] for run in runs}
    assert sorted(frame.run_id) == sorted([*runs, pruned]) and frame.rescored_missing.isna().sum() == 2
    assert list(frame.run_id)[-1] == pruned and math.isnan(list(frame[METRIC])[-1])
    at_checkpoint = "rescored[max_tokens=6,size=2,step=2]:eval/held_out/avg_at_2"
    assert list(frame.rescored_missing)[-1] == (
        f"not re-scored: pruned at step 2: no final model; its checkpoint at step 2 is read by '{at_checkpoint}' "
        f"once re-scored: grpolab eval {pruned} --benchmark held_out --n 2 --max-tokens 6 --size 2 --checkpoints all "
        f"--state {state}")
    frame = frame[frame.run_id != pruned]
    for run, value in zip(frame.run_id, frame[METRIC]):   # best first: the nested runs' own numbers
        assert value == pytest.approx(values[run], abs=1e-12)
    assert list(frame[METRIC]) == sorted(values.values(), reverse=True)
    page = text["dashboard.html"]
    assert f"grpolab study: rescore_search, re-scored {METRIC}" in page and 'data-panel="Re-scored trials"' in page
    assert "2 of 3 trials plotted, one point each; 1 not re-scored" in page
    # a score no objective re-measures, after the objectives (lengths: non-zero where a tiny model passes nothing)
    length = "rescored[max_tokens=6,size=2]:eval/held_out/mean_length"
    lengths = pd.read_csv(io.StringIO(_table(state, path, "csv", length)))
    lengths = lengths[lengths.run_id != pruned]
    assert list(lengths.columns[5:8]) == ["final:eval/pass_at_1", length, "rescored_missing"]
    nested = {run: _nested(client, run)[0].data.metrics["eval/held_out/mean_length"] for run in runs}
    assert list(lengths[length]) == sorted(nested.values(), reverse=True) and all(1 <= v <= 6 for v in nested.values())
    for run, value in zip(lengths.run_id, lengths[length]):
        assert value == pytest.approx(nested[run], abs=1e-12)
    assert "no study objective measures it in its unit: shown after the objectives, trials highest first" in \
        _table(state, path, "markdown", length).splitlines()[0]
    # one trial re-scored at another temperature: the other keeps its row, its value missing and why
    assert _eval(state, runs[0], "--temperature", "0.5")[0] == 0
    warm = "rescored[max_tokens=6,size=2,temperature=0.5]:eval/held_out/avg_at_2"
    other = pd.read_csv(io.StringIO(_table(state, path, "csv", warm))).set_index("run_id")
    (nested,) = [r for r in _nested(client, runs[0]) if r.data.params.get("benchmarks.held_out.temperature") == "0.5"]
    assert other.loc[runs[0], warm] == pytest.approx(nested.data.metrics["eval/held_out/avg_at_2"], abs=1e-12)
    assert math.isnan(other.loc[runs[1], warm]) and other.loc[runs[1], "rescored_missing"] == (
        "not re-scored: complete, the trial's run has no re-scoring of the model it reads with these settings; "
        f"grpolab eval {runs[1]} --benchmark held_out --n 2 --temperature 0.5 --max-tokens 6 --size 2 --state {state}")
    assert "3 trials, 1 re-scored, 2 not (rescored_missing says why)" in _table(state, path, "markdown", warm)
    # a run id alone puts nothing on the parent: the pages stay as they were
    assert Path(client.download_artifacts(parent, f"{folder}/table.md", str(dest))).read_text() == text["table.md"]
    # what the pruned trial's rescored_missing says does give it a value: its checkpoint, read at step 2
    assert _eval(state, pruned, "--checkpoints", "all")[0] == 0
    (nested,) = _nested(client, pruned)
    assert nested.data.tags["grpolab.eval.step"] == "2" and nested.data.tags["grpolab.eval.model"].endswith("checkpoint-2")
    at_checkpoint = at_checkpoint.replace("size=2", "size=2,temperature=1")   # a trial was re-scored at 0.5 too
    stepped = pd.read_csv(io.StringIO(_table(state, path, "csv", at_checkpoint))).set_index("run_id")
    assert stepped.loc[pruned, at_checkpoint] == pytest.approx(nested.data.metrics["eval/held_out/avg_at_2"], abs=1e-12)
    assert stepped.rescored_missing.isna().all()


def _table(state, path, fmt, metric=METRIC):
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["--state", str(state), "table", str(path), "--format", fmt, "--metric", metric]) == 0
    return out.getvalue()


def test_a_ladder_rescored_puts_its_table_and_page_on_the_parent_run(state, tmp_path_factory, capsys):
    data = _base(tiny_two_rung_ladder(name="rescore_ladder", seeds=[0, 1], budget={"train.steps": 2, "eval.every": 0}))
    data["rungs"][1]["changes"]["train.learning_rate"] = 0.6
    folder = tmp_path_factory.mktemp("rescore-ladder")
    cfg, study = run_study_data(folder, data, state)
    path, parent = folder / "study.yaml", study.user_attrs[PARENT_RUN_ATTR]
    code, out = _eval(state, path)
    assert code == 0
    assert (f"{METRIC}: table.md, table.csv and dashboard.html in {rescored_folder(METRIC)}/ on the study's MLflow "
            f"parent run {parent}") in out
    client, dest = MlflowClient(tracking_uri(state)), tmp_path_factory.mktemp("artifacts")
    assert rescored_folder(METRIC) == "rescored/rescored_max_tokens=6_size=2_eval_held_out_avg_at_2"
    text = {name: Path(client.download_artifacts(parent, f"{rescored_folder(METRIC)}/{name}", str(dest))).read_text()
            for name in ("table.md", "table.csv", "dashboard.html")}
    # the parent's tables are what `grpolab table --metric` prints
    assert _table(state, path, "csv") == text["table.csv"] + "\n"   # print's newline
    assert _table(state, path, "markdown") == text["table.md"] + "\n"
    assert "table.md" in {a.path for a in client.list_artifacts(parent)}   # the study's own table stays
    # their numbers: each rung's mean over its seeds of the nested runs' avg@2
    frame = pd.read_csv(io.StringIO(text["table.csv"]))
    from grpolab.analysis.ablation import ladder_rows
    rows = ladder_rows(study, cfg)
    for rung, name in enumerate(("a", "b")):
        values = [_nested(client, r)[0].data.metrics["eval/held_out/avg_at_2"]
                  for r in rows[rows.rung == rung].sort_values("seed").run_id]
        assert frame[frame.rung == name]["mean"].iloc[0] == pytest.approx(mean_ci(values)[0])
    page = text["dashboard.html"]
    assert f"grpolab study: rescore_ladder, re-scored {METRIC}" in page
    assert 'data-panel="Re-scored ablation"' in page and 'data-panel="Paired delta vs previous rung"' in page
    assert re.search(r"re-scored by `grpolab eval`", page)
    # a run id alone (no study): nothing is put on the parent, the pages stay as they were
    code, out = _eval(state, rows.run_id[0], "--temperature", "0.5")
    assert code == 0 and "parent run" not in out
    assert Path(client.download_artifacts(parent, f"{rescored_folder(METRIC)}/table.csv", str(dest))).read_text() \
        == text["table.csv"]


def test_a_search_caption_names_the_objectives_aggregation_and_each_trials_prompts():
    """No training: the caption's words for the objective beside the value, and per-trial prompts."""
    from grpolab.analysis.rescored import parse_rescored
    from grpolab.analysis.rescored_search import beside_words, prompts_per_trial, trial_status
    spec = parse_rescored(METRIC)
    assert beside_words(spec, "final:eval/pass_at_1") == "training-time value at the final evaluation"
    assert beside_words(spec, "auc:eval/pass_at_1") == ("training-time area under the evaluation curve / its step "
                                                        "span; not the re-scored value's aggregation")
    at_step = parse_rescored("rescored[step=1]:eval/held_out/avg_at_2")
    assert beside_words(at_step, "final:eval/pass_at_1").endswith("; not the re-scored value's aggregation")
    # a search sampling eval.prompts: each trial's own count where they differ
    assert prompts_per_trial({0: (4, 2), 1: (8, 2), 2: (4, 2)}) == "; prompts per trial: 4 (trials 0, 2), 8 (trial 1)"
    assert prompts_per_trial({0: (4, 2), 1: (4, 2), 2: None}) == ""
    assert [trial_status(s, 3.0) for s in ("PRUNED", "FAIL", "RUNNING")] == \
        ["pruned at step 3", "failed or interrupted (not resumed)", "running"]


def test_the_rescored_trials_figure_counts_only_the_points_it_plots():
    """plotly drops a point whose x is NaN: the note counts the points drawn, and says why others are not."""
    from grpolab.report.figures import rescored_trials_figure
    beside = "final:eval/pass_at_1"
    frame = pd.DataFrame({"trial": [0, 1, 2], beside: [0.5, math.nan, 0.2], METRIC: [0.4, 0.3, math.nan]})
    fig = rescored_trials_figure(frame, METRIC, beside)
    assert list(fig.data[0].x) == [0.5] and list(fig.data[0].text) == ["trial 0"]
    note = re.sub(r"<[^>]+>", " ", fig.layout.title.text)
    assert re.sub(r"\s+", " ", note).count("1 of 3 trials plotted, one point each; 1 not re-scored; 1 re-scored "
                                           "but not plotted: no finite final:eval/pass_at_1") == 1, note
