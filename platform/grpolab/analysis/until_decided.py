"""Seeds on demand for a ladder, the decision: the planned looks and their level (Bonferroni over
the planned looks), and at each look which rungs are decided. The driver that runs the rows is
studies/until_decided.py; the front doors hand it ``LADDER_LOOKS``."""

from __future__ import annotations

from grpolab.analysis import inference
from grpolab.analysis.ablation import SequentialLooks, ladder_rows, load_results
from grpolab.analysis.ladder_verdicts import rung_verdicts
from grpolab.analysis.verdicts import stops
from grpolab.errors import ConfigError
from grpolab.studies.definition import StudyConfig
from grpolab.studies.study_run import StudyRun
from grpolab.studies.until_decided import Look


class LadderLooks:
    """The ladder's ``LookDecider``: looks at start, start + batch, ..., the cap, each judged at
    level 1 - 0.05/K (``inference.sequential_level``); a rung is open until its verdict stops
    (``verdicts.stops``)."""

    def plan(self, cfg: StudyConfig, max_seeds: int, batch: int) -> tuple[list[int], float]:
        looks = _plan(cfg, max_seeds, batch)
        return looks, inference.sequential_level(0.95, len(looks))

    def judge(self, run: StudyRun, n: int, level: float, looks: list[int]) -> Look:
        cfg_now, study = load_results(run.study.path, run.state, run.storage_url)
        rows = ladder_rows(study, cfg_now)
        rows = rows[rows.seed.isin(cfg_now.seeds[:n])]          # look j judges its first n_j seeds
        sequential = SequentialLooks(level, len(looks), tuple(looks))
        verdicts = [r.verdict for r in rung_verdicts(rows, cfg_now, 0, run.state, sequential)[1]]
        return Look(len(rows), [v.verdict for v in verdicts if v is not None],
                    [i for i, v in enumerate(verdicts, 1) if v is not None and not stops(v)])


LADDER_LOOKS = LadderLooks()


def _plan(cfg, max_seeds: int, batch: int) -> list[int]:
    """The planned looks' seed counts, or why this study cannot add seeds until decided."""
    if not cfg.study_kind.paired_rungs:
        raise ConfigError(f"--until-decided: {cfg.name} is a {cfg.kind}; only ladders have rung verdicts")
    if cfg.objectives[0].smallest_effect is None:
        raise ConfigError(f"--until-decided: {cfg.name} has no smallest_effect for {cfg.objectives[0].metric}: "
                          "nothing can be decided")
    if max_seeds < len(cfg.seeds) or batch < 1:
        raise ConfigError(f"--until-decided needs --max-seeds N >= the study's seeds ({len(cfg.seeds)}) and --batch >= 1")
    return inference.planned_looks(len(cfg.seeds), batch, max_seeds)
