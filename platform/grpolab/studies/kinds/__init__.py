"""Study kinds as types: what a ``kind:`` of a study file means, asked of one object instead of
compared as a string. ``StudyKind`` is what the coordinator, workers, plan, tables and reports
ask; ``register`` adds a kind under its name (ladder.py and search.py register theirs when
definition.py imports them) and ``kind_named`` answers the kind a StudyConfig names."""

from __future__ import annotations

from typing import Protocol

from grpolab.errors import ConfigError

KINDS: dict[str, StudyKind] = {}


class StudyKind(Protocol):
    """A kind of study. Facts the layers above read as data: ``keys`` (the study file's keys it
    accepts), ``seeds_on_demand`` (accepts ``seeds: {first, batch, cap}``), ``queued_rows`` (its
    rows are fixed and queued before workers run; else a worker asks the sampler for a new trial
    until ``n_trials`` ended), ``paired_rungs`` (its rows are rungs x paired seeds: verdicts,
    ablation and re-scored tables, scaling fits, claims) and ``optuna_panels`` (its dashboard
    shows Optuna's figures). Kinds sharing behaviour derive from common.StudyCommon."""
    name: str
    keys: frozenset
    seeds_on_demand: bool
    queued_rows: bool
    paired_rungs: bool
    optuna_panels: bool

    def parse(self, data: dict, common: dict, path): ...            # -> StudyConfig
    def check(self, cfg, echo) -> None: ...                          # before anything runs
    def total_rows(self, cfg) -> int: ...
    def row_counts(self, study, cfg) -> tuple[list, dict]: ...       # (its trials, rows by state)
    def open_rows(self, study, cfg, final: dict) -> tuple[int, list[str]]: ...
    def pending(self, study, cfg) -> bool: ...
    def budget_spent(self, study, cfg) -> bool: ...
    def trial_experiment(self, cfg, trial) -> tuple[dict, dict]: ...  # (experiment, labels)
    def run_name(self, cfg, trial_number: int, labels: dict) -> str: ...
    def reference_experiment(self, cfg, seed: int) -> dict: ...
    def row_experiments(self, cfg) -> list[dict]: ...
    def first_row(self, cfg) -> dict: ...
    def prunes(self, cfg) -> bool: ...
    def sampler(self, cfg): ...
    def pruner(self, cfg): ...
    def plan_rows(self, cfg, budget_keys) -> tuple[list, list[str]]: ...  # ([(name, rows, experiment)], notes)
    def plan_shape(self, plan) -> str: ...                           # "2 rungs x 3 seeds", "8 trials"


def register(kind: StudyKind) -> StudyKind:
    """Add ``kind`` under ``kind.name`` (a later registration under the same name replaces it)."""
    KINDS[kind.name] = kind
    return kind


def names_a_kind(value) -> bool:
    """Whether ``value`` (a file's ``kind:``) is a registered kind's name: a study file, not an experiment."""
    return isinstance(value, str) and value in KINDS


def kind_named(name: str) -> StudyKind:
    if not isinstance(name, str) or name not in KINDS:
        raise ConfigError(f"kind: expected {' or '.join(KINDS)}, got {name!r}")
    return KINDS[name]
