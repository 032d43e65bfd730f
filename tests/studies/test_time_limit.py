"""A study command's time limit (``--time-limit``, studies/time_limit.py): a worker claims a row
only while the median row time measured so far still ends it within the limit; the rows left wait;
the looks of seeds on demand pause, say so in the table, and the next run of the command goes on
from the rows kept, each row run exactly once. Real Optuna journal storage and real training rows."""

from __future__ import annotations

import datetime
import time

import optuna
import yaml
from optuna.distributions import FloatDistribution
from optuna.trial import FrozenTrial, TrialState

import grpolab
from conftest import tiny_two_rung_ladder
from grpolab.studies.time_limit import CLAIM_UNTIL_ATTR, past_time_limit, set_claim_until, typical_row_seconds


def _study_with_rows(seconds: list[float]) -> optuna.Study:
    """An Optuna study holding one COMPLETE trial per duration in ``seconds`` and one FAIL trial of 1000 s
    (a failed row's time is not a row time)."""
    study = optuna.create_study(storage=optuna.storages.InMemoryStorage())
    end = datetime.datetime.now()
    for s, state in [*((s, TrialState.COMPLETE) for s in seconds), (1000.0, TrialState.FAIL)]:
        study.add_trial(FrozenTrial(number=0, trial_id=0, state=state, value=0.5 if state == TrialState.COMPLETE else None,
                                    datetime_start=end - datetime.timedelta(seconds=s), datetime_complete=end,
                                    params={"x": 0.0}, distributions={"x": FloatDistribution(0, 1)}, user_attrs={},
                                    system_attrs={}, intermediate_values={}))
    return study


def test_a_row_is_claimed_only_while_the_median_row_time_still_fits_the_limit():
    study = _study_with_rows([10.0, 20.0, 300.0])
    assert typical_row_seconds(study) == 20.0                       # the median of the complete rows only
    assert not past_time_limit(study)                                # no limit set
    set_claim_until(study, time.time() + 60)
    assert not past_time_limit(study)                                # 20 s fits in 60 s
    set_claim_until(study, time.time() + 15)
    assert past_time_limit(study)                                    # 20 s does not fit in 15 s
    set_claim_until(study, None)                                     # the next run without a limit clears it
    assert study.user_attrs[CLAIM_UNTIL_ATTR] is None and not past_time_limit(study)
    fresh = _study_with_rows([])
    set_claim_until(fresh, time.time() + 5)
    assert typical_row_seconds(fresh) == 0.0 and not past_time_limit(fresh)   # the first rows always start


def test_a_time_limit_pauses_the_looks_and_the_next_run_goes_on_from_the_rows_kept(tmp_path, shared_state, capsys):
    """A limit already spent when the rows are queued: no row starts, the 4 rows of look 1 wait, the
    command ends 0 saying why, and the plan and its table say the looks are paused. The same command
    without a limit then runs each row exactly once and the pause is gone."""
    from grpolab.analysis.ablation import load_results
    from grpolab.studies.storage import SEQUENTIAL_ATTR
    path = tmp_path / "time_limited.yaml"
    path.write_text(yaml.safe_dump(tiny_two_rung_ladder(name="time_limited", seeds=[0, 1])))
    first = grpolab.study(path, state=shared_state, workers=1, until_decided=True, max_seeds=3, batch=1,
                          time_limit=1e-6)
    err = capsys.readouterr().err
    assert not first.complete
    assert "the time limit ended this run with 4 row(s) waiting; run the same command again to go on" in err
    assert "paused during look 1/2 at 2 seeds by this command's time limit" in err
    _, study = load_results(str(path), shared_state, None)
    assert [t.state for t in study.trials] == [TrialState.WAITING] * 4
    assert study.user_attrs[SEQUENTIAL_ATTR]["paused"].startswith("paused during look 1/2 at 2 seeds")
    assert "paused during look 1/2 at 2 seeds" in first.table()

    second = grpolab.study(path, state=shared_state, workers=1, until_decided=True, max_seeds=3, batch=1)
    assert second.complete
    _, study = load_results(str(path), shared_state, None)
    assert "paused" not in study.user_attrs[SEQUENTIAL_ATTR] and "paused" not in second.table()
    rows = [t.user_attrs["row"] for t in study.trials]
    assert all(t.state == TrialState.COMPLETE for t in study.trials) and len(rows) == len(set(rows)) >= 4
    assert study.user_attrs[CLAIM_UNTIL_ATTR] is None
