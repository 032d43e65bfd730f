"""A study storage on PostgreSQL outlives a restart of its server: the first call after a restart
(every pooled connection cut) and a call made while the server is down (it waits for it) succeed,
and a storage opened while the server is down still fails at once. A real server of the test's
own, restarted with pg_ctl (the session's server is shared by other tests)."""

import glob
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from conftest import _start_on_a_free_port
from grpolab.studies.storage import open_storage


@pytest.fixture
def own_postgres():
    """(SQLAlchemy URL, pg_ctl(*args)) of a fresh PostgreSQL server on 127.0.0.1."""
    bins = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
    if not bins:
        pytest.fail("PostgreSQL is not installed: `make test` installs it (apt-get install postgresql)")
    bin_dir, root = Path(bins[-1]), Path(tempfile.mkdtemp(prefix="grpolab-pg-restart-"))
    data, sock, log = root / "data", root / "sock", root / "log"
    sock.mkdir()
    as_pg = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    for path in (root, sock) if as_pg else ():   # a 0700 root folder is closed to the postgres user
        shutil.chown(path, "postgres")
    subprocess.run(as_pg + [str(bin_dir / "initdb"), "-D", str(data), "-U", "grpolab", "--auth=trust"], check=True,
                   capture_output=True)
    port = _start_on_a_free_port(as_pg, bin_dir, data, sock, log)

    def pg_ctl(*args):
        subprocess.run(as_pg + [str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", *args], check=True,
                       capture_output=True)
    yield f"postgresql+psycopg2://grpolab@127.0.0.1:{port}/postgres", pg_ctl, port, sock
    subprocess.run(as_pg + [str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"], capture_output=True)
    shutil.rmtree(root, ignore_errors=True)


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

    pg_ctl("stop", "-m", "fast")
    started = time.monotonic()
    with pytest.raises(Exception, match="refused|could not connect"):   # a storage never reached: no waiting
        open_storage(url)
    assert time.monotonic() - started < 10
    print(f"\nSTORE_RESTART waited_s={waited:.1f} (server down 3 s)")
