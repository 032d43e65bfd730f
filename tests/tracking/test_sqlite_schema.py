"""A fresh SQLite tracking store is created from the shipped schema (grpolab.tracking.sqlite_schema):
the schema is the one MLflow's own migrations end at for the installed MLflow, and MLflow opens and
uses a store made from it as its own."""

import os
import sqlite3

import mlflow
import mlflow.store.db.utils
from mlflow.tracking import MlflowClient

from grpolab.tracking import sqlite_schema
from grpolab.tracking.stores import init_tracking_store


def _dump(db) -> str:
    with sqlite3.connect(db) as connection:
        return "\n".join(connection.iterdump())


def test_the_shipped_schema_is_what_the_installed_mlflow_migrates_to():
    assert sqlite_schema.shipped_version() == mlflow.__version__
    shipped = sqlite_schema.schema_of(sqlite_schema.SCHEMA_FILE.read_text())
    migrated = sqlite_schema.schema_of(sqlite_schema.migrated_dump())
    assert shipped == migrated, ("the shipped schema is stale (python -m grpolab.tracking.sqlite_schema rewrites it): "
                                 f"{sorted(shipped ^ migrated)[:4]}")
    head = mlflow.store.db.utils._get_latest_schema_revision()
    assert f"INSERT INTO \"alembic_version\" VALUES('{head}');" in shipped
    assert sum(s.startswith("CREATE TABLE") for s in shipped) > 30 and any(s.startswith("CREATE TRIGGER") for s in shipped)
    assert any(s.startswith('INSERT INTO "workspaces"') for s in shipped)   # a row a migration inserts


def test_the_comparison_sees_a_changed_constraint_row_or_trigger():
    text = sqlite_schema.SCHEMA_FILE.read_text()
    shipped = sqlite_schema.schema_of(text)
    assert sqlite_schema.schema_of(text.replace("'active', 'deleted'", "'active'", 1)) != shipped
    assert sqlite_schema.schema_of(text.replace("Default workspace", "Other workspace")) != shipped
    assert sqlite_schema.schema_of(text.replace("END;", "", 1)) != shipped


def test_a_fresh_state_gets_its_store_from_the_schema_and_mlflow_uses_it_without_migrating(tmp_path, monkeypatch):
    state = tmp_path / "state"
    assert sqlite_schema.create_from_schema(state / "mlflow.db") is True
    db = state / "mlflow.db"
    assert sqlite_schema.schema_of(_dump(db)) == sqlite_schema.schema_of(sqlite_schema.SCHEMA_FILE.read_text())
    assert os.stat(db).st_mode & 0o777 == 0o666 & ~_umask()          # as SQLite itself makes a store
    assert [p.name for p in state.iterdir()] == ["mlflow.db"]        # no partial file left behind

    def no_migration(engine):
        raise AssertionError("MLflow migrated a store the schema should have created")
    monkeypatch.setattr(mlflow.store.db.utils, "_initialize_tables", no_migration)
    fresh = tmp_path / "fresh"
    uri = init_tracking_store(fresh)                                  # through the state folder's opening
    assert uri == f"sqlite:///{(fresh / 'mlflow.db').resolve()}"
    client = MlflowClient(uri)
    assert [e.name for e in client.search_experiments()] == ["Default"]   # MLflow's own first open
    run = client.create_run(client.create_experiment("e"))
    client.log_metric(run.info.run_id, "m", 0.5, step=3)
    assert [(p.step, p.value) for p in client.get_metric_history(run.info.run_id, "m")] == [(3, 0.5)]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_store_that_appears_first_is_never_replaced(tmp_path):
    db = tmp_path / "mlflow.db"
    db.write_bytes(b"another process's store")
    assert sqlite_schema.create_from_schema(db) is False
    assert sqlite_schema.link_new_store(db) is False                 # the name taken between check and link
    assert db.read_bytes() == b"another process's store"
    assert [p.name for p in tmp_path.iterdir()] == ["mlflow.db"]


def test_another_mlflow_than_the_schemas_is_said_and_left_to_migrate(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(mlflow, "__version__", "0.0.1")
    assert sqlite_schema.create_from_schema(tmp_path / "mlflow.db") is False
    assert not (tmp_path / "mlflow.db").exists()
    err = capsys.readouterr().err
    assert err.startswith("warning: ") and "MLflow 0.0.1 is installed" in err and "python -m grpolab" in err
