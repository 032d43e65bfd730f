"""A study command's time limit (``grpolab study FILE --time-limit MINUTES``): its workers start no
row expected to end after the limit, and the rows left wait for the next run of the same command.

It bounds one command, not the study: the seed plan and its looks stay as registered, and which
rows run is decided by time alone, never by their results (a look not complete is not judged).
The coordinator hands the limit to its own workers with their go word (processes.release) or
as an argument (its in-process worker), so another command on the same study is never bound by it.
Detail: docs/studies.md, "The main job: make run".
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:   # the command reads TimeLimit before any store is opened: Optuna is imported where used
    import optuna

_now = time.time   # the one clock the limit reads (a test may replace it)


@dataclass(frozen=True)
class TimeLimit:
    """``claim_until``: no row starts unless ``now + typical_row_seconds <= claim_until``;
    ``started``: the command's start, after which completed rows time the typical row."""
    claim_until: float
    started: float

    @classmethod
    def of(cls, minutes: float | None, started: float) -> TimeLimit | None:
        return None if minutes is None else cls(float(started) + 60.0 * float(minutes), float(started))

    def word(self) -> str:
        return f"{float(self.claim_until)!r} {float(self.started)!r}"   # plain floats round-trip exactly

    @classmethod
    def parse(cls, word: str) -> TimeLimit | None:
        """The limit a go word carries (``word()``), or None for a bare ``go``."""
        return cls(*map(float, word.split())) if word.strip() else None


def typical_row_seconds(study: optuna.Study, since: float) -> float:
    """Median wall time of the rows completed since ``since`` (this command's own), else of every
    complete row of the study (another machine's, maybe); 0 before any row completed, so that the
    first rows always start and something is measured."""
    from optuna.trial import TrialState
    complete = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
                if t.datetime_complete and t.datetime_start]
    recent = [t for t in complete if t.datetime_complete.timestamp() >= since]
    durations = sorted((t.datetime_complete - t.datetime_start).total_seconds() for t in recent or complete)
    return durations[len(durations) // 2] if durations else 0.0


def row_fits(study: optuna.Study, limit: TimeLimit) -> bool:
    """Whether a row started now is expected to end within the limit (by the typical row's time)."""
    return _now() + typical_row_seconds(study, limit.started) <= limit.claim_until


def completed_since(study: optuna.Study, since: float) -> int:
    """Rows (a search: trials, pruned ones included) that ended well since ``since``."""
    from optuna.trial import TrialState
    return sum(1 for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
               if t.datetime_complete and t.datetime_complete.timestamp() >= since)
