"""Each rung of a ladder judged against the previous one, paired by seed: the one function behind
the ladder table's verdict column and the dashboard's rung panels, so they cannot disagree.

Per rung i >= 1 and objective k: the direction is the published one when both rungs carry
different published values and k is the study's first objective (the published values are in its
unit), otherwise objective k's own direction; the smallest effect is objective k's own (none set:
no verdict). Then the same checks as claims: censoring (``verdicts.with_censoring``), the
rung's ``mechanism`` (a floor fixed in advance, measured on this or the previous rung's rows),
and the ladder's judged rungs as one family (``verdicts.with_family``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from .study_config import StudyConfig
from .verdicts import Verdict, paired_verdict, with_censoring, with_family, with_mechanism


@dataclass(frozen=True)
class RungVerdict:
    rung: int
    direction: str           # increase | decrease (of this rung minus the previous)
    verdict: Verdict | None  # None: the objective has no smallest effect, nothing is judged
    mechanism_value: float | None = None


def rung_direction(cfg: StudyConfig, rung: int, objective: int) -> str:
    now, prev = cfg.rungs[rung], cfg.rungs[rung - 1]
    if objective == 0 and now.published is not None and prev.published is not None and now.published != prev.published:
        return "increase" if now.published > prev.published else "decrease"
    return "increase" if cfg.objectives[objective].direction == "maximize" else "decrease"


class _Histories:
    """MLflow histories of ladder rows, read once each and only when a check needs them."""

    def __init__(self, state: Path | None, keys: set[str]):
        self.state, self.keys, self.cache, self.client = state, keys, {}, None

    def __call__(self, run_id: str):
        if run_id not in self.cache:
            from .run_windows import run_history
            if self.client is None:
                from mlflow.tracking import MlflowClient

                from .tracking import tracking_uri
                self.client = MlflowClient(tracking_uri(self.state))
            self.cache[run_id] = run_history(self.client, run_id, self.keys)
        return self.cache[run_id]


def censored_rows(rows: pd.DataFrame, metric: str, histories) -> pd.DataFrame:
    """The rows with threshold metrics never reached counted at their budget (``censored`` True):
    the one censoring policy of claims and tables."""
    from .run_windows import censored_value
    rows = rows.copy()
    rows["censored"] = False
    for i, row in rows[(rows.state == "COMPLETE") & (rows.value == math.inf)].iterrows():
        rows.at[i, "value"], rows.at[i, "censored"] = censored_value(metric, math.inf, histories(row.run_id))
    return rows


def rung_verdicts(rows: pd.DataFrame, cfg: StudyConfig, objective: int = 0, state: Path | None = None,
                  level: float = 0.95, looks: int = 1) -> tuple[pd.DataFrame, list[RungVerdict]]:
    """(rows with censored values at their budget, one RungVerdict per rung >= 1); ``level`` and
    ``looks``: a sequential plan's (``studies.verdict_plan``)."""
    from .run_windows import mean_window, train_keys
    obj = cfg.objectives[objective]
    histories = _Histories(state, train_keys([r.mechanism.metric for r in cfg.rungs if r.mechanism]))
    rows = censored_rows(rows, obj.metric, histories)
    done = rows[rows.state == "COMPLETE"]
    out = []
    for i in range(1, len(cfg.rungs)):
        direction = rung_direction(cfg, i, objective)
        if obj.smallest_effect is None:
            out.append(RungVerdict(i, direction, None))
            continue
        mine, before = (done[done.rung == r].set_index("seed") for r in (i, i - 1))
        common = sorted(set(mine.index) & set(before.index))
        diffs = {int(s): float(mine.value[s] - before.value[s]) for s in common}
        v = paired_verdict(diffs, direction, obj.smallest_effect, level, looks)
        v = with_censoring(v, int(mine.censored[common].sum()), int(before.censored[common].sum()), obj.metric)
        value = None
        mech = cfg.rungs[i].mechanism
        if mech is not None:
            on = i if mech.rows == "this" else i - 1
            value = mean_window(mech.metric, [histories(r) for r in done[done.rung == on].run_id])
            v = with_mechanism(v, mech.metric, value, mech.at_least, f"{cfg.rungs[on].name!r} rows")
        out.append(RungVerdict(i, direction, v, value))
    judged = [r for r in out if r.verdict is not None]
    for r, v in zip(judged, with_family([r.verdict for r in judged])):
        out[out.index(r)] = RungVerdict(r.rung, r.direction, v, r.mechanism_value)
    return rows, out


def run_until_decided(path: str, state: Path, storage_url: str | None, workers: int, max_seeds: int, batch: int,
                      echo=print, retry_failed: bool = False, accept_changed: bool = False) -> int:
    """``grpolab study LADDER --until-decided --max-seeds N``: run the ladder, then add ``batch``
    paired seeds at a time until every judged rung is decided (or its mechanism did not act) or N
    seeds ran; each of the K planned looks is judged at level 1 - 0.05/K (``inference``), which the
    study keeps, so its table and dashboard state the same level. Returns run_study's exit code."""
    from . import inference
    from .studies import add_seeds, default_storage, record_sequential, run_study
    from .study_config import load_study
    from .study_tables import ladder_rows, load_results
    from .errors import ConfigError
    from .verdicts import DECIDED, NO_MECHANISM
    cfg = load_study(path)
    if cfg.kind != "ladder":  # noqa: SIM102
        raise ConfigError(f"--until-decided: {cfg.name} is a search; only ladders have rung verdicts")
    if cfg.objectives[0].smallest_effect is None:
        raise ConfigError(f"--until-decided: {cfg.name} has no smallest_effect for {cfg.objectives[0].metric}: "
                          "nothing can be decided")
    if max_seeds < len(cfg.seeds) or batch < 1:
        raise ConfigError(f"--until-decided needs --max-seeds N >= the study's seeds ({len(cfg.seeds)}) and --batch >= 1")
    looks = inference.planned_looks(len(cfg.seeds), batch, max_seeds)
    level = inference.sequential_level(0.95, len(looks))
    storage = storage_url or default_storage(state)
    from .stores import init_tracking_store
    Path(state).mkdir(parents=True, exist_ok=True)
    init_tracking_store(state)
    record_sequential(cfg, storage, looks, level)
    code = 0
    for j, n in enumerate(looks, 1):
        add_seeds(cfg, storage, n)
        code = run_study(path, state, storage_url, workers, retry_failed, echo=echo, accept_changed=accept_changed)
        if code:
            return code
        cfg_now, study = load_results(path, state, storage_url)
        rows = ladder_rows(study, cfg_now)
        rows = rows[rows.seed.isin(cfg_now.seeds[:n])]          # look j judges its first n_j seeds
        verdicts = [r.verdict for r in rung_verdicts(rows, cfg_now, 0, state, level, len(looks))[1]]
        echo(f"look {j}/{len(looks)} at {n} seeds (per-look level {100 * level:.4g} %): "
             + ", ".join(v.verdict for v in verdicts if v is not None))
        if all(v is None or v.verdict in (*DECIDED, NO_MECHANISM) for v in verdicts):
            break
    return code
