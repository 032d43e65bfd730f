"""Study files (studies/*.yaml) -> validated StudyConfig. Two kinds:

ladder: a base experiment and ordered rungs, each adding changes on top of the previous one
        (cumulative), run for every seed; optionally the published value of each rung.
search: a space over axes and hyperparameters (conditional via ``when``), a sampler, a pruner,
        a trial budget and one or several objectives.

Metrics are ``final:<eval key>`` (held-out value at the end), ``auc:<eval key>`` (mean over the
eval points, the area under the curve per step), ``tail:<train key>`` (mean of a training
curve over the last quarter of its points), or ``steps_to:<eval key>>=<x>`` /
``tokens_to:<eval key>>=<x>`` (optimizer steps / generated tokens until the held-out value first
reaches x; inf if never), e.g. ``final:eval/pass_at_1``, ``tail:length/incorrect``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple


from grpolab.errors import ConfigError, did_you_mean
from grpolab.experiment.benchmark_runs import check_named_scores
from grpolab.experiment.config import apply_overrides, as_overrides, build_config, override_string
from grpolab.method.requirements import inert
from grpolab.method.spec import MethodSpec
from grpolab.studies.devices import check_devices
from grpolab.studies.launch_options import LaunchOptions, parse_launcher
from grpolab.studies.registration import parse_deviations
from grpolab.studies.objectives import check_metric
from grpolab.studies.regime import Regime, check_logged, parse_regime
from grpolab.studies.search_space import check_space
from grpolab.tracking.held_out import canonical_metric
from grpolab.tracking.naming import flat_keys
from grpolab.yaml_input import read_yaml_mapping


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


def _positive(value, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError(f"{where}: expected a positive number (in the metric's own unit), got {value!r}")
    return float(value)


def _objectives(raw, study_delta) -> tuple[Objective, ...]:
    """Each objective its own direction and smallest effect; a study-level ``smallest_effect``
    belongs to a single objective only (steps, tokens and pass@1 share no unit)."""
    items = raw if isinstance(raw, list) else [raw]
    if study_delta is not None and len(items) > 1:
        raise ConfigError("smallest_effect: with several objectives give each its own "
                          "(objectives: [{metric, direction, smallest_effect}, ...]); they share no unit")
    out = []
    for item in items:
        item = {"metric": item} if isinstance(item, str) else dict(item)
        unknown = set(item) - {"metric", "direction", "smallest_effect"}
        if unknown or "metric" not in item:
            raise ConfigError(f"objectives: each needs metric (and optional direction, smallest_effect), got {item}")
        check_metric(item["metric"])
        if item.get("direction", "maximize") not in ("maximize", "minimize"):
            raise ConfigError(f"objectives.direction: maximize or minimize, got {item['direction']!r}")
        delta = _positive(item.get("smallest_effect", study_delta), f"objectives[{item['metric']}].smallest_effect")
        out.append(Objective(canonical_metric(item["metric"]), item.get("direction", "maximize"), delta))   # one name: avg@32 -> avg_at_32
    return tuple(out)


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


_LADDER_KEYS = {"kind", "name", "description", "base", "seeds", "metric", "objectives", "budget", "rungs", "published_source",
                "smallest_effect", "row_timeout_s", "deviations", "devices", "plan", "launcher"}
_SEARCH_KEYS = {"kind", "name", "description", "base", "seeds", "metric", "objectives", "budget", "space", "n_trials",
                "sampler", "pruner", "row_timeout_s", "deviations", "devices", "plan", "launcher"}


class SeedsOnDemand(NamedTuple):
    """``seeds: {first, batch, cap[, max_rows]}``: run seeds 0..first-1, then add ``batch`` paired
    seeds per look until every judged rung is decided or ``cap`` seeds ran; ``max_rows``: a look
    is not started when the rows it needs would take the study past that many rows (its time
    bound; analysis/until_decided.py)."""
    batch: int
    cap: int
    max_rows: int | None = None


SEEDS_ON_DEMAND_KEYS = ("first", "batch", "cap")
SEEDS_ON_DEMAND_OPTIONAL = ("max_rows", "start")


def _seeds(raw, kind: str) -> tuple[tuple[int, ...], SeedsOnDemand | None]:
    """A list of paired seeds, or a ladder's ``{first, batch, cap[, max_rows, start]}`` design
    (seeds start..start+first-1 first; ``start`` 0 by default: a new design on fresh seeds sets it)."""
    if isinstance(raw, dict) and kind == "ladder":
        if not set(SEEDS_ON_DEMAND_KEYS) <= set(raw) <= set(SEEDS_ON_DEMAND_KEYS + SEEDS_ON_DEMAND_OPTIONAL):
            raise ConfigError(f"seeds: a seeds-on-demand design needs exactly {', '.join(SEEDS_ON_DEMAND_KEYS)} "
                              f"(positive integers), and optionally max_rows and start, got {sorted(raw)}")
        first, batch, cap = (raw[k] for k in SEEDS_ON_DEMAND_KEYS)
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (first, batch, cap)) or not (
                2 <= first <= cap and batch >= 1):
            raise ConfigError(f"seeds: need integers 2 <= first <= cap and batch >= 1, got first={first!r}, "
                              f"batch={batch!r}, cap={cap!r}")
        max_rows = raw.get("max_rows")
        if max_rows is not None and (not isinstance(max_rows, int) or isinstance(max_rows, bool) or max_rows < 1):
            raise ConfigError(f"seeds.max_rows: need a positive integer (the most rows the study may run), got {max_rows!r}")
        start = raw.get("start", 0)
        if not isinstance(start, int) or isinstance(start, bool) or start < 0:
            raise ConfigError(f"seeds.start: need an integer >= 0 (the first seed), got {start!r}")
        return tuple(range(start, start + first)), SeedsOnDemand(batch, cap, max_rows)
    if (not isinstance(raw, list) or not raw or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                                                        for s in raw) or len(set(raw)) != len(raw)):
        raise ConfigError(f"seeds: expected a non-empty list of distinct non-negative integers"
                          f"{' or a ladder mapping {first, batch, cap}' if kind == 'ladder' else ''}, got {raw!r}")
    return tuple(raw), None


def load_study(path: str | Path) -> StudyConfig:
    path = Path(path)
    data = read_yaml_mapping(path, "study file", "give at least kind, base and rungs (or space), e.g. studies/dapo_table1.yaml")
    kind = data.get("kind")
    if kind not in ("ladder", "search"):
        raise ConfigError(f"kind: expected ladder or search, got {kind!r}")
    valid = _LADDER_KEYS if kind == "ladder" else _SEARCH_KEYS
    unknown = set(data) - valid
    if unknown:
        raise ConfigError(f"{sorted(unknown)[0]}: unknown key for a {kind} study{did_you_mean(sorted(unknown)[0], valid)}; valid: {', '.join(sorted(valid))}")
    base = data.get("base")
    if isinstance(base, str):
        base = read_yaml_mapping(path.parent / base, "base: experiment file")
    if not isinstance(base, dict):
        raise ConfigError("base: expected an experiment mapping (or a path to an experiment YAML)")
    budget = data.get("budget") or {}
    if not isinstance(budget, dict):
        raise ConfigError(f"budget: expected a mapping of experiment keys (e.g. train.steps: 50), got {budget!r}")
    base = apply_overrides(base, as_overrides(budget))
    seeds, on_demand = _seeds(data.get("seeds", [0]), kind)
    if kind == "search" and "smallest_effect" in data:
        raise ConfigError("smallest_effect: only ladders have verdicts; give it per objective of a ladder")
    objectives = _objectives(data.get("objectives") or data.get("metric") or "final:eval/pass_at_1",
                             _positive(data.get("smallest_effect"), "smallest_effect"))
    eval_section = base.get("eval") if isinstance(base.get("eval"), dict) else {}
    check_named_scores([o.metric for o in objectives], eval_section.get("benchmarks"))
    name = data.get("name", path.stem)
    # one MLflow experiment per study (MLflow's chart and compare views work per experiment), unless
    # the study's base names one (several studies can share an experiment that way)
    tracking = base.get("tracking") or {}
    if isinstance(tracking, dict) and "experiment" not in tracking:
        base = {**base, "tracking": {**tracking, "experiment": name}}
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"name: expected a non-empty string (it names the Optuna study), got {name!r}")
    if on_demand is not None and objectives[0].smallest_effect is None:
        raise ConfigError("seeds: {first, batch, cap} adds seeds until each rung is decided, which needs smallest_effect")
    common = dict(name=name, kind=kind, path=str(path), base=base, seeds=seeds, objectives=objectives, on_demand=on_demand,
                  description=data.get("description", ""), row_timeout_s=_row_timeout(data),
                  deviations=parse_deviations(data.get("deviations"), path.name), plan=parse_plan(data.get("plan")),
                  launcher=parse_launcher(data.get("launcher"), path),
                  devices=check_devices(data["devices"], "devices") if data.get("devices") is not None else ())
    if kind == "ladder":
        study = StudyConfig(**common, rungs=_rungs(data.get("rungs")), published_source=data.get("published_source", ""))
        _check_rungs_differ(study)
        for i, rung in enumerate(study.rungs[1:], 1):   # a ladder's regime reads the previous rung's rows
            check_logged(rung.regime, f"rungs[{i}] ({rung.name}).regime", study.rung_experiment(i - 1, study.seeds[0]))
        return study
    if len(objectives) > 1 and data.get("pruner"):
        raise ConfigError("pruner: Optuna cannot prune multi-objective studies; remove the pruner or keep one objective")
    space = check_space(data.get("space") or {})
    _check_space_acts(base, space, seeds[0])
    n_trials = data.get("n_trials", 8)
    if not isinstance(n_trials, int) or n_trials < 1:
        raise ConfigError(f"n_trials: expected a positive integer, got {n_trials!r}")
    return StudyConfig(**common, space=space, n_trials=n_trials, sampler=data.get("sampler") or {"name": "tpe", "seed": 0},
                       pruner=data.get("pruner") or {})


PLAN_KEYS = {"expected_completion_tokens": "the mean completion length, in tokens, the estimate assumes",
             "devices_per_row": "devices one row runs on (--gpus-per-row overrides it)"}


def parse_plan(raw) -> dict:
    """``plan: {expected_completion_tokens, devices_per_row}``: assumptions of ``grpolab study --plan``
    (positive integers); they change no row."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"plan: expected a mapping of {', '.join(PLAN_KEYS)}, got {raw!r}")
    for key, value in raw.items():
        if key not in PLAN_KEYS:
            raise ConfigError(f"plan.{key}: unknown key; valid: {', '.join(PLAN_KEYS)}")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"plan.{key}: expected a positive integer ({PLAN_KEYS[key]}), got {value!r}")
    return dict(raw)


