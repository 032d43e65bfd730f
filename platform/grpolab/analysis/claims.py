"""Claims as data (``studies/claims/*.yaml``, one claim per file): a published statement, where it
is written, and the pre-registered toy test of it.

Detail: docs/studies.md, "grpolab.analysis.claims".
"""

from __future__ import annotations

import json

from dataclasses import dataclass
from pathlib import Path


from grpolab.analysis import DIRECTIONS
from grpolab.errors import ConfigError
from grpolab.studies.definition import Mechanism, StudyConfig, load_study, parse_mechanism
from grpolab.studies.objectives import check_logged, check_window_metric, parse_threshold
from grpolab.studies.regime import Regime, check_gates_logged, parse_regime
from grpolab.studies.registration import parse_deviations
from grpolab.yaml_input import check_input_file, read_yaml_mapping

CLAIMS_DIR = Path(__file__).resolve().parents[3] / "studies" / "claims"
REQUIREMENTS = ("rollout_reuse", "free_length", "warm_start_band", "length_cap", "cold_start")
FREE_LENGTH_TASKS = ("addition_scratchpad", "addition_columns")
_KEYS = {"name", "source", "statement", "published", "study", "treatment", "control", "metric", "direction",
         "smallest_effect", "regime", "requires", "mechanism", "report", "kind", "statistic_note", "deviations",
         "premise", "scale", "threshold_of"}
KINDS = ("reproduction", "construction_check")
SCALES = ("linear", "log10")
# what decides a verdict: hashed at the first verdict, a later change is flagged (studies/registration.py)
PREREGISTERED = ("study", "treatment", "control", "metric", "direction", "smallest_effect", "mechanism")
REGISTERED_IF_SET = ("premise", "scale", "threshold_of")   # hashed only where a claim sets them


@dataclass(frozen=True)
class Side:
    rung: str | None
    metric: str | None
    value: float | None = None


@dataclass(frozen=True)
class Claim:
    name: str
    source: str
    statement: str
    published: str
    study_path: str
    treatment: Side
    control: Side
    metric: str
    direction: str
    smallest_effect: float
    regime: str
    requires: tuple
    mechanism: Mechanism | None
    report: tuple
    path: str
    kind: str = "reproduction"
    statistic_note: str = ""
    deviations: tuple = ()
    registered_fields: dict = None     # the PREREGISTERED fields as written in the file
    premise: Regime | None = None      # the regime the claim names, gated on one side's rows
    scale: str = "linear"              # log10: the paired difference of log10 values (a ratio)
    threshold_of: str | None = None    # a rung: the steps_to:/tokens_to: threshold is relative to its final value

    def metric_of(self, side: Side) -> str:
        return side.metric or self.metric


def check_claim_metric(metric: str, where: str) -> None:
    agg, _, key = metric.partition(":")
    if agg == "start":
        if not key.startswith("eval/"):
            raise ConfigError(f"{where}: {metric!r}; start:<held-out key>, e.g. start:eval/pass_at_1")
        return
    try:
        check_window_metric(metric)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _side(raw, where: str, study: StudyConfig) -> Side:
    if not isinstance(raw, dict) or not (set(raw) <= {"rung", "metric", "value"}) or ("rung" in raw) == ("value" in raw):
        raise ConfigError(f"{where}: expected {{rung: NAME[, metric: M]}} or {{value: NUMBER}}, got {raw!r}")
    if "value" in raw:
        if not isinstance(raw["value"], (int, float)):
            raise ConfigError(f"{where}.value: expected a number, got {raw['value']!r}")
        return Side(None, None, float(raw["value"]))
    names = [r.name for r in study.rungs]
    if raw["rung"] not in names:
        raise ConfigError(f"{where}.rung: {raw['rung']!r} is not a rung of {study.name}; valid: {', '.join(names)}")
    if raw.get("metric") is not None:
        check_claim_metric(raw["metric"], f"{where}.metric")
    return Side(raw["rung"], raw.get("metric"))


def resolve_study_path(claim_file: Path, study: str) -> Path:
    for base in (claim_file.parent.parent, CLAIMS_DIR.parent, claim_file.parent):
        if (base / study).exists() and (base / study).resolve() != claim_file.resolve():
            return base / study
    raise ConfigError(f"study: {study!r} not found next to {claim_file} or in studies/")


