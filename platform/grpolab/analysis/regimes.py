"""Regime gates measured on finished rows (``studies.regime`` defines them), and the verdict they
leave: a rung or claim whose control rows lack the regime its mechanism needs is no test of the
published claim, whatever its interval says.

Per gate: the measure's value is the mean over the control rows of its per-run value (rows
without a finite value left out). A gate is ``met`` (value on the right side of its bound),
``failed``, or ``not measured`` (no control row logged the curve, or none had a finite value).
The regime is ``absent`` when any gate failed, else ``not measured`` when any gate was not
measured, else ``present``. Absent gives ``regime absent: not a test of the claim``; not measured
gives ``regime not measured: not a test of the claim`` (the missing curve named); the data's label
is kept as the face value either way.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from grpolab.analysis.verdicts import NOT_RUN, REGIME_ABSENT, REGIME_UNMEASURED, Verdict, replaced
from grpolab.experiment.config import CURVE_SETTINGS
from grpolab.studies.objectives import window_value
from grpolab.studies.regime import MEASURES, Gate, Regime
from grpolab.tracking.metric_catalog import lookup

MET, FAILED, UNMEASURED = "met", "failed", "not measured"
PRESENT, ABSENT = "present", "absent"


@dataclass(frozen=True)
class GateResult:
    gate: Gate
    value: float          # NaN: not measured
    missing: str = ""     # why not measured
    beside: float = math.nan   # the measure's ``beside`` measure on the same rows, reported only

    @property
    def status(self) -> str:
        if not math.isfinite(self.value):
            return UNMEASURED
        g = self.gate
        return MET if (self.value <= g.bound if g.at_most else self.value >= g.bound) else FAILED

    def text(self) -> str:
        if self.status == UNMEASURED:
            return f"{self.gate.text()}: not measured ({self.missing})"
        side = "<=" if self.gate.at_most else ">="
        other = MEASURES[self.gate.measure].beside
        note = f"; {other} = {self.beside:.3g} beside it, not gated" if other and math.isfinite(self.beside) else ""
        return f"{self.gate.measure} = {self.value:.3g} ({side} {self.gate.bound:g}: {self.status}{note})"


@dataclass(frozen=True)
class RegimeCheck:
    regime: Regime
    gates: tuple[GateResult, ...]
    rows: str             # whose rows were measured, in words

    @property
    def status(self) -> str:
        found = {g.status for g in self.gates}
        return ABSENT if FAILED in found else UNMEASURED if UNMEASURED in found else PRESENT

    def text(self) -> str:
        return f"{self.regime.premise}: {'; '.join(g.text() for g in self.gates)} on {self.rows}"


def run_measure(name: str, history) -> float:
    """One run's value of a measure (NaN where its windows have no finite value or divide by 0)."""
    m = MEASURES[name]
    values = [window_value(w, history) for w in m.windows]
    if not all(math.isfinite(v) for v in values):
        return math.nan
    if m.kind == "window":
        return values[0]
    if m.kind == "gain":
        return values[0] - values[1]
    if values[1] == 0:
        return math.nan
    return values[0] / values[1] if m.kind == "ratio" else 1.0 - values[0] / values[1]


def measure_gate(gate: Gate, histories: list) -> GateResult:
    """The gate's measure averaged over ``histories`` (the control rows), or why it is not measured."""
    if not histories:
        return GateResult(gate, math.nan, "no complete control row")
    for window in MEASURES[gate.measure].windows:
        agg, key = window.split(":", 1)
        logged = (any(key in e for h in histories for e in h.evals.values()) if agg in ("final", "start", "auc")
                  else any(h.train_curves.get(key) for h in histories))
        if not logged:
            # when the curve is logged, as its metric record says (a setting, and only at some evaluations)
            how = f"; logged with {lookup(key).when}" if key in CURVE_SETTINGS and lookup(key) else ""
            return GateResult(gate, math.nan, f"{key} not logged{how}")
    values = [v for v in (run_measure(gate.measure, h) for h in histories) if math.isfinite(v)]
    if not values:
        return GateResult(gate, math.nan, "no control row has a finite value")
    return GateResult(gate, sum(values) / len(values), beside=_mean_measure(MEASURES[gate.measure].beside, histories))


def _mean_measure(name: str, histories: list) -> float:
    """A measure's mean over the rows with a finite value; NaN for no measure or no such row."""
    values = [v for v in (run_measure(name, h) for h in histories) if math.isfinite(v)] if name else []
    return sum(values) / len(values) if values else math.nan


def check_regime(regime: Regime, histories: list, rows: str) -> RegimeCheck:
    return RegimeCheck(regime, tuple(measure_gate(g, histories) for g in regime.gates), rows)


def with_regime(v: Verdict, check: RegimeCheck | None) -> Verdict:
    """The verdict once its regime gate is read: unchanged (the check noted) when the regime is
    present; ``regime absent`` or ``regime not measured``, the data's label kept as face value,
    otherwise. No paired seed (``not run``) stays as it is."""
    if check is None or v.verdict == NOT_RUN:
        return v
    if check.status == PRESENT:
        return dataclasses.replace(v, diagnostics=v.diagnostics + (f"regime present: {check.text()}",))
    label = REGIME_ABSENT if check.status == ABSENT else REGIME_UNMEASURED
    return replaced(v, label, f"regime {check.status}: {check.text()}")

