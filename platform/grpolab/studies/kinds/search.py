"""SearchStudy: a space over axes and hyperparameters (conditional via ``when``), a sampler, a
pruner, a trial budget and one or several objectives: each worker asks Optuna's sampler for a
new point until ``n_trials`` trials ended."""

from __future__ import annotations

from grpolab.errors import ConfigError
from grpolab.experiment.overrides import apply_overrides, as_overrides
from grpolab.studies.kinds import register
from grpolab.studies.kinds.common import COMMON_KEYS, StudyCommon
from grpolab.studies.search_space import check_space, suggest
from grpolab.studies.study_config import StudyConfig, validate_experiment


class SearchStudy(StudyCommon):
    name = "search"
    keys = COMMON_KEYS | {"space", "n_trials", "sampler", "pruner"}
    optuna_panels = True

    def parse(self, data: dict, common: dict, path) -> StudyConfig:
        objectives, base, seeds = common["objectives"], common["base"], common["seeds"]
        if len(objectives) > 1 and data.get("pruner"):
            raise ConfigError("pruner: Optuna cannot prune multi-objective studies; remove the pruner or keep one objective")
        space = check_space(data.get("space") or {})
        _check_space_acts(base, space, seeds[0])
        n_trials = data.get("n_trials", 8)
        if not isinstance(n_trials, int) or n_trials < 1:
            raise ConfigError(f"n_trials: expected a positive integer, got {n_trials!r}")
        return StudyConfig(**common, space=space, n_trials=n_trials, sampler=data.get("sampler") or {"name": "tpe", "seed": 0},
                           pruner=data.get("pruner") or {})

    def trial_experiment(self, cfg, trial) -> tuple[dict, dict]:
        """A point sampled from the space, on the file's seeds in turn."""
        point = suggest(trial, cfg.space)
        seed = cfg.seeds[trial.number % len(cfg.seeds)]
        data = apply_overrides(cfg.base, as_overrides(point) + [f"seed={seed}"])
        data["name"] = f"{cfg.name}-t{trial.number}"
        return data, {"seed": seed, **{k: v for k, v in point.items()}}

    def prunes(self, cfg) -> bool:
        return len(cfg.objectives) == 1   # Optuna prunes single-objective searches only

    def sampler(self, cfg):
        import optuna
        name, seed = cfg.sampler.get("name", "tpe"), cfg.sampler.get("seed", 0)
        if name == "tpe":
            return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True)
        if name == "random":
            return optuna.samplers.RandomSampler(seed=seed)
        if name == "nsga2":
            return optuna.samplers.NSGAIISampler(seed=seed)
        raise ConfigError(f"sampler.name: unknown sampler {name!r}; valid: tpe, random, nsga2")

    def pruner(self, cfg):
        import optuna
        if not cfg.pruner:
            return optuna.pruners.NopPruner()
        kw = {k: v for k, v in cfg.pruner.items() if k != "name"}
        if cfg.pruner.get("name", "median") != "median":
            raise ConfigError(f"pruner.name: unknown pruner {cfg.pruner.get('name')!r}; valid: median")
        return optuna.pruners.MedianPruner(**kw)

    def plan_rows(self, cfg, budget_keys) -> tuple[list, list[str]]:
        shapes, _ = super().plan_rows(cfg, budget_keys)
        moved = sorted(k for k in cfg.space if k in budget_keys)
        return shapes, [f"the search space changes {', '.join(moved)}: each trial is sized at the base values"] if moved else []


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
            validate_experiment(experiment, f"space.{key}={value!r}")


register(SearchStudy())