def _row_timeout(data: dict) -> float | None:
    """``row_timeout_s``: seconds a row may go without progress (a step, an evaluation) before it
    is handed back and its worker stopped; default 3600, null to never time out."""
    value = data.get("row_timeout_s", 3600.0)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError(f"row_timeout_s: expected a positive number of seconds (or null for none), got {value!r}")
    return float(value)


def _rungs(raw) -> tuple[Rung, ...]:
    if not isinstance(raw, list) or not raw:
        raise ConfigError("rungs: expected a non-empty list of {name, changes, published}")
    out = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict) or "name" not in item:
            raise ConfigError(f"rungs[{i}]: expected a mapping with name, changes and optional published")
        unknown = set(item) - {"name", "changes", "published", "mechanism", "regime"}
        if unknown:
            raise ConfigError(f"rungs[{i}].{sorted(unknown)[0]}: unknown key; valid: name, changes, published, "
                              "mechanism, regime")
        for key in ("mechanism", "regime"):
            if i == 0 and item.get(key) is not None:
                raise ConfigError(f"rungs[0].{key}: the first rung is not judged against anything; "
                                  f"give a {key} to the rungs that change something")
        if not isinstance(item["name"], str) or not item["name"].strip():
            raise ConfigError(f"rungs[{i}].name: expected a non-empty string, got {item['name']!r}")
        if item["name"] in {r.name for r in out}:  # rows, tables and dashboards are keyed by rung name
            raise ConfigError(f"rungs[{i}].name: {item['name']!r} is already the name of an earlier rung; "
                              "rung names must be unique")
        changes = item.get("changes") or {}
        if not isinstance(changes, dict):
            raise ConfigError(f"rungs[{i}].changes: expected a mapping of experiment keys, got {changes!r}")
        if i > 0 and not changes:
            raise ConfigError(f"rungs[{i}] ({item['name']}): a rung after the first must change something")
        published = item.get("published")
        if published is not None and (isinstance(published, bool) or not isinstance(published, (int, float))):
            raise ConfigError(f"rungs[{i}].published: expected a number or nothing, got {published!r}")
        out.append(Rung(item["name"], changes, published,
                        parse_mechanism(item.get("mechanism"), f"rungs[{i}].mechanism", ("this", "previous")),
                        parse_regime(item.get("regime"), f"rungs[{i}].regime", ("previous",))))
    return tuple(out)


