"""A study command's time limit (``--time-limit``, studies/time_limit.py): a worker claims a row
only while the typical row time still ends it within the limit; the rows left wait; the looks of
seeds on demand pause, say so in the table, and the next run of the command goes on from the rows
kept, each row run exactly once. A limit no row fits is an error, not a silent no-op. Real Optuna
journal storage, real training rows and a real worker process; the limit's clock is replaced where
a test needs "the limit passes after the first row" to hold on any machine."""

from __future__ import annotations

import datetime
import subprocess
import sys
import time

import optuna
import yaml
from optuna.distributions import FloatDistribution
from optuna.trial import FrozenTrial, TrialState

import grpolab
from conftest import tiny_two_rung_ladder
from grpolab.studies import time_limit
from grpolab.studies.processes import release
from grpolab.studies.time_limit import TimeLimit, row_fits, typical_row_seconds


def _study_with_rows(rows: list[tuple[float, float]]) -> optuna.Study:
    """An Optuna study holding one COMPLETE trial per (seconds long, seconds ago it ended), and one FAIL
    trial of 1000 s (a failed row's time is not a row time)."""
    study = optuna.create_study(storage=optuna.storages.InMemoryStorage())
    now = datetime.datetime.now()
    for (seconds, ago), state in [*((r, TrialState.COMPLETE) for r in rows), ((1000.0, 0.0), TrialState.FAIL)]:
        end = now - datetime.timedelta(seconds=ago)
        study.add_trial(FrozenTrial(number=0, trial_id=0, state=state, value=0.5 if state == TrialState.COMPLETE else None,
                                    datetime_start=end - datetime.timedelta(seconds=seconds), datetime_complete=end,
                                    params={"x": 0.0}, distributions={"x": FloatDistribution(0, 1)}, user_attrs={},
                                    system_attrs={}, intermediate_values={}))
    return study


def test_a_row_is_claimed_only_while_the_typical_row_time_still_fits_the_limit():
    now = time.time()
    study = _study_with_rows([(10.0, 0.0), (20.0, 0.0), (300.0, 0.0)])
    assert typical_row_seconds(study, since=now - 1000) == 20.0           # the median of complete rows only
    assert row_fits(study, TimeLimit(now + 60, now - 1000))               # 20 s fits in 60 s
    assert not row_fits(study, TimeLimit(now + 15, now - 1000))           # 20 s does not fit in 15 s
    # this command's rows time the typical row; before any of them, every row the study holds does
    mixed = _study_with_rows([(100.0, 5000.0), (100.0, 5000.0), (100.0, 5000.0), (10.0, 0.0)])
    assert typical_row_seconds(mixed, since=now - 60) == 10.0
    assert typical_row_seconds(mixed, since=now + 60) == 100.0
    fresh = _study_with_rows([])
    assert typical_row_seconds(fresh, since=now) == 0.0 and row_fits(fresh, TimeLimit(now + 5, now))   # the first rows start
    assert TimeLimit.of(None, now) is None and TimeLimit.of(2, now) == TimeLimit(now + 120, now)
    assert TimeLimit.parse(TimeLimit(now + 120, now).word()) == TimeLimit(now + 120, now) and TimeLimit.parse("") is None


def test_a_worker_process_gets_its_coordinators_limit_with_the_go_word():
    """Only this command's workers read its limit: it rides on the word that releases them."""
    worker = subprocess.Popen([sys.executable, "-c", "from grpolab.studies.processes import wait_for_go; "
                               "print(repr(wait_for_go(preload=False)))"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    limit = TimeLimit(1_900_000_000.25, 1_899_999_000.5)
    release([worker], go=True, limit=limit)
    out = worker.stdout.read()
    assert worker.wait(timeout=60) == 0 and TimeLimit.parse(eval(out)) == limit
    plain = subprocess.Popen(worker.args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    release([plain], go=True)
    assert plain.stdout.read().strip() == "''" and plain.wait(timeout=60) == 0


def test_a_time_limit_pauses_the_looks_and_the_next_run_goes_on_from_the_rows_kept(tmp_path, shared_state, capsys,
                                                                                    monkeypatch):
    """A limit no row fits ends the command non-zero with nothing run; a limit that passes after the
    first row (its clock jumps then) leaves 3 of look 1's 4 rows waiting, ends 0 saying why, and the
    plan and its table say the looks are paused. The same command without a limit then runs each
    row exactly once and the pause is gone."""
    from grpolab.analysis.ablation import load_results
    from grpolab.studies.storage import SEQUENTIAL_ATTR
    path = tmp_path / "time_limited.yaml"
    path.write_text(yaml.safe_dump(tiny_two_rung_ladder(name="time_limited", seeds=[0, 1])))
    looks = dict(state=shared_state, workers=1, until_decided=True, max_seeds=3, batch=1)

    none_fits = grpolab.study(path, time_limit=1e-6, **looks)
    assert not none_fits.complete
    assert "no row fitted in the time limit (1e-06 min) and none ran; 4 row(s) wait" in capsys.readouterr().err
    _, study = load_results(str(path), shared_state, None)
    assert [t.state for t in study.trials] == [TrialState.WAITING] * 4 and "paused" not in study.user_attrs[SEQUENTIAL_ATTR]

    clock = iter([time.time()])   # the first claim reads the real time; every later one, a day on
    monkeypatch.setattr(time_limit, "_now", lambda: next(clock, time.time() + 86400))
    first = grpolab.study(path, time_limit=60, **looks)
    err = capsys.readouterr().err
    assert not first.complete
    assert "the time limit ended this run with 3 row(s) waiting; run the same command again to go on" in err
    assert "paused during look 1/2 at 2 seeds by this command's time limit" in err
    _, study = load_results(str(path), shared_state, None)
    assert sorted(t.state.name for t in study.trials) == ["COMPLETE"] + ["WAITING"] * 3
    assert study.user_attrs[SEQUENTIAL_ATTR]["paused"].startswith("paused during look 1/2 at 2 seeds")
    assert "paused during look 1/2 at 2 seeds" in first.table()

    monkeypatch.setattr(time_limit, "_now", time.time)
    second = grpolab.study(path, **looks)
    assert second.complete
    _, study = load_results(str(path), shared_state, None)
    assert "paused" not in study.user_attrs[SEQUENTIAL_ATTR] and "paused" not in second.table()
    rows = [t.user_attrs["row"] for t in study.trials]
    assert all(t.state == TrialState.COMPLETE for t in study.trials) and len(rows) == len(set(rows)) >= 4
