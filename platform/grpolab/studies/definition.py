"""Study files (studies/*.yaml) -> validated StudyConfig: the keys every kind shares here, the
rest by the kind ``kind:`` names (studies/kinds/: ladder.py, search.py).

Metrics are ``final:<eval key>`` (held-out value at the end), ``auc:<eval key>`` (mean over the
eval points, the area under the curve per step), ``tail:<train key>`` (mean of a training
curve over the last quarter of its points), or ``steps_to:<eval key>>=<x>`` /
``tokens_to:<eval key>>=<x>`` (optimizer steps / generated tokens until the held-out value first
reaches x; inf if never), e.g. ``final:eval/pass_at_1``, ``tail:length/incorrect``.
"""

from __future__ import annotations

from pathlib import Path

from grpolab.errors import ConfigError, did_you_mean
from grpolab.experiment.benchmark_runs import check_named_scores
from grpolab.experiment.config import CURVE_SETTINGS
from grpolab.experiment.overrides import apply_overrides, as_overrides
from grpolab.studies.devices import check_devices
from grpolab.studies.kinds import kind_named
from grpolab.studies.kinds.ladder import ladder_notes  # noqa: F401  (re-exported: coordinator, plan, tests)
from grpolab.studies.kinds.search import SearchStudy  # noqa: F401  (imported to register the kind)
from grpolab.studies.launch_options import parse_launcher
from grpolab.studies.registration import parse_deviations
from grpolab.studies.objectives import check_logged, check_metric
from grpolab.studies.study_config import (  # noqa: F401  (re-exported: a study's parts by their old address)
    SEEDS_ON_DEMAND_KEYS, SEEDS_ON_DEMAND_OPTIONAL, Mechanism, Objective, Rung, SeedsOnDemand, StudyConfig,
    parse_mechanism, quiet_build)
from grpolab.tracking.held_out import canonical_metric
from grpolab.yaml_input import read_yaml_mapping


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


def _seeds(raw, kind) -> tuple[tuple[int, ...], SeedsOnDemand | None]:
    """A list of paired seeds, or a ladder's ``{first, batch, cap[, max_rows, start]}`` design
    (seeds start..start+first-1 first; ``start`` 0 by default: a new design on fresh seeds sets it)."""
    if isinstance(raw, dict) and kind.seeds_on_demand:
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
                          f"{f' or a {kind.name} mapping {{first, batch, cap}}' if kind.seeds_on_demand else ''}, got {raw!r}")
    return tuple(raw), None


def load_study(path: str | Path) -> StudyConfig:
    path = Path(path)
    data = read_yaml_mapping(path, "study file", "give at least kind, base and rungs (or space), e.g. studies/dapo_table1.yaml")
    kind = kind_named(data.get("kind"))
    valid = kind.keys
    unknown = set(data) - valid
    if unknown:
        raise ConfigError(f"{sorted(unknown)[0]}: unknown key for a {kind.name} study{did_you_mean(sorted(unknown)[0], valid)}; valid: {', '.join(sorted(valid))}")
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
    common = dict(name=name, kind=kind.name, path=str(path), base=base, seeds=seeds, objectives=objectives, on_demand=on_demand,
                  description=data.get("description", ""), row_timeout_s=_row_timeout(data),
                  deviations=parse_deviations(data.get("deviations"), path.name), plan=parse_plan(data.get("plan")),
                  launcher=parse_launcher(data.get("launcher"), path),
                  devices=check_devices(data["devices"], "devices") if data.get("devices") is not None else ())
    study = kind.parse(data, common, path)
    for where, experiment in [("metric", e) for e in kind.row_experiments(study)] + _searched_curve_settings(study):
        for objective in study.objectives:   # an objective its rows would never log
            check_logged(objective.metric, where, experiment)
    return study


def _searched_curve_settings(study) -> list[tuple[str, dict]]:
    """(where, the base with one choice applied) for each choice of a searched setting that a curve
    is logged only under (eval.salvage, eval.param_change): a trial drawing it off could not be scored."""
    out = []
    for section, name in CURVE_SETTINGS.values():
        searched = (study.space or {}).get(f"{section}.{name}")
        for choice in ((searched.get("choices") or []) if isinstance(searched, dict) else ()):
            out.append((f"metric (space: {section}.{name} = {choice!r})",
                        {**study.base, section: {**(study.base.get(section) or {}), name: choice}}))
    return out


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


