"""StudyCommon: what the kinds share. Its defaults are a study of trials: each worker asks for a
new trial until ``n_trials`` ended (a trial that failed with an error counts; one interrupted
does not), nothing is queued in advance, no sampler or pruner of its own, nothing checked before
it runs. A kind overrides what it does otherwise (ladder.py: fixed rows, queued)."""

from __future__ import annotations

from grpolab.experiment.overrides import apply_overrides

COMMON_KEYS = frozenset({"kind", "name", "description", "base", "seeds", "metric", "objectives", "budget",
                         "row_timeout_s", "deviations", "devices", "plan", "launcher"})


def ended_trials(study) -> list:
    """Trials that used up a place of the budget: every one but those interrupted (FAIL without
    an error: Ctrl-C, SIGTERM, reaped), which are asked again."""
    from optuna.trial import TrialState

    from grpolab.studies.rows import OUTCOME_ATTR
    return [t for t in study.get_trials(deepcopy=False) if t.state != TrialState.FAIL or
            t.user_attrs.get(OUTCOME_ATTR) == "error"]


class StudyCommon:
    name = ""
    keys = COMMON_KEYS
    seeds_on_demand = False
    queued_rows = False
    paired_rungs = False
    optuna_panels = False

    def check(self, cfg, echo) -> None:
        """Say what the file's rows cannot do, before anything runs (nothing by default)."""

    def total_rows(self, cfg) -> int:
        return cfg.n_trials

    def row_counts(self, study, cfg) -> tuple[list, dict]:
        """(its trials, rows by state): PRUNED counts as COMPLETE; a FAIL is FAIL when it recorded
        an error, INTERRUPTED otherwise."""
        from optuna.trial import TrialState

        from grpolab.studies.rows import OUTCOME_ATTR
        trials = study.get_trials(deepcopy=False)
        count = {s.name: sum(t.state == s for t in trials) for s in TrialState}
        errors = sum(t.state == TrialState.FAIL and t.user_attrs.get(OUTCOME_ATTR) == "error" for t in trials)
        count.update(COMPLETE=count["COMPLETE"] + count["PRUNED"], FAIL=errors, INTERRUPTED=count["FAIL"] - errors)
        return trials, count

    def open_rows(self, study, cfg, final: dict) -> tuple[int, list[str]]:
        """(how many rows did not complete, how to name them) after a run ended."""
        missing = final["total"] - final["done"] - final["failed"]
        return missing, [f"{missing} trial(s)"] if missing > 0 else []

    def pending(self, study, cfg) -> bool:
        return len(ended_trials(study)) < cfg.n_trials

    def budget_spent(self, study, cfg) -> bool:
        return not self.pending(study, cfg)

    def trial_experiment(self, cfg, trial) -> tuple[dict, dict]:
        """(experiment dict, labels) of trial: the base, on the file's seeds in turn."""
        seed = cfg.seeds[trial.number % len(cfg.seeds)]
        data = apply_overrides(cfg.base, [f"seed={seed}"])
        data["name"] = f"{cfg.name}-t{trial.number}"
        return data, {"seed": seed}

    def run_name(self, cfg, trial_number: int, labels: dict) -> str:
        return f"trial {trial_number} · seed {labels['seed']}"

    def reference_experiment(self, cfg, seed: int) -> dict:
        """The experiment a row's method label is written relative to."""
        return cfg.base

    def row_experiments(self, cfg) -> list[dict]:
        """The experiments its rows start from (their generation backends are checked)."""
        return [cfg.base]

    def first_row(self, cfg) -> dict:
        return {**cfg.base, "seed": cfg.seeds[0], "name": cfg.name}

    def prunes(self, cfg) -> bool:
        return False

    def sampler(self, cfg):
        return None

    def pruner(self, cfg):
        return None

    def plan_rows(self, cfg, budget_keys) -> tuple[list, list[str]]:
        """([(shape name, rows, experiment dict)], notes) for ``grpolab study --plan``."""
        return [("each trial", cfg.n_trials, {**cfg.base, "seed": cfg.seeds[0]})], []

    def plan_shape(self, plan) -> str:
        return f"{plan.rows[0].rows} trials"
