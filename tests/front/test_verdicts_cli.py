"""`grpolab verdicts` as a command: the data it prints on stdout is only the table, so that
`--format csv` can be piped into a CSV reader; the rows are run by 2 worker processes (the
multi-worker path: workers print nothing onto stdout and exit without interpreter teardown)."""

import csv
import io
import os
import subprocess
import sys

import pytest
import yaml

STUDY = {"kind": "ladder", "name": "verdicts_cli_ladder", "seeds": [0, 1], "metric": "final:eval/pass_at_1",
         "base": {"task": {"name": "addition", "digits": 2}, "model": {"preset": "tiny"},
                  "warm_start": {"enabled": False}, "method": {"base": "grpo", "kl_coef": 0.0},
                  "train": {"group_size": 4, "prompts_per_rollout": 2}, "eval": {"prompts": 4, "k": 1},
                  "tracking": {"experiment": "verdicts-cli-test"}},
         "budget": {"train.steps": 1, "eval.every": 0},
         "rungs": [{"name": "lr low"}, {"name": "lr high", "changes": {"train.learning_rate": 0.002}}]}
CLAIM = {"source": "test (arXiv:0000.00000), Section 1, p. 1", "statement": "a higher learning rate helps",
         "study": "verdicts_cli_ladder.yaml", "treatment": {"rung": "lr high"}, "control": {"rung": "lr low"},
         "metric": "final:eval/pass_at_1", "direction": "increase", "smallest_effect": 0.05, "regime": "none needed"}


def _verdicts(state, cwd, *args):
    env = {**os.environ, "GRPOLAB_STATE": str(state)}
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run([sys.executable, "-m", "grpolab.cli", "--state", str(state), "verdicts", *args],
                          capture_output=True, text=True, env=env, cwd=cwd, timeout=900)


@pytest.mark.slow
def test_csv_verdicts_write_only_the_table_to_stdout(tmp_path):
    """Run (2 workers, 4 rows of 1 step) and judge one claim with --format csv: stdout parses as
    CSV with exactly one row for the claim (2 seeds: underpowered), nothing else; the progress,
    dashboard path and summary are on stderr. --no-run markdown afterwards: the table only.
    Nothing is written in the working folder (the workers' fast exit once created ./mlflow.db)."""
    (tmp_path / "claims").mkdir()
    (tmp_path / "verdicts_cli_ladder.yaml").write_text(yaml.safe_dump(STUDY))
    claim = tmp_path / "claims" / "lr_helps.yaml"
    claim.write_text(yaml.safe_dump(CLAIM))
    state, cwd = tmp_path / "state", tmp_path / "cwd"
    cwd.mkdir()

    done = _verdicts(state, cwd, "--workers", "2", "--format", "csv", str(claim))
    assert done.returncode == 0, done.stderr[-2000:]
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    assert len(rows) == 1 and rows[0]["claim"] == "lr_helps", done.stdout
    assert rows[0]["verdict"] == "underpowered" and rows[0]["seeds"] == "2" and "2 < 5 paired seeds" in rows[0]["why"]
    assert rows[0]["deviations"] == "none" and rows[0]["registration"].startswith("registered in this state ")
    assert done.stdout.count("\n") == 2 and done.stdout.endswith("\n") and not done.stdout.endswith("\n\n")
    assert "dashboard: " in done.stderr and "1 claim(s) judged" in done.stderr
    assert "rows 4/4 done" in done.stderr          # the study's progress went to stderr, not into the CSV
    assert (state / "dashboards" / "verdicts.html").exists()

    again = _verdicts(state, cwd, "--no-run", str(claim))
    assert again.returncode == 0, again.stderr[-2000:]
    lines = again.stdout.splitlines()
    assert lines[0].startswith("| claim") and len(lines) == 5 and "lr_helps" in lines[2]
    assert lines[3] == "" and lines[4].startswith("Family: the 0 claims judged on data in this run, of 1 named")
    assert "dashboard: " not in again.stdout and "dashboard: " in again.stderr
    assert list(cwd.iterdir()) == []


def test_no_run_on_a_fresh_state_says_not_run_creates_no_study_and_escapes_pipes(tmp_path):
    """A claim never run reads "not run"; judging it leaves no empty Optuna study behind (which
    optuna-dashboard would list); a `|` in a claim's text stays inside its cell."""
    import optuna

    from grpolab.studies.storage import open_storage
    (tmp_path / "claims").mkdir()
    (tmp_path / "verdicts_cli_ladder.yaml").write_text(yaml.safe_dump(STUDY))
    claim = tmp_path / "claims" / "pipes.yaml"
    claim.write_text(yaml.safe_dump({**CLAIM, "statement": "GRPO's 1/|o| length normalisation | lengthens answers"}))
    state = tmp_path / "state"
    done = _verdicts(state, tmp_path, "--no-run", str(claim))
    assert done.returncode == 0, done.stderr[-2000:]
    header, rule, row = done.stdout.splitlines()[:3]
    cells = lambda line: len(line.replace("\\|", "").split("|"))   # noqa: E731 - cells between unescaped pipes
    assert cells(row) == cells(header) == cells(rule), done.stdout
    columns = [c.strip() for c in header.strip("|").split("|")]
    values = [c.strip() for c in row.replace("\\|", "\x00").strip("|").split("|")]
    assert values[columns.index("verdict")] == "not run"
    assert "1/\\|o\\| length" in row
    storage = open_storage(f"journal:{state / 'optuna.journal'}")
    assert optuna.get_all_study_names(storage) == []
