"""LadderStudy: a base experiment and ordered rungs, each adding changes on top of the previous
one (cumulative), run for every seed: its rows (rung, seed) are fixed, queued before workers
run, and compared rung against rung on paired seeds (verdicts, ablation tables)."""

from __future__ import annotations

from grpolab.errors import ConfigError
from grpolab.experiment.overrides import apply_overrides
from grpolab.method.requirements import inert
from grpolab.method.spec import MethodSpec
from grpolab.studies.kinds import register
from grpolab.studies.kinds.common import COMMON_KEYS, StudyCommon
from grpolab.studies.objectives import check_logged, check_window_metric
from grpolab.studies.regime import check_gates_logged, parse_regime
from grpolab.studies.study_config import Rung, StudyConfig, parse_mechanism, quiet_build, validate_experiment
from grpolab.tracking.naming import flat_keys, ladder_run_name

ADDED_SEED_MAX = 2**31 - 1


class LadderStudy(StudyCommon):
    name = "ladder"
    keys = COMMON_KEYS | {"rungs", "published_source", "smallest_effect"}
    seeds_on_demand = True
    queued_rows = True
    paired_rungs = True

    def parse(self, data: dict, common: dict, path) -> StudyConfig:
        study = StudyConfig(**common, rungs=_rungs(data.get("rungs")), published_source=data.get("published_source", ""))
        _check_rungs_differ(study)
        experiments = [study.rung_experiment(i, study.seeds[0]) for i in range(len(study.rungs))]
        for i, rung in enumerate(study.rungs):   # a ladder's regime reads the previous rung's rows
            if i:
                check_gates_logged(rung.regime, f"rungs[{i}] ({rung.name}).regime", experiments[i - 1])
            if rung.mechanism is not None:
                check_logged(rung.mechanism.metric, f"rungs[{i}] ({rung.name}).mechanism",
                             experiments[i - 1 if rung.mechanism.rows == "previous" else i])
        return study

    def check(self, cfg, echo) -> None:
        """Rungs that cannot act, rungs that repeat another."""
        notes = ladder_notes(cfg)
        echo("ladder check: " + ("every rung's change can act in its regime and no two rungs are identical"
                                 if not notes else f"{len(notes)} finding(s)"))
        for note in notes:
            echo(f"  ! {note}")

    def total_rows(self, cfg) -> int:
        return len(cfg.rows())

    def row_counts(self, study, cfg) -> tuple[list, dict]:
        """(trials of its rows, rows by state): a row never queued counts as INTERRUPTED."""
        from grpolab.studies.rows import ROW_ATTR, row_states
        trials = [t for t in study.get_trials(deepcopy=False) if ROW_ATTR in t.user_attrs]
        states = list(row_states(study, cfg).values())
        count = {name: states.count(name) for name in ("COMPLETE", "RUNNING", "WAITING", "FAIL", "INTERRUPTED")}
        count["INTERRUPTED"] += states.count("MISSING")
        return trials, count

    def open_rows(self, study, cfg, final: dict) -> tuple[int, list[str]]:
        from grpolab.studies.rows import row_states
        rows = [f"{k} ({v.lower()})" for k, v in row_states(study, cfg).items() if v not in ("COMPLETE", "FAIL")]
        return len(rows), rows

    def pending(self, study, cfg) -> bool:
        from optuna.trial import TrialState
        return bool(study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))

    def budget_spent(self, study, cfg) -> bool:
        return False   # a worker stops when no row waits (trials.run_one_trial)

    def trial_experiment(self, cfg, trial) -> tuple[dict, dict]:
        """The queued row the trial took: its rung and seed, from the parameters it was queued with."""
        from grpolab.studies.rows import ROW_ATTR
        rung = trial.suggest_int("rung", 0, len(cfg.rungs) - 1)
        row_seed = int(trial.user_attrs.get(ROW_ATTR, "s-1").rsplit("-s", 1)[-1])
        if row_seed in cfg.added_seeds:   # enqueued by studies.enqueue_missing_rows as added_seed
            seed = trial.suggest_int("added_seed", 0, ADDED_SEED_MAX)
        else:
            seed = trial.suggest_categorical("seed", [s for s in cfg.seeds if s not in cfg.added_seeds])
        return cfg.rung_experiment(rung, seed), {"rung": rung, "rung_name": cfg.rungs[rung].name, "seed": seed}

    def run_name(self, cfg, trial_number: int, labels: dict) -> str:
        return ladder_run_name(labels["rung"], labels["rung_name"], labels["seed"])

    def reference_experiment(self, cfg, seed: int) -> dict:
        """The first rung: a row's method is named relative to it (``naive_grpo + eps_high=0.28``)."""
        return cfg.rung_experiment(0, seed)

    def row_experiments(self, cfg) -> list[dict]:
        return [cfg.rung_experiment(i, cfg.seeds[0]) for i in range(len(cfg.rungs))]

    def first_row(self, cfg) -> dict:
        return cfg.rung_experiment(0, cfg.seeds[0])

    def plan_rows(self, cfg, budget_keys) -> tuple[list, list[str]]:
        shapes = [(f"r{i} {rung.name}", len(cfg.seeds), cfg.rung_experiment(i, cfg.seeds[0]))
                  for i, rung in enumerate(cfg.rungs)]
        notes = [f"ladder check: {n}" for n in ladder_notes(cfg)] or [
            "ladder check: every rung's change can act in its regime and no two rungs are identical"]
        return shapes, notes

    def plan_shape(self, plan) -> str:
        return f"{len(plan.rows)} rungs x {plan.seeds} seeds"


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
                        parse_mechanism(item.get("mechanism"), f"rungs[{i}].mechanism", ("this", "previous"),
                                        check_window_metric),
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
        cfg = validate_experiment(study.rung_experiment(i, study.seeds[0]), f"rungs[{i}]")
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


register(LadderStudy())