def _check_rungs_differ(study: StudyConfig) -> None:
    """Every rung validates, each change of a rung changes the value it had (in the previous
    rung, or for rungs[0] in the base), and no two rungs run the same effective experiment
    (method spec, task, model, budget, eval): a rung that repeats another would be measured
    against itself. Raised before anything runs."""
    seen, before = {}, _resolved_base(study)
    for i, rung in enumerate(study.rungs):
        for key, value in rung.changes.items() if before else ():
            if key in before and before[key] == value:   # the resolved value, defaults included
                raise ConfigError(f"rungs[{i}] ({rung.name}): its change {key}={value!r} is the value {key} "
                                  f"already has in {'the base' if i == 0 else f'rungs[{i - 1}]'}; "
                                  "every change of a rung must change something")
        cfg = _validate_experiment(study.rung_experiment(i, study.seeds[0]), f"rungs[{i}]")
        before = flat_keys(cfg.resolved())
        effective = (cfg.spec.spec_hash(), repr((cfg.task, cfg.model, cfg.train, cfg.eval, cfg.warm_start)))
        if effective in seen:
            raise ConfigError(f"rungs[{i}] ({rung.name}): runs exactly the same experiment as rungs[{seen[effective]}] "
                              f"({study.rungs[seen[effective]].name}); every rung must differ from the others")
        seen[effective] = i


