"""A fresh SQLite tracking store is created from the shipped schema (grpolab.tracking.sqlite_schema):
the schema is the one MLflow's own migrations end at for the installed MLflow, and MLflow opens and
uses a store made from it as its own."""

import sqlite3

import mlflow
import mlflow.store.db.utils
from mlflow.tracking import MlflowClient

from grpolab.tracking import sqlite_schema
from grpolab.tracking.stores import init_tracking_store


def test_the_shipped_schema_is_what_the_installed_mlflow_migrates_to():
    assert sqlite_schema.shipped_version() == mlflow.__version__
    shipped = sqlite_schema.schema_of(sqlite_schema.SCHEMA_FILE.read_text())
    migrated = sqlite_schema.schema_of(sqlite_schema.migrated_dump())
    assert shipped == migrated, ("the shipped schema is stale (python -m grpolab.tracking.sqlite_schema rewrites it): "
                                 f"{sorted(shipped ^ migrated)[:4]}")
    assert len(shipped) > 100 and sum(s.startswith("CREATE TABLE") for s in shipped) > 30


def test_a_fresh_state_gets_its_store_from_the_schema_and_mlflow_uses_it(tmp_path, monkeypatch):
    def no_migration(engine):
        raise AssertionError("MLflow migrated a store the schema should have created")
    monkeypatch.setattr(mlflow.store.db.utils, "_initialize_tables", no_migration)
    state = tmp_path / "state"
    uri = init_tracking_store(state)
    db = state / "mlflow.db"
    assert uri == f"sqlite:///{db.resolve()}" and db.exists()
    assert not list(state.glob(".mlflow-*"))                       # no partial file left behind
    with sqlite3.connect(db) as connection:
        dump = "\n".join(connection.iterdump())
    client = MlflowClient(uri)
    assert [e.name for e in client.search_experiments()] == ["Default"]   # MLflow's own first open
    run = client.create_run(client.create_experiment("e"))
    client.log_metric(run.info.run_id, "m", 0.5, step=3)
    assert [(p.step, p.value) for p in client.get_metric_history(run.info.run_id, "m")] == [(3, 0.5)]
    # the same tables and constraints, alembic at head
    assert sqlite_schema.schema_of(dump) == sqlite_schema.schema_of(sqlite_schema.SCHEMA_FILE.read_text())
    assert dump.count("CREATE TABLE") == sqlite_schema.SCHEMA_FILE.read_text().count("CREATE TABLE")


def test_an_existing_store_is_left_alone(tmp_path):
    db = tmp_path / "mlflow.db"
    db.write_bytes(b"")
    assert sqlite_schema.create_from_schema(db) is False and db.read_bytes() == b""


def test_of_processes_creating_one_store_at_once_one_creates_it_and_none_replaces_it(tmp_path):
    from concurrent.futures import ProcessPoolExecutor
    db = tmp_path / "mlflow.db"
    with ProcessPoolExecutor(4) as pool:
        created = list(pool.map(sqlite_schema.create_from_schema, [db] * 8))
    assert sorted(created) == [False] * 7 + [True]
    assert [p.name for p in tmp_path.iterdir()] == ["mlflow.db"]
    with sqlite3.connect(db) as connection:
        head = mlflow.store.db.utils._get_latest_schema_revision()
        assert connection.execute("select version_num from alembic_version").fetchall() == [(head,)]