def load_claim(path: str | Path) -> Claim:
    path = Path(path)
    data = read_yaml_mapping(path, "claim file", "give at least source, statement, study, treatment, control, "
                             "metric, direction and smallest_effect")
    unknown = set(data) - _KEYS
    if unknown:
        raise ConfigError(f"{path.name}: {sorted(unknown)[0]}: unknown key; valid: {', '.join(sorted(_KEYS))}")
    for key in ("source", "statement", "study", "treatment", "control", "metric", "direction", "smallest_effect"):
        if key not in data:
            raise ConfigError(f"{path.name}: {key}: required")
    study = load_study(resolve_study_path(path, data["study"]))
    if not study.study_kind.paired_rungs:
        raise ConfigError(f"{path.name}: study: {study.name} is a {study.kind}; claims compare rungs of a ladder")
    check_claim_metric(data["metric"], f"{path.name}: metric")
    if data["direction"] not in DIRECTIONS:
        raise ConfigError(f"{path.name}: direction: {data['direction']!r}; valid: {', '.join(DIRECTIONS)}")
    delta = data["smallest_effect"]
    if not isinstance(delta, (int, float)) or not delta > 0:
        raise ConfigError(f"{path.name}: smallest_effect: expected a positive number, got {delta!r}")
    requires = tuple(data.get("requires") or ())
    bad = [r for r in requires if r not in REQUIREMENTS]
    if bad:
        raise ConfigError(f"{path.name}: requires: unknown {bad[0]!r}; valid: {', '.join(REQUIREMENTS)}")
    mechanism = parse_mechanism(data.get("mechanism"), f"{path.name}: mechanism", ("control", "treatment"),
                                lambda m: check_claim_metric(m, "metric"))
    if data.get("kind", "reproduction") not in KINDS:
        raise ConfigError(f"{path.name}: kind: {data['kind']!r}; valid: {', '.join(KINDS)}")
    if not isinstance(data.get("statistic_note", ""), str):
        raise ConfigError(f"{path.name}: statistic_note: expected text")
    for i, m in enumerate(data.get("report") or ()):
        check_claim_metric(m, f"{path.name}: report[{i}]")
    treatment = _side(data["treatment"], f"{path.name}: treatment", study)
    if treatment.rung is None:
        raise ConfigError(f"{path.name}: treatment: must name a rung (only the control may be a fixed value)")
    claim = Claim(data.get("name") or path.stem, str(data["source"]), str(data["statement"]), str(data.get("published", "")),
                  str(resolve_study_path(path, data["study"])), treatment, _side(data["control"], f"{path.name}: control", study),
                  data["metric"], data["direction"], float(delta), str(data.get("regime", "")), requires, mechanism,
                  tuple(data.get("report") or ()), str(path), data.get("kind", "reproduction"),
                  data.get("statistic_note", "").strip(), parse_deviations(data.get("deviations"), path.name),
                  {k: data.get(k) for k in PREREGISTERED} | {k: data[k] for k in REGISTERED_IF_SET if data.get(k)},
                  parse_regime(data.get("premise"), f"{path.name}: premise", ("control", "treatment")),
                  *_scale_and_threshold(data, path.name, study))
    if mechanism is not None and mechanism.rows == "control" and claim.control.rung is None:
        raise ConfigError(f"{path.name}: mechanism.rows: control is a fixed value here; use rows: treatment")
    _check_premise_rows(claim, study, path.name)
    _check_curves_logged(claim, study, path.name)
    check_requirements(claim, study)
    return claim


def _check_premise_rows(claim: Claim, study: StudyConfig, where: str) -> None:
    """A premise is gated on the control, never on the change's own effect: ``rows: treatment`` is
    refused where the control is a rung (the change was applied to the treatment rows, so they
    partly measure its effect). Against a fixed value (a one-arm claim) the treatment rows are the
    only rows and nothing was changed on them: there the premise reads them, and says so."""
    premise = claim.premise
    if premise is None:
        return
    if premise.rows == "treatment" and claim.control.rung is not None:
        raise ConfigError(f"{where}: premise.rows: treatment measures the premise on the rows the change was applied "
                          f"to, partly its own effect; use rows: control (the {claim.control.rung!r} rows)")
    if premise.rows == "control" and claim.control.rung is None:
        raise ConfigError(f"{where}: premise.rows: control is a fixed value here; use rows: treatment")
    side = claim.control if premise.rows == "control" else claim.treatment
    rung = [r.name for r in study.rungs].index(side.rung)
    check_gates_logged(premise, f"{where}: premise", study.rung_experiment(rung, study.seeds[0]))


