"""A search study's trials under a re-scored metric (``analysis.rescored``): what ``grpolab table
SEARCH --metric rescored:...`` shows. Each trial's value is read from the re-scoring ``grpolab eval``
nested under its run, in a column beside the study objective in its unit (the training-time value
stays, its aggregation named); a trial with none keeps its row, the value missing and
``rescored_missing`` saying why (a pruned, failed or running trial: the model it lacks).

Detail: docs/studies.md, "Re-scored tables on the parent run".
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import NamedTuple

import pandas as pd

from grpolab.analysis.rescored import (RescoredSpec, at_model, borrowed_objective, describe, draws_under,
                                       eval_command, parse_rescored, pick_choice, read_rescorings, row_value)
from grpolab.errors import ConfigError
from grpolab.experiment.checkpoint_files import CONFIG, complete_checkpoints, run_dir
from grpolab.studies.definition import StudyConfig

MISSING = "rescored_missing"   # the column that says why a trial has no re-scored value
# a study objective's aggregation, as its training-time column is named beside the re-scored value
AGG_WORDS = {"final": "value at the final evaluation", "auc": "area under the evaluation curve / its step span"}


class PickedTrials(NamedTuple):
    """A search's trials under a re-scored metric, and what its table states about it."""
    frame: pd.DataFrame     # search_table with the re-scored column (and MISSING) after ``beside``, best first
    caption: str            # trials counted, what was re-scored and how, beside which objective
    settings: str           # n, temperature, top_p, max_tokens, prompts, seed
    beside: str | None      # the study objective it re-measures (its training-time column), or None


class RescoreContext(NamedTuple):
    """A study's trials read under one re-scored metric: how it reads them (``spec``, the settings
    ``choice``) and where their runs live (what its ``grpolab eval`` command names)."""
    spec: RescoredSpec
    cfg: StudyConfig
    choice: tuple | None
    state: Path
    storage_url: str | None


def rescored_trials(frame: pd.DataFrame, cfg: StudyConfig, state: Path, text: str, study_path: str,
                    storage_url: str | None = None, pruned_at: dict | None = None) -> PickedTrials:
    """``frame`` (search_table: one row per trial) with each trial's re-scored value under ``text``;
    ``pruned_at``: trial number -> its last reported step. Errors: no trial re-scored so, several
    settings to read (``pick_choice``)."""
    spec = parse_rescored(text)
    runs = {run: int(t) for t, run in zip(frame.get("trial", ()), frame.get("run_id", ())) if isinstance(run, str) and run}
    found = read_rescorings(state, set(runs), spec.key) if runs else {}
    candidates = {run: [r for r in found.get(run, []) if at_model(spec, r)] for run in runs}
    choice = pick_choice(spec, text, candidates)
    values = {run: row_value(spec, text, candidates[run], choice) for run in runs} if choice else {}
    present = [v for v in values.values() if v is not None]
    if not present:
        raise ConfigError(f"--metric {text!r}: no trial of {cfg.name} has a re-scoring of {spec.key} for "
                          f"{'at least 2 re-scored steps' if spec.agg == 'auc' else 'the model it reads'} with these "
                          f"settings; re-score them first: {eval_command(spec, cfg, None, [study_path], state, storage_url)}")
    index = borrowed_objective(cfg, spec)
    beside = cfg.objectives[index].metric if index is not None else None
    order = cfg.objectives[index].direction if index is not None else "maximize"
    context = RescoreContext(spec, cfg, choice, state, storage_url)
    reasons = [missing_reason(context, run, trial_status(st, (pruned_at or {}).get(t)), values.get(run))
               for run, st, t in zip(frame.run_id, frame.state, frame.trial)]
    out = frame.copy()
    at = list(out.columns).index(beside if beside else cfg.objectives[-1].metric) + 1
    out.insert(at, spec.label, [values[run].value if reason == "" else math.nan
                                for run, reason in zip(out.run_id, reasons)])
    out.insert(at + 1, MISSING, reasons)
    out = out.sort_values(spec.label, ascending=order == "minimize", na_position="last", kind="stable")
    note = (f"shown beside the study objective {beside} ({beside_words(spec, beside)}), trials best first by the "
            f"re-scored value ({order})" if beside else
            "no study objective measures it in its unit: shown after the objectives, trials highest first")
    # each trial's own prompt count: a search may sample eval.prompts or eval.final_prompts
    draws = {trial: draws_under(run_config(state, run), spec, choice, f"eval/{spec.benchmark}/pass_at_1")
             for run, trial in runs.items() if values.get(run) is not None}
    description, settings = describe(spec, choice, present, draws, note, unit="trial")
    counted = sum(r == "" for r in reasons)
    caption = (f"{cfg.name}: {len(out)} trials, {counted} re-scored, {len(out) - counted} not ({MISSING} says why); "
               f"{description}{prompts_per_trial(draws)}")
    return PickedTrials(out.reset_index(drop=True), caption, settings, beside)


