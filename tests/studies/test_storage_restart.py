"""A study storage on PostgreSQL outlives a restart of its server: the first call after a restart
(every pooled connection cut) and a call made while the server is down (it waits for it) succeed,
a storage opened while the server is down still fails at once, and one whose server stays away
past its patience fails at once after that wait until it answers again. A real server of the test's
own (conftest.own_postgres), restarted with pg_ctl (the session's server is shared by other tests)."""

import threading
import time

import optuna
import pytest
import sqlalchemy
from optuna.trial import TrialState

from grpolab.studies import storage_loss
from grpolab.studies.storage import open_storage, rides_out_restarts


def test_a_postgresql_storage_outlives_a_restart_of_its_server(own_postgres):
    url, pg_ctl, port, sock = own_postgres
    study = optuna.create_study(study_name="restarted", storage=open_storage(url))
    trial = study.ask()
    pg_ctl("stop", "-m", "fast")                           # cuts every pooled connection; back in 3 s
    restart = threading.Timer(3.0, pg_ctl, ("start", "-o", f"-p {port} -k {sock} -c listen_addresses=127.0.0.1"))
    restart.start()
    started = time.monotonic()
    trial.set_user_attr("while_down", 1)                   # failed at once with StorageInternalError before
    waited = time.monotonic() - started
    restart.join()
    assert 3.0 <= waited < 60, waited
    pg_ctl("restart", "-m", "fast")
    study.tell(trial, 1.0)                                 # the first call after a restart
    (stored,) = optuna.load_study(study_name="restarted", storage=open_storage(url)).trials
    assert (stored.state, stored.value, stored.user_attrs) == (TrialState.COMPLETE, 1.0, {"while_down": 1})

    engine = sqlalchemy.create_engine(url, pool_pre_ping=True)
    rides_out_restarts(engine, url, patience=2.0)
    engine.connect().close()                               # a storage that has answered

    pg_ctl("stop", "-m", "fast")
    started = time.monotonic()
    with pytest.raises(Exception, match="refused|could not connect"):   # a storage never reached: no waiting
        open_storage(url)
    assert time.monotonic() - started < 10

    gone = []                                              # (seconds, error) of each call while it stays away
    for _ in range(2):
        started = time.monotonic()
        with pytest.raises(sqlalchemy.exc.OperationalError, match="refused"):
            engine.connect()
        gone.append(time.monotonic() - started)
    assert gone[0] >= 2.0 and gone[1] < 1.0, gone          # its patience once, then no wait at each later call
    pg_ctl("start", "-o", f"-p {port} -k {sock} -c listen_addresses=127.0.0.1")
    with engine.connect() as conn:                         # back: it connects, and would wait again
        assert conn.execute(sqlalchemy.text("select 1")).scalar() == 1
    assert url not in storage_loss._given_up
    print(f"\nSTORE_RESTART waited_s={waited:.1f} (server down 3 s); gone for good: {gone[0]:.1f} s, "
          f"then {gone[1]:.2f} s")
