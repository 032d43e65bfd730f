"""One rule decides whether a trial's holder is gone (``holders.holder_gone``): the reaper that
hands a row back and the worker that would continue its interrupted run both read it."""

import os
import subprocess
import sys
from datetime import datetime
from types import SimpleNamespace

import pytest

from grpolab.studies import holders, resume
from grpolab.studies.holders import HEARTBEAT_ATTR, WORKER_ATTR, holder_gone, host_identity, worker_record
from grpolab.studies.rows import RUN_ATTR

NOW, GRACE = 10_000.0, 120.0


def _trial(worker=None, heartbeat=None, start=None, run_id="run-a"):
    attrs = {RUN_ATTR: run_id}
    if worker is not None:
        attrs[WORKER_ATTR] = worker
    if heartbeat is not None:
        attrs[HEARTBEAT_ATTR] = heartbeat
    return SimpleNamespace(user_attrs=attrs, datetime_start=start and datetime.fromtimestamp(start))


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


ELSEWHERE = {"host": "other-host/boot/ns", "pid": 7, "pid_start": "1"}


@pytest.mark.parametrize("trial, gone", [
    (_trial(ELSEWHERE, heartbeat=NOW - 60), False),               # another host, beating within the grace
    (_trial(ELSEWHERE, heartbeat=NOW - 600), True),               # silent for longer than the grace
    (_trial(ELSEWHERE, start=NOW - 60), False),                   # no heartbeat yet: ages from its start
    (_trial(ELSEWHERE, start=NOW - 600), True),
    (_trial(ELSEWHERE), False),                                   # no time to count from: may be working
    (_trial(None, start=NOW - 600), True),                        # never reported its holder
], ids=["beating", "silent", "young", "old_unbeating", "no_clock", "no_worker_record"])
def test_a_holder_elsewhere_is_gone_after_the_grace(trial, gone):
    assert (holder_gone(trial, host_identity(), NOW, GRACE) is not None) is gone


def test_a_holder_on_this_host_is_gone_exactly_when_its_process_is():
    here = host_identity()
    alive = _trial(worker_record(), heartbeat=NOW - 10 * GRACE)   # silent, but this process is alive
    assert holder_gone(alive, here, NOW, GRACE) is None
    reused = _trial({**worker_record(), "pid_start": "0"}, heartbeat=NOW)   # its pid now belongs to a newer process
    assert "is gone" in holder_gone(reused, here, NOW, GRACE)
    dead = _trial({"host": here, "pid": _dead_pid(), "pid_start": None}, heartbeat=NOW)
    assert "is gone" in holder_gone(dead, here, NOW, GRACE)


def test_resume_reads_the_same_rule(monkeypatch):
    """A run is continued only when every earlier holder is gone by ``holder_gone``; this process's
    own earlier trial of the run does not hold it back."""
    monkeypatch.setattr(resume.time, "time", lambda: NOW)
    monkeypatch.setattr(resume, "heartbeat_grace", lambda: GRACE)
    study = SimpleNamespace(trials=[])
    study.get_trials = lambda deepcopy=False: study.trials
    study.trials = [_trial(ELSEWHERE, heartbeat=NOW - 600), _trial(worker_record(), heartbeat=NOW),
                    _trial(ELSEWHERE, heartbeat=NOW, run_id="run-b"), _trial(None)]
    assert resume.previous_holder_gone(study, "run-a")
    study.trials.append(_trial(ELSEWHERE, start=NOW - 60))   # no heartbeat yet, started within the grace
    assert not resume.previous_holder_gone(study, "run-a")
    assert holders.process_alive(os.getpid(), holders.process_start(os.getpid()))
