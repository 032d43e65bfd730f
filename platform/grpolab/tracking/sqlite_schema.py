"""A fresh SQLite tracking store created from MLflow's migrated schema, not by migrating.

MLflow creates an empty SQLite store by running every alembic migration since its first schema
(~50, several rebuilding tables): 1.9-2.4 CPU-s per store on the 2-core test machine. The schema
they end at, for the pinned MLflow, is shipped as SQL text (``mlflow_sqlite_schema.sql``: SQLite's
own dump of a store MLflow migrated, alembic head included), and a new store is created from it in
0.04 s. MLflow then opens it as any store at head. With another MLflow version installed than the
one the file was dumped from, a warning line says so and MLflow migrates as usual
(``python -m grpolab.tracking.sqlite_schema`` rewrites the file; tests/tracking/test_sqlite_schema.py fails
until it does).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
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
    """What a dump holds, independent of order: every statement, with a table's columns and
    constraints sorted (MLflow's migrations rebuild tables with constraints in set order, so two
    migrated stores list them differently) and its options after the body kept."""
    statements = set()
    for statement in _statements(dump):
        if statement.startswith("CREATE TABLE"):
            head, rest = statement.split("(", 1)
            body, options = rest.rsplit(")", 1)
            statements.add(f"{head.strip()} ({', '.join(sorted(_items(body)))}){options}")
        else:
            statements.add(statement)
    return statements


def _statements(dump: str) -> list[str]:
    """The dump's complete SQL statements, whitespace-normalised, comments left out (a trigger's
    body holds statements of its own: a statement ends where SQLite says it is complete)."""
    out, pending = [], ""
    for line in dump.splitlines():
        if line.startswith("--"):
            continue
        pending += line + "\n"
        if sqlite3.complete_statement(pending):
            out.append(" ".join(pending.split()))
            pending = ""
    return out + ([" ".join(pending.split())] if pending.strip() else [])


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
    """Create the store ``db`` from the shipped schema when it does not exist yet; True if it did.
    Written under a temporary name and linked into place: a reader never sees a half-made store,
    and of two processes creating it at once one store wins (a link fails where the name exists; a
    rename would replace a store already in use). Where it cannot (another MLflow than the schema's,
    a file system without hard links), it says so on stderr once and MLflow migrates a new store."""
    import mlflow
    if db.exists():
        return False
    if shipped_version() != mlflow.__version__:
        _warn_once(f"grpolab's SQLite schema is MLflow {shipped_version()}'s, MLflow {mlflow.__version__} is "
                   "installed: MLflow migrates each new store (seconds; python -m grpolab.tracking.sqlite_schema "
                   "rewrites the schema)")
        return False
    return link_new_store(db)


def link_new_store(db: Path) -> bool:
    """The schema written to a new file beside ``db`` (the umask's permissions, as SQLite makes a
    store) and linked to ``db``; False, with nothing changed, when ``db`` exists by then."""
    db.parent.mkdir(parents=True, exist_ok=True)
    partial = db.parent / f".mlflow-{os.getpid()}-{secrets.token_hex(4)}.db"
    os.close(os.open(partial, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
    try:
        with contextlib.closing(sqlite3.connect(partial)) as connection:
            connection.executescript(SCHEMA_FILE.read_text())
        os.link(partial, db)
    except FileExistsError:
        return False
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
            raise
        _warn_once(f"{db.parent}: this file system makes no hard links ({exc.strerror}): MLflow migrates "
                   "each new store there (seconds)")
        return False
    finally:
        partial.unlink()
    return True


_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        print(f"warning: {message}", file=sys.stderr, flush=True)


if __name__ == "__main__":   # rewrite the shipped schema for the installed MLflow
    SCHEMA_FILE.write_text(migrated_dump())
    print(f"{SCHEMA_FILE}: MLflow {shipped_version()}", file=sys.stderr)