def _check_curves_logged(claim: Claim, study: StudyConfig, where: str) -> None:
    """Refuse a metric the claim reads (its sides', its mechanism's, those it reports) from rows
    whose experiment turns that curve's setting off (``objectives.check_logged``)."""
    names = [r.name for r in study.rungs]
    sides = {"treatment": claim.treatment, "control": claim.control}
    rows = {name: study.rung_experiment(names.index(side.rung), study.seeds[0])
            for name, side in sides.items() if side.rung is not None}
    for name, experiment in rows.items():
        check_logged(claim.metric_of(sides[name]), f"{where}: {name}", experiment)
        for metric in claim.report:
            check_logged(metric, f"{where}: report", experiment)
    if claim.mechanism is not None and claim.mechanism.rows in rows:
        check_logged(claim.mechanism.metric, f"{where}: mechanism", rows[claim.mechanism.rows])


def _scale_and_threshold(data: dict, where: str, study: StudyConfig) -> tuple[str, str | None]:
    scale = data.get("scale", "linear")
    if scale not in SCALES:
        raise ConfigError(f"{where}: scale: {scale!r}; valid: {', '.join(SCALES)}")
    of = data.get("threshold_of")
    if of is None:
        return scale, None
    names = [r.name for r in study.rungs]
    if of not in names:
        raise ConfigError(f"{where}: threshold_of: {of!r} is not a rung of {study.name}; valid: {', '.join(names)}")
    agg, _, key = data["metric"].partition(":")
    if agg not in ("steps_to", "tokens_to") or not 0 < parse_threshold(key)[1] <= 1:
        raise ConfigError(f"{where}: threshold_of: needs a steps_to:/tokens_to: metric whose threshold is a fraction "
                          f"in (0, 1] of {of!r}'s final value, e.g. steps_to:eval/pass_at_1>=0.9; got {data['metric']!r}")
    return scale, of


def check_requirements(claim: Claim, study: StudyConfig) -> None:
    """A claim is refused before anything runs when its study cannot let the mechanism act."""
    names = [r.name for r in study.rungs]
    for side in (claim.treatment, claim.control):
        if side.rung is None:
            continue
        exp = study.rung_experiment(names.index(side.rung), study.seeds[0])
        train, task, ws = exp.get("train", {}), exp.get("task", {}), exp.get("warm_start", {}) or {}
        shipped = (exp.get("model") or {}).get("path")
        failures = {
            "rollout_reuse": train.get("minibatches", 1) * train.get("num_iterations", 1) <= 1,
            "free_length": task.get("name") not in FREE_LENGTH_TASKS,
            "warm_start_band": not (_shipped_in_band(shipped) if shipped else ws.get("enabled", True) is not False
                                    and _inside_unit((ws.get("band") or [0.2, 0.6]))),
            "length_cap": not train.get("max_completion_length"),
            "cold_start": shipped is not None or ws.get("enabled", True) is not False,
        }
        for req in claim.requires:
            if failures[req]:
                raise ConfigError(f"{Path(claim.path).name}: requires {req}, but rung {side.rung!r} of {study.name} "
                                  f"does not have it (see the claim's regime: {claim.regime or 'not stated'})")


def _inside_unit(band) -> bool:
    return 0 < band[0] and band[1] < 1


def _shipped_in_band(path: str) -> bool:
    """A shipped base model (studies.base_model) is a warm start in its band when its provenance
    says so; a model without that record is not known to be one."""
    record = Path(path) / "base_model.json"
    if not record.is_file():
        return False
    warm = json.loads(record.read_text()).get("warm_start") or {}
    band, reached = warm.get("band") or [0, 1], warm.get("pass@1")
    return _inside_unit(band) and reached is not None and band[0] <= reached <= band[1]


def claim_files(names: list[str] | None) -> list[Path]:
    """All shipped claims, or the named ones (a claim name or a path to a claim file)."""
    if not names:
        files = sorted(CLAIMS_DIR.glob("*.yaml"))
        if not files:
            raise ConfigError(f"no claim files in {CLAIMS_DIR}")
        return files
    out = []
    for name in names:
        path = Path(name) if name.endswith((".yaml", ".yml")) else CLAIMS_DIR / f"{name}.yaml"
        if not path.exists():
            valid = ", ".join(p.stem for p in sorted(CLAIMS_DIR.glob("*.yaml")))
            raise ConfigError(f"claim {name!r}: no such claim file; shipped claims: {valid}")
        out.append(check_input_file(path, "claim file"))
    return out
