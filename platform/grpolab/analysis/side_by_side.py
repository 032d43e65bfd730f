"""One prompt's completions from every run of a study (every rung and seed), side by side
(``grpolab samples STUDY_OR_RUN [--prompt TEXT] [--step N]``), from the runs' completions tables
(``tracking/completions.py``): the run folder's table, which a killed run keeps too, else the copy
on the MLflow run.

Which prompt: the rows whose prompt contains ``--prompt`` (case-sensitive), else the prompt that
the most runs logged (ties: the earliest step, then the first run), so that a ladder's rungs of
one seed, which see the same prompts in the same order, line up. ``--step`` keeps that step only.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import NamedTuple

import pandas as pd

from grpolab.analysis.ablation import load_results

from grpolab.errors import ConfigError
from grpolab.tracking.completions import TRAIN_TABLE, last_step, read_table

COLUMNS = ["rung", "seed", "run", "step", "reward", "advantage", "length", "truncated", "correct", "completion"]


class SideBySide(NamedTuple):
    prompt: str
    frame: pd.DataFrame    # COLUMNS, one row per completion, runs in study order
    runs: int              # runs read
    without: list[str]     # runs that logged no completion of this prompt (rung/seed labels)


def study_runs(target: str, state: Path, storage_url: str | None) -> list[tuple[str, str, str]]:
    """(rung label, seed label, run id) of every run ``target`` names: a study file's rows (a
    ladder's rungs x seeds, a search's trials), else an MLflow run id with its child runs."""
    if Path(target).is_file():
        from grpolab.analysis.tidy import study_results
        from grpolab.studies.storage import default_storage
        journal = Path(default_storage(state)[len("journal:"):])
        study = None
        if storage_url is not None or journal.exists():   # opening a journal that is not there would create it
            cfg, study = load_results(target, state, storage_url, create=False)
        if study is None:
            raise ConfigError(f"{target}: the study has not run in {state} (no rows yet)")
        rows = study_results(study, cfg).drop_duplicates("run_id")
        rows = rows[rows.run_id != ""]
        return [(f"trial {r.trial}" if pd.isna(r.rung_name) else str(r.rung_name), str(r.seed), r.run_id)
                for r in rows.itertuples()]
    from grpolab.tracking.recorder import client_for, tracking_uri
    uri = tracking_uri(state)
    if uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///"):]).exists():   # reading must create no store
        raise ConfigError(f"{target!r}: neither a study file nor a run: {state} holds no MLflow store")
    client = client_for(state)
    try:
        run = client.get_run(target)
    except Exception as exc:   # MLflow raises its own error for an unknown id
        raise ConfigError(f"{target!r}: neither a study file nor an MLflow run id in {state}") from exc
    children = client.search_runs([run.info.experiment_id], f"tags.mlflow.parentRunId = '{target}'")

    def order(r):   # a study's rows in rung, then seed order
        tags = r.data.tags
        return tuple(int(tags[k]) if tags.get(k, "").isdigit() else -1 for k in ("grpolab.rung", "grpolab.seed"))
    runs = sorted(children, key=order) or [run]   # a study's parent run: its rows
    return [(r.data.tags.get("grpolab.rung_name", r.data.tags.get("grpolab.rung", r.info.run_name or "")),
             r.data.tags.get("grpolab.seed", ""), r.info.run_id) for r in runs]


def table_path(run_id: str, state: Path) -> Path:
    return Path(state) / "runs" / run_id / TRAIN_TABLE


def run_completions(run_id: str, state: Path, step: int | None = None) -> list[dict]:
    """A run's completions table (``step``: that step's rows): its run folder's, else the MLflow
    run's copy, else none."""
    local = table_path(run_id, state)
    if local.exists():
        return read_table(local, step)
    from grpolab.tracking.recorder import client_for
    client = client_for(state)
    if not any(a.path == TRAIN_TABLE for a in client.list_artifacts(run_id)):
        return []
    with tempfile.TemporaryDirectory() as tmp:
        return read_table(Path(client.download_artifacts(run_id, TRAIN_TABLE, tmp)), step)


def side_by_side(target: str, state: Path, storage_url: str | None = None, prompt: str | None = None,
                 step: int | None = None) -> SideBySide:
    """One prompt's completions from every run of ``target`` (module docstring)."""
    runs = study_runs(target, state, storage_url)
    tables = [(rung, seed, run_id, run_completions(run_id, state, step)) for rung, seed, run_id in runs]
    logged = [row for *_, rows in tables for row in rows]
    if not logged:
        where = f" at step {step}" if step is not None else ""
        raise ConfigError(f"{target}: no logged completions{where} in its {len(runs)} runs "
                          "(tracking.samples > 0 keeps them; steps are those of logged rollouts)")
    chosen = _choose_prompt(tables, prompt)
    records, without = [], []
    for rung, seed, run_id, rows in tables:
        mine = [r for r in rows if str(r["prompt"]) == chosen]
        if not mine:
            without.append(f"{rung}/s{seed}")
        records += [{"rung": rung, "seed": seed, "run": run_id[:8], **{k: r.get(k) for k in COLUMNS[3:]}} for r in mine]
    return SideBySide(chosen, pd.DataFrame(records, columns=COLUMNS), len(runs), without)


def _choose_prompt(tables, text: str | None) -> str:
    counts: dict[str, tuple[int, int, int]] = {}   # prompt -> (runs, -first step, -first run)
    for order, (*_, rows) in enumerate(tables):
        for p in {str(r["prompt"]) for r in rows}:
            first = min(r["step"] for r in rows if str(r["prompt"]) == p)
            runs, step, run = counts.get(p, (0, -first, -order))
            counts[p] = (runs + 1, max(step, -first), max(run, -order))
    if text is not None:
        counts = {p: c for p, c in counts.items() if text in p}
        if not counts:
            raise ConfigError(f"--prompt {text!r}: no logged prompt contains it")
    return max(counts, key=counts.get)


def final_step(target: str, state: Path, storage_url: str | None = None) -> int | None:
    """The last logged step of the first run of ``target`` whose run folder holds a table (the
    dashboard's default: the end of training, read without parsing whole tables)."""
    for *_, run_id in study_runs(target, state, storage_url):
        if table_path(run_id, state).exists():
            return last_step(table_path(run_id, state))
    return None


def render(view: SideBySide, width: int = 160) -> str:
    """The prompt, then one table row per completion (newlines shown as ⏎, cut at ``width``)."""
    frame = view.frame.copy()
    frame["completion"] = [str(c).replace("\n", "⏎")[:width] for c in frame.completion]
    lines = [f"prompt: {view.prompt!r}", f"{len(frame)} completions from {view.runs - len(view.without)} of "
             f"{view.runs} runs" + (f"; none logged for it in {', '.join(view.without)}" if view.without else ""), "",
             frame.to_markdown(index=False, floatfmt=".4g")]
    return "\n".join(lines)
