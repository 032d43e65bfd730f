"""A fresh SQLite tracking store created from MLflow's migrated schema, not by migrating.

MLflow creates an empty SQLite store by running every alembic migration since its first schema
(~50, several rebuilding tables): 1.9-2.4 CPU-s per store on the 2-core test machine. The schema
they end at, for the pinned MLflow, is shipped as SQL text (``mlflow_sqlite_schema.sql``: SQLite's
own dump of a store MLflow migrated, alembic head included), and a new store is created from it in
0.04 s. MLflow then opens it as any store at head. With another MLflow version installed than the
one the file was dumped from, MLflow migrates as usual (``python -m grpolab.tracking.sqlite_schema``
rewrites the file; tests/test_sqlite_schema.py fails until it does).
"""

from __future__ import annotations

import os
import sqlite3
import sys
import tempfile
from pathlib import Path

SCHEMA_FILE = Path(__file__).with_name("mlflow_sqlite_schema.sql")
_HEADER = "-- MLflow {version}: SQLite dump of an empty store after every migration\n"


def migrated_dump() -> str:
    """The dump of an empty store that MLflow itself created and migrated (seconds)."""
    import mlflow
    import sqlalchemy
    from mlflow.store.db.utils import _initialize_tables
    with tempfile.TemporaryDirectory() as folder:
        db = Path(folder) / "mlflow.db"
        engine = sqlalchemy.create_engine(f"sqlite:///{db}")
        _initialize_tables(engine)
        engine.dispose()
        with sqlite3.connect(db) as connection:
            body = "\n".join(connection.iterdump())
    return _HEADER.format(version=mlflow.__version__) + body + "\n"


def schema_of(dump: str) -> set[str]:
    """What a dump defines, independent of order: each CREATE statement with a table's columns and
    constraints sorted (MLflow's migrations rebuild tables with constraints in set order, so two
    migrated stores list them differently), and the alembic revision; other rows are data."""
    statements = set()
    for line in _statements(dump):
        if line.startswith("CREATE TABLE"):
            head, body = line.split("(", 1)
            statements.add(head.strip() + " (" + ", ".join(sorted(_items(body.rsplit(")", 1)[0]))) + ")")
        elif line.startswith(("CREATE", 'INSERT INTO "alembic_version"')):
            statements.add(" ".join(line.split()))
    return statements


def _statements(dump: str) -> list[str]:
    """The dump's statements (a CREATE TABLE spans lines), comments left out."""
    text = "\n".join(line for line in dump.splitlines() if not line.startswith("--"))
    return [" ".join(part.split()) for part in text.split(";\n") if part.strip()]


def _items(body: str) -> list[str]:
    """A table body's comma-separated items at parenthesis depth 0."""
    items, depth, current = [], 0, []
    for char in body:
        depth += char == "("
        depth -= char == ")"
        if char == "," and depth == 0:
            items.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    items.append("".join(current).strip())
    return [item for item in items if item]


def shipped_version() -> str | None:
    """The MLflow version the shipped schema was dumped from (None: no file)."""
    if not SCHEMA_FILE.exists():
        return None
    first = SCHEMA_FILE.read_text().split("\n", 1)[0]
    return first.removeprefix("-- MLflow ").split(":", 1)[0]


def create_from_schema(db: Path) -> bool:
    """Create the store ``db`` from the shipped schema when it does not exist yet and the schema is
    the installed MLflow's; True if it did. Written under a temporary name and linked into place:
    a reader never sees a half-made store, and of two processes creating it at once one store wins
    (a link fails where the name exists; a rename would replace a store already in use)."""
    import mlflow
    if db.exists() or shipped_version() != mlflow.__version__:
        return False
    db.parent.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(prefix=".mlflow-", suffix=".db", dir=db.parent)
    os.close(fd)
    try:
        with sqlite3.connect(partial) as connection:
            connection.executescript(SCHEMA_FILE.read_text())
        connection.close()
        os.link(partial, db)
    except FileExistsError:
        return False
    finally:
        os.unlink(partial)
    return True


if __name__ == "__main__":   # rewrite the shipped schema for the installed MLflow
    SCHEMA_FILE.write_text(migrated_dump())
    print(f"{SCHEMA_FILE}: MLflow {shipped_version()}", file=sys.stderr)
