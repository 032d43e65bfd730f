"""A search study's trials under a re-scored metric (``analysis.rescored``): what ``grpolab table
SEARCH --metric rescored:...`` shows. Each trial's value is read from the re-scoring ``grpolab eval``
nested under its run, in a column beside the study objective it re-measures (the training-time
value stays); a trial with none keeps its row, the value missing and ``rescored_missing`` saying why.

Detail: docs/studies.md, "Re-scored tables on the parent run".
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import NamedTuple

import pandas as pd

from grpolab.analysis.rescored import (RescoredSpec, at_model, borrowed_objective, describe, draws_under,
                                       eval_command, parse_rescored, pick_choice, read_rescorings, row_value)
from grpolab.errors import ConfigError
from grpolab.studies.definition import StudyConfig

MISSING = "rescored_missing"   # the column that says why a trial has no re-scored value


class PickedTrials(NamedTuple):
    """A search's trials under a re-scored metric, and what its table states about it."""
    frame: pd.DataFrame     # search_table with the re-scored column (and MISSING) after ``beside``, best first
    caption: str            # trials counted, what was re-scored and how, beside which objective
    settings: str           # n, temperature, top_p, max_tokens, prompts, seed
    beside: str | None      # the study objective it re-measures (its training-time column), or None


def rescored_trials(frame: pd.DataFrame, cfg: StudyConfig, state: Path, text: str, study_path: str,
                    storage_url: str | None = None) -> PickedTrials:
    """``frame`` (search_table: one row per trial) with each trial's re-scored value under ``text``.
    Errors: no trial re-scored so, several settings to read (``pick_choice``)."""
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
    reasons = [missing_reason(spec, cfg, choice, run, st, values.get(run), state, storage_url)
               for run, st in zip(frame.run_id, frame.state)]
    out = frame.copy()
    at = list(out.columns).index(beside if beside else cfg.objectives[-1].metric) + 1
    out.insert(at, spec.label, [values[run].value if reason == "" else math.nan
                                for run, reason in zip(out.run_id, reasons)])
    out.insert(at + 1, MISSING, reasons)
    out = out.sort_values(spec.label, ascending=order == "minimize", na_position="last", kind="stable")
    note = (f"shown beside the study objective {beside} (the training-time value), trials best first by the "
            f"re-scored value ({order})" if beside else
            "no study objective measures it in its unit: shown after the objectives, trials highest first")
    description, settings = describe(spec, choice, present, {0: draws_under(cfg.base, spec, choice,
                                                                            f"eval/{spec.benchmark}/pass_at_1")},
                                     note, unit="trial")
    counted = sum(r == "" for r in reasons)
    caption = (f"{cfg.name}: {len(out)} trials, {counted} re-scored, {len(out) - counted} not ({MISSING} says why); "
               f"{description}")
    return PickedTrials(out.reset_index(drop=True), caption, settings, beside)


def missing_reason(spec: RescoredSpec, cfg: StudyConfig, choice: tuple, run, trial_state: str, value,
                   state: Path, storage_url: str | None) -> str:
    """'' for a trial with its re-scored value, else why it has none and, where it has a run, the
    command that re-scores it."""
    if not isinstance(run, str) or not run:
        return f"not re-scored: the {trial_state} trial has no MLflow run"
    if value is not None:
        return ""
    which = "fewer than 2 re-scored steps" if spec.agg == "auc" else "no re-scoring of the model it reads"
    return (f"not re-scored: the {trial_state} trial's run has {which} with these settings; "
            f"{eval_command(spec, cfg, choice, [run], state, storage_url)}")
