"""`grpolab eval STUDY.yaml` on a search (every trial's run re-scored, nested under it) and on a
ladder (the re-scored table and its page put on the study's MLflow parent run, the same table
`grpolab table STUDY --metric rescored:...` prints)."""

import io
import re
from contextlib import redirect_stdout
from pathlib import Path

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
    runs = [r for r in dict.fromkeys(study_results(study, cfg).run_id) if r]
    assert len(runs) == 2
    code, out = _eval(state, folder / "search.yaml")
    assert code == 0
    client = MlflowClient(tracking_uri(state))
    for run in runs:   # one nested run each, at the final step, with the numbers re-scoring gives again
        (nested,) = _nested(client, run)
        assert nested.data.tags["mlflow.parentRunId"] == run and nested.data.tags["grpolab.eval.step"] == "2"
        assert f"{run} step 2: held_out/avg_at_2 " in out and f"(nested run {nested.info.run_id})" in out
        saved = read_saved_run(state / "runs" / run)
        specs = benchmark_specs(["held_out"], saved, {"n": 2, "size": 2, "max_tokens": 6})
        again = score_model(saved, specs, state / "runs" / run / "final")
        assert nested.data.metrics == again and 1 <= again["eval/held_out/mean_length"] <= 6
    # a search has no re-scored table: its parent run gets none
    parent = study.user_attrs[PARENT_RUN_ATTR]
    assert not [a for a in client.list_artifacts(parent) if a.path.startswith("rescored")]


def _table(state, path, fmt):
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["--state", str(state), "table", str(path), "--format", fmt, "--metric", METRIC]) == 0
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