def beside_words(spec: RescoredSpec, beside: str) -> str:
    """The objective's training-time aggregation, and whether the re-scored value is another one."""
    agg = beside.partition(":")[0]
    same = agg == spec.agg and spec.step is None
    words = f"training-time {AGG_WORDS.get(agg, agg + ':')}"
    return words if same else f"{words}; not the re-scored value's aggregation"


def run_config(state: Path, run: str) -> dict:
    """The run's saved config.json ({} where its folder has none)."""
    path = run_dir(state, run) / CONFIG
    return json.loads(path.read_text()) if path.exists() else {}


def prompts_per_trial(draws: dict) -> str:
    """'; prompts per trial: 4 (trials 0, 2), 8 (trial 1)' where the trials' counts differ, else ''."""
    by_count: dict[int, list] = {}
    for trial, d in sorted(draws.items()):
        if d:
            by_count.setdefault(d[0], []).append(str(trial))
    if len(by_count) < 2:
        return ""
    return "; prompts per trial: " + ", ".join(f"{n} (trial{'s' if len(t) > 1 else ''} {', '.join(t)})"
                                                 for n, t in sorted(by_count.items()))


def trial_status(trial_state: str, step=None) -> str:
    """How a trial (or a ladder's row) ended, in words; a pruned one at its last reported step."""
    if trial_state == "PRUNED":
        return "pruned" + (f" at step {int(step)}" if step is not None and pd.notna(step) else "")
    return {"COMPLETE": "complete", "FAIL": "failed or interrupted (not resumed)", "RUNNING": "running",
            "WAITING": "waiting", "MISSING": "not run"}.get(trial_state, str(trial_state).lower())


def lacking_model(spec: RescoredSpec, folder: Path) -> tuple[str, list[int]]:
    """(what the run lacks of the models ``spec`` reads, '' when it keeps them; its checkpoints' steps)."""
    if not folder.is_dir():
        return "its run folder is gone", []
    steps = [s for s, _ in complete_checkpoints(folder)]
    final = (folder / "final").is_dir()
    saved = json.loads((folder / CONFIG).read_text()) if (folder / CONFIG).exists() else {}
    models = set(steps) | ({int((saved.get("train") or {}).get("steps", -1))} if final else set())
    if spec.step is not None:
        return ("" if spec.step in models else f"no model at step {spec.step}"), steps
    if spec.agg == "auc":
        return ("" if len(models) >= 2 else "fewer than 2 saved models"), steps
    return ("" if final else "no final model"), steps


def missing_reason(context: RescoreContext, run, status: str, value) -> str:
    """'' for a trial with its re-scored value, else why it has none: the model it lacks (a pruned,
    failed or running trial keeps no final model), with a checkpoint's qualified metric where it kept
    one, or the command that re-scores it."""
    spec, cfg, choice, state, storage_url = context
    if not isinstance(run, str) or not run:
        return f"not re-scored: {status}, the trial has no MLflow run"
    if value is not None:
        return ""
    lacking, steps = lacking_model(spec, run_dir(state, run))
    if lacking:
        if not steps or spec.agg == "auc" or spec.step is not None:
            return f"not re-scored: {status}: {lacking}"
        at = dataclasses.replace(spec, step=steps[-1])
        return (f"not re-scored: {status}: {lacking}; its checkpoint at step {steps[-1]} is read by "
                f"'{at.label}' once re-scored: {eval_command(at, cfg, choice, [run], state, storage_url)}")
    which = "fewer than 2 re-scored steps" if spec.agg == "auc" else "no re-scoring of the model it reads"
    return (f"not re-scored: {status}, the trial's run has {which} with these settings; "
            f"{eval_command(spec, cfg, choice, [run], state, storage_url)}")