def _resolved_base(study: StudyConfig) -> dict | None:
    """The base experiment's resolved keys, or None when the base is valid only with rungs[0]'s
    changes applied (that rung is then validated in full)."""
    try:
        return flat_keys(quiet_build(apply_overrides(study.base, [f"seed={study.seeds[0]}"])).resolved())
    except ConfigError:
        return None


def _check_space_acts(base: dict, space: dict, seed: int) -> None:
    """Each parameter of a search space names an experiment key that exists and accepts the
    values it will be sampled at (each choice, or low and high), with the parents its ``when``
    names at their required values: a typo in the space is answered before any trial runs.
    A float range is also tried at its midpoint ``(low + high) / 2`` as a float, so that a float
    range over an integer key (whose ends may be whole numbers) is refused here, not per trial."""
    for key, dist in space.items():
        values = dist["choices"] if dist["type"] == "categorical" else [dist["low"], dist["high"]]
        if dist["type"] == "float":
            values = [*values, (dist["low"] + dist["high"]) / 2]
        for value in values:
            point = {**(dist.get("when") or {}), key: value}
            overrides = as_overrides(point)
            try:
                experiment = apply_overrides(base, overrides + [f"seed={seed}"])
            except ConfigError as exc:
                raise ConfigError(f"space.{key}: {exc}") from None
            _validate_experiment(experiment, f"space.{key}={value!r}")


def quiet_build(data: dict):
    """``build_config`` with its notes unsaid: a study's notes are said once, when its file is
    validated (``ladder_notes`` and the coordinator), never again per row."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return build_config(data)


def _validate_experiment(data: dict, where: str):
    try:
        return quiet_build(data)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def ladder_notes(study) -> list[str]:
    """Before a ladder runs: rungs whose change is inert in their regime (identical rungs are
    refused by ``load_study``)."""
    notes = []
    for i, rung in enumerate(study.rungs):
        cfg = quiet_build(study.rung_experiment(i, study.seeds[0]))
        for key in rung.changes if i > 0 else ():
            section, _, axis = key.partition(".")
            if section == "method" and axis in MethodSpec.__dataclass_fields__ and inert(cfg, axis) is not None:
                req = inert(cfg, axis)
                notes.append(f"rung {i} ({rung.name}): its change {key}={rung.changes[key]} is inert here: "
                             f"it needs {req.name} ({req.hint})")
    return notes
