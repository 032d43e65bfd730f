"""A study command's time limit (``grpolab study FILE --time-limit MINUTES``): its workers start no
row that would end after the limit, and the rows left wait for the next run of the same command.

The limit bounds one command on one machine, not the study: the seed plan, its looks and their
level stay as registered, and a later run goes on from the rows kept. Which rows run is decided
by time alone, never by their results, so a look that ends early is simply not judged yet
(``analysis.ladder_verdicts`` judges only complete looks).

The coordinator writes the limit on the study (``CLAIM_UNTIL_ATTR``, seconds since the epoch;
None: no limit), so every worker reads the same limit from the storage: local processes, the
coordinator's own loop and cluster jobs alike. A worker claims a row only while

    now + typical_row_seconds <= claim_until

where ``typical_row_seconds`` is the median wall time of the study's complete rows (0 before any
completed: the first rows always start, or nothing would ever be measured).
"""

from __future__ import annotations

import time

import optuna
from optuna.trial import TrialState

CLAIM_UNTIL_ATTR = "grpolab_claim_until"


def set_claim_until(study: optuna.Study, claim_until: float | None) -> None:
    """This run's limit (None: none), replacing what an earlier run of the command set."""
    if study.user_attrs.get(CLAIM_UNTIL_ATTR) != claim_until:
        study.set_user_attr(CLAIM_UNTIL_ATTR, claim_until)


def typical_row_seconds(study: optuna.Study) -> float:
    """Median wall time of the study's complete rows; 0 when none completed."""
    durations = sorted((t.datetime_complete - t.datetime_start).total_seconds()
                       for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
                       if t.datetime_complete and t.datetime_start)
    return durations[len(durations) // 2] if durations else 0.0


def past_time_limit(study: optuna.Study) -> bool:
    """Whether a row started now would end after the limit the study holds (its current
    coordinator wrote it); False without a limit."""
    claim_until = study.user_attrs.get(CLAIM_UNTIL_ATTR)
    if claim_until is None:
        return False
    return time.time() + typical_row_seconds(study) > float(claim_until)


def waiting_rows(study: optuna.Study) -> int:
    return len(study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))


def limit_text(minutes: float) -> str:
    return f"the time limit of {minutes:g} min (--time-limit)"
