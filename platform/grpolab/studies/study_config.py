"""A study's definition as data: StudyConfig and its parts (rungs, objectives, mechanisms), the
pieces every study kind builds from; the parsing of a study file is in definition.py and in
each kind's ``parse`` (studies/kinds/)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import NamedTuple

from grpolab.errors import ConfigError
from grpolab.experiment.config import build_config
from grpolab.experiment.overrides import apply_overrides, override_string
from grpolab.studies.kinds import kind_named
from grpolab.studies.launch_options import LaunchOptions
from grpolab.studies.objectives import check_metric
from grpolab.studies.regime import Regime


@dataclass(frozen=True)
class Mechanism:
    """A precondition of a change: the curve that shows it can act at all, and its floor fixed in
    advance; below it the change's verdict is ``precondition not met``. ``rows``: whose runs are
    measured (mean over their seeds)."""
    metric: str
    at_least: float
    rows: str = "this"      # rungs: this | previous; claims: treatment | control

    def text(self) -> str:
        return f"{self.metric} >= {self.at_least:g} on the {self.rows} rows"


@dataclass(frozen=True)
class Rung:
    name: str
    changes: dict
    published: float | None = None
    mechanism: Mechanism | None = None
    regime: Regime | None = None     # the premise its mechanism needs, gated on the previous rung's rows


@dataclass(frozen=True)
class Objective:
    metric: str
    direction: str = "maximize"
    smallest_effect: float | None = None    # in the metric's own unit; None: its verdicts are not judged


@dataclass(frozen=True)
class StudyConfig:
    name: str
    kind: str
    path: str
    base: dict
    seeds: tuple[int, ...]
    objectives: tuple[Objective, ...]
    rungs: tuple[Rung, ...] = ()
    published_source: str = ""
    deviations: tuple = ()          # preregistration.Deviation entries: changes made after seeing results
    added_seeds: tuple = ()         # seeds added on demand (studies.add_seeds), also in ``seeds``
    seed_rungs: dict = field(default_factory=dict)   # added seed -> the rungs it runs, where not all (add_seeds)
    on_demand: SeedsOnDemand | None = None   # seeds: {first, batch, cap}: `grpolab study` adds seeds until decided
    description: str = ""
    space: dict = field(default_factory=dict)
    n_trials: int = 0
    sampler: dict = field(default_factory=dict)
    pruner: dict = field(default_factory=dict)
    row_timeout_s: float | None = 3600.0   # a row with no progress this long is hung: handed back (hand_back.py)
    devices: tuple[str, ...] = ()          # the device pool for --gpus-per-row (devices.py); not in the definition hash
    plan: dict = field(default_factory=dict)   # `grpolab study --plan` assumptions (plan.py); not in the definition hash
    launcher: LaunchOptions = LaunchOptions()  # how rows are launched (launch_options.py); not in the definition hash

    @property
    def study_kind(self):
        """The registered kind object (studies/kinds/) that this study's ``kind`` names: what the
        coordinator, workers, tables and reports ask instead of comparing the name."""
        return kind_named(self.kind)

    def rows(self) -> list[tuple[int, int]]:
        """(rung index, seed) for every row of a ladder: every rung for the file's seeds; a seed
        added on demand runs only the rungs its look still needed (``seed_rungs``)."""
        every = range(len(self.rungs))
        return [(r, s) for r in every for s in self.seeds if r in self.seed_rungs.get(s, every)]

    def rung_experiment(self, rung: int, seed: int) -> dict:
        """The experiment dict of one ladder row: base + changes of rungs 0..rung, cumulative."""
        overrides = [override_string(k, v) for r in self.rungs[: rung + 1] for k, v in r.changes.items()]
        data = apply_overrides(self.base, overrides + [f"seed={seed}"])
        data["name"] = f"{self.name}-r{rung}"
        return data


class SeedsOnDemand(NamedTuple):
    """``seeds: {first, batch, cap[, max_rows]}``: run seeds 0..first-1, then add ``batch`` paired
    seeds per look until every judged rung is decided or ``cap`` seeds ran; ``max_rows``: a look
    is not started when the rows it needs would take the study past that many rows (its time
    bound; studies/until_decided.py)."""
    batch: int
    cap: int
    max_rows: int | None = None


SEEDS_ON_DEMAND_KEYS = ("first", "batch", "cap")
SEEDS_ON_DEMAND_OPTIONAL = ("max_rows", "start")


def parse_mechanism(raw, where: str, sides: tuple[str, ...], check=check_metric) -> Mechanism | None:
    """``mechanism: {metric, at_least[, rows]}`` with rows one of ``sides`` (default: the first)."""
    if raw is None:
        return None
    if not isinstance(raw, dict) or not {"metric", "at_least"} <= set(raw) <= {"metric", "at_least", "rows"}:
        raise ConfigError(f"{where}: expected {{metric: M, at_least: NUMBER[, rows: {'|'.join(sides)}]}}, got {raw!r}")
    floor = raw["at_least"]
    if isinstance(floor, bool) or not isinstance(floor, (int, float)):
        raise ConfigError(f"{where}.at_least: expected a number, got {floor!r}")
    rows = raw.get("rows", sides[0])
    if rows not in sides:
        raise ConfigError(f"{where}.rows: {rows!r}; valid: {', '.join(sides)}")
    try:
        check(raw["metric"])
    except ConfigError as exc:
        raise ConfigError(f"{where}.metric: {exc}") from None
    return Mechanism(raw["metric"], float(floor), rows)


def quiet_build(data: dict):
    """``build_config`` with its notes unsaid: a study's notes are said once, when its file is
    validated (``ladder_notes`` and the coordinator), never again per row."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return build_config(data)


def validate_experiment(data: dict, where: str):
    try:
        return quiet_build(data)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


