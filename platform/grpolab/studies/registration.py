"""Deviations and pre-registration: what was fixed before the data, and what changed after.

Detail: docs/studies.md, "grpolab.studies.registration".
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from grpolab.errors import ConfigError

DEVIATION_KEYS = ("date", "change", "after_seeing")
STORE = "preregistration.json"


@dataclass(frozen=True)
class Deviation:
    date: str
    change: str
    after_seeing: str

    def text(self) -> str:
        return f"{self.date}: {self.change} (after seeing {self.after_seeing})"


def parse_deviations(raw, where: str) -> tuple[Deviation, ...]:
    """``deviations:`` -> Deviation entries; each needs date (YYYY-MM-DD), change and after_seeing."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError(f"{where}: deviations: expected a list of {{date, change, after_seeing}}, got {raw!r}")
    out = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict) or set(item) != set(DEVIATION_KEYS):
            raise ConfigError(f"{where}: deviations[{i}]: expected exactly the keys {', '.join(DEVIATION_KEYS)}, "
                              f"got {item!r}")
        date = item["date"]
        try:
            date = date if isinstance(date, _dt.date) else _dt.date.fromisoformat(str(date))
        except ValueError:
            raise ConfigError(f"{where}: deviations[{i}].date: expected YYYY-MM-DD, got {item['date']!r}") from None
        if not all(isinstance(item[k], str) and item[k].strip() for k in ("change", "after_seeing")):
            raise ConfigError(f"{where}: deviations[{i}]: change and after_seeing must be non-empty text")
        out.append(Deviation(date.isoformat(), item["change"].strip(), item["after_seeing"].strip()))
    return tuple(out)


def fields_hash(fields: dict) -> str:
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _load(state: Path) -> dict:
    path = Path(state) / STORE
    return json.loads(path.read_text()) if path.exists() else {}


def record(state: Path, key: str, fields: dict, rows_done: int) -> None:
    """Store the first hash of ``key``'s fields (never overwritten: the first one is the registration)."""
    store = _load(state)
    if key in store:
        return
    store[key] = {"hash": fields_hash(fields), "fields": fields, "rows_done": int(rows_done),
                  "date": _dt.date.today().isoformat()}
    path = Path(state) / STORE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(store, indent=1, sort_keys=True, default=str))
    os.replace(tmp, path)     # atomic: a concurrent reader sees the old or the new store, never half


def status(state: Path, key: str, fields: dict, deviations: tuple[Deviation, ...]) -> str:
    """One line: pre-registered or not, and why (docs/studies.md, "grpolab.studies.registration")."""
    first = _load(state).get(key)
    n_dev = f"{len(deviations)} deviation(s) declared" if deviations else ""
    if first is None:
        return "not registered: no registration recorded in this state" + (f"; {n_dev}" if n_dev else "")
    if first["hash"] != fields_hash(fields):
        same = lambda k: fields_hash({k: first["fields"].get(k)}) == fields_hash({k: fields.get(k)})  # noqa: E731
        changed = sorted(k for k in set(first["fields"]) | set(fields) if not same(k))
        declared = any(d.date >= first["date"] for d in deviations)
        return (f"CHANGED since its registration of {first['date']} ({', '.join(changed)}): "
                + ("declared in deviations" if declared else "UNDECLARED (no deviation dated since)"))
    if first["rows_done"] > 0:
        return (f"not registered before its rows: first registered {first['date']} after {first['rows_done']} "
                f"row(s) had run" + (f"; {n_dev}" if n_dev else ""))
    if deviations:
        return (f"registered in this state {first['date']} before any of its rows ran, but {n_dev}: "
                "changed after results were seen")
    return f"registered in this state {first['date']} before any of its rows ran; unchanged; no deviation declared"


def ladder_key(cfg) -> str:
    return f"ladder:{cfg.name}"


def definition_hash(cfg) -> str:
    """Hash of everything that decides a study row's result: base, budget, rungs or space, seeds, metrics."""
    payload = {"base": cfg.base, "rungs": [(r.name, r.changes) for r in cfg.rungs], "space": cfg.space,
               "seeds": list(cfg.seeds), "objectives": [(o.metric, o.direction) for o in cfg.objectives]}
    if getattr(cfg, "on_demand", None) is not None:   # the seeds-on-demand design is registered too
        payload["seeds_on_demand"] = [d for d in cfg.on_demand if d is not None]   # max_rows only where set
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


def ladder_fields(cfg) -> dict:
    """A ladder's registered fields: what decides its verdicts, and its whole definition."""
    return {"objectives": [[o.metric, o.direction, o.smallest_effect] for o in cfg.objectives],
            "rungs": [[r.name, r.changes, r.published, r.mechanism and r.mechanism.text()]
                      + ([r.regime.text()] if r.regime else []) for r in cfg.rungs],
            "definition": definition_hash(cfg)}


def register_ladder(state: Path, cfg, study) -> None:
    """Hash a ladder's verdict fields the first time its study is run or tabled in this state."""
    from optuna.trial import TrialState
    done = sum(t.state == TrialState.COMPLETE for t in study.get_trials(deepcopy=False))
    record(state, ladder_key(cfg), ladder_fields(cfg), done)
