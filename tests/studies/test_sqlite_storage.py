"""A ``sqlite:`` study storage is a file, as a journal is: never "unreachable" (exit 75), whatever
fails on it. A file that is not a SQLite database, or an Optuna schema it cannot use, is bad
input (exit 2, one line with the real reason); an error on a good file is raised as it is."""

import sqlite3

import optuna
import pytest

from grpolab.studies.storage import open_storage, storage_loss_ends_command
from grpolab.tracking.stores import StoreRefused, StoreUnreachable, check_storage_url, unreachable_reason


def test_a_file_that_is_not_a_database_is_bad_input_not_unreachable(tmp_path):
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not a database at all\n" * 100)
    url = f"sqlite:///{garbage}"
    for check in (check_storage_url, open_storage):
        with pytest.raises(StoreRefused, match="file is not a database") as caught:
            check(url)
        assert not isinstance(caught.value, StoreUnreachable)



def test_an_optuna_schema_it_cannot_use_is_bad_input(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.db'}"
    optuna.create_study(study_name="s", storage=url)
    with sqlite3.connect(tmp_path / "old.db") as db:
        db.execute("update alembic_version set version_num = 'v0.0.1.from-the-future'")
    with pytest.raises(StoreRefused, match="not a usable Optuna storage") as caught:
        open_storage(url)
    assert not isinstance(caught.value, StoreUnreachable)


def test_an_error_on_a_good_sqlite_file_stays_the_error(tmp_path):
    url = f"sqlite:///{tmp_path / 'good.db'}"
    assert unreachable_reason(url) is None        # no driver keyword it refuses ('connect_timeout')
    open_storage(url)
    with pytest.raises(ValueError, match="a bug"):
        with storage_loss_ends_command(url):
            raise ValueError("a bug")
