"""Regime gates: the training regime a mechanism needs before its effect can test the published
claim, declared per ladder rung (``regime:``) and per claim (``premise:``).

Detail: docs/studies.md, "grpolab.studies.regime".
"""

from __future__ import annotations

from dataclasses import dataclass

from grpolab.errors import ConfigError
from grpolab.studies.objectives import check_logged

ABSENT = "regime absent: not a test of the claim"


@dataclass(frozen=True)
class Measure:
    kind: str                 # window | ratio | drop | gain
    windows: tuple[str, ...]  # the windows it reads (one for window; numerator, denominator otherwise)
    what: str                 # what it says about the regime, in a few words
    beside: str = ""          # a measure reported beside the gate's, never gated (what the gate leaves out)


MEASURES: dict[str, Measure] = {
    "truncated_fraction": Measure("window", ("tail:length/truncated_fraction",), "completions truncated"),
    "salvage_rate": Measure("window", ("tail:length/truncated_salvageable",),
                            "truncated completions correct when continued to twice the cap"),
    # Overlong filtering masks whatever truncation a step holds, so its premise is read over the whole run:
    # the policy may learn truncation away by the tail, after the filter has acted on every step before
    "truncated_fraction_run": Measure("window", ("run:length/truncated_fraction",),
                                      "completions truncated, mean over the whole run"),
    "salvage_rate_run": Measure("window", ("run:length/truncated_salvageable",),
                                "truncated completions correct when continued to twice the cap, mean over the "
                                "run's evaluations"),
    "entropy_drop": Measure("drop", ("tail:entropy", "head:entropy"), "relative head-to-tail entropy drop"),
    "correct_in_soft_zone": Measure("window", ("tail:length/soft_penalized_correct_fraction",),
                                    "correct completions inside the soft-punishment zone"),
    "length_cv": Measure("ratio", ("tail:length/std", "tail:length/mean"), "length sd / mean"),
    "incorrect_length_growth": Measure("ratio", ("tail:length/incorrect", "head:length/incorrect"),
                                       "incorrect completions' length, tail / head"),
    "all_correct_groups": Measure("window", ("tail:groups/all_correct",), "all-correct groups",
                                  beside="all_wrong_groups"),
    "all_wrong_groups": Measure("window", ("tail:groups/all_wrong",), "all-wrong groups"),
    "accuracy_gain": Measure("gain", ("tail:accuracy", "head:accuracy"), "training accuracy, tail - head"),
    "low_prob_token_share": Measure("window", ("tail:clip/low_old_prob_fraction",),
                                    "trained tokens with old-policy probability < 0.2"),
}


@dataclass(frozen=True)
class Gate:
    measure: str
    bound: float
    at_most: bool = False     # False: measure >= bound; True: measure <= bound

    def text(self) -> str:
        return f"{self.measure} {'<=' if self.at_most else '>='} {self.bound:g}"


@dataclass(frozen=True)
class Regime:
    """The premise a mechanism needs (``premise``, named for the paper's argument) and its gates,
    all measured on the ``rows`` side (ladder: previous, the control; claims: control or treatment)."""
    premise: str
    gates: tuple[Gate, ...]
    rows: str

    def text(self) -> str:
        return f"{self.premise}: {' and '.join(g.text() for g in self.gates)} on the {self.rows} rows"

    def windows(self) -> list[str]:
        return [w for g in self.gates for w in MEASURES[g.measure].windows]


def check_gates_logged(regime: Regime | None, where: str, rows_experiment: dict) -> None:
    """Refuse a gate whose curve the rows it reads would never log (``objectives.check_logged``): such
    a rung could only ever read ``regime not measured``."""
    for g in regime.gates if regime else ():
        for window in MEASURES[g.measure].windows:
            check_logged(window, f"{where}: the gate {g.measure}", rows_experiment)


def parse_regime(raw, where: str, sides: tuple[str, ...]) -> Regime | None:
    """``{premise: TEXT, gates: [{measure: NAME, at_least|at_most: NUMBER}, ...][, rows: SIDE]}``."""
    if raw is None:
        return None
    if not isinstance(raw, dict) or not {"premise", "gates"} <= set(raw) <= {"premise", "gates", "rows"}:
        raise ConfigError(f"{where}: expected {{premise: TEXT, gates: [{{measure: NAME, at_least: NUMBER}}], "
                          f"rows: {'|'.join(sides)}}}, got {raw!r}")
    if not isinstance(raw["premise"], str) or not raw["premise"].strip():
        raise ConfigError(f"{where}.premise: expected the paper's premise in words, got {raw['premise']!r}")
    rows = raw.get("rows", sides[0])
    if rows not in sides:
        raise ConfigError(f"{where}.rows: {rows!r}; valid: {', '.join(sides)}")
    if not isinstance(raw["gates"], list) or not raw["gates"]:
        raise ConfigError(f"{where}.gates: expected a non-empty list of {{measure, at_least|at_most}}")
    return Regime(raw["premise"].strip(), tuple(_gate(g, f"{where}.gates[{i}]") for i, g in enumerate(raw["gates"])), rows)


def _gate(raw, where: str) -> Gate:
    if not isinstance(raw, dict) or "measure" not in raw or len(set(raw) & {"at_least", "at_most"}) != 1 \
            or set(raw) - {"measure", "at_least", "at_most"}:
        raise ConfigError(f"{where}: expected {{measure: NAME, at_least: NUMBER}} or {{measure: NAME, at_most: NUMBER}}, "
                          f"got {raw!r}")
    if raw["measure"] not in MEASURES:
        raise ConfigError(f"{where}.measure: {raw['measure']!r}; valid: {', '.join(MEASURES)}")
    key = "at_most" if "at_most" in raw else "at_least"
    bound = raw[key]
    if isinstance(bound, bool) or not isinstance(bound, (int, float)):
        raise ConfigError(f"{where}.{key}: expected a number, got {bound!r}")
    return Gate(raw["measure"], float(bound), key == "at_most")
