"""The study storage's shared loss mark (studies/storage_loss.py), without a server: a cut
statement is waited out for the storage's patience before the mark is written, so the mark means
a process waited; a mark already there ends the wait at once; a storage back within the patience
is no loss. The mark's name hides the URL's password, and a state folder that cannot hold it
costs the mark, not the command."""

import time

import pytest

from grpolab.studies import storage_loss
from grpolab.studies.storage_loss import PATIENCE_ENV, give_up, ride_out_loss, share_storage_loss
from grpolab.tracking.stores import StoreUnreachable

URL = "postgresql+psycopg2://u:secret@127.0.0.1:9/x"


@pytest.fixture(autouse=True)
def _forget():
    yield
    storage_loss._given_up.clear()
    storage_loss._markers.clear()


def _answers(monkeypatch, after: int):
    probes = []

    def reason(url):
        probes.append(url)
        return None if len(probes) > after else "Connection refused"
    monkeypatch.setattr(storage_loss, "study_storage_reason", reason)
    return probes


def test_the_mark_is_written_only_after_a_whole_patience(tmp_path, monkeypatch):
    monkeypatch.setenv(PATIENCE_ENV, "2")
    _answers(monkeypatch, after=100)
    share_storage_loss(URL, tmp_path, fresh=True)
    started = time.monotonic()
    with pytest.raises(StoreUnreachable, match="unreachable"):
        ride_out_loss(URL, RuntimeError("cut"))
    assert time.monotonic() - started >= 2.0
    (mark,) = tmp_path.glob(".study-storage-gone-*")
    storage_loss._given_up.clear()                # another process: only the mark tells it
    started = time.monotonic()
    with pytest.raises(StoreUnreachable):
        ride_out_loss(URL, RuntimeError("cut"))
    assert time.monotonic() - started < 1.0       # someone waited already: no second patience


def test_a_storage_back_within_its_patience_is_no_loss(tmp_path, monkeypatch):
    monkeypatch.setenv(PATIENCE_ENV, "30")
    probes = _answers(monkeypatch, after=3)
    share_storage_loss(URL, tmp_path, fresh=True)
    assert ride_out_loss(URL, RuntimeError("cut")) is True
    assert len(probes) == 4 and not list(tmp_path.glob(".study-storage-gone-*"))


def test_the_marks_name_hides_the_password_and_an_unwritable_folder_costs_only_the_mark(tmp_path):
    share_storage_loss(URL, tmp_path / "a")
    share_storage_loss(URL.replace("secret", "other"), tmp_path / "a")
    assert len({str(path) for path in storage_loss._markers.values()}) == 1   # one name: the redacted URL's
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    share_storage_loss(URL, not_a_folder, fresh=True)
    give_up(URL)                                  # no traceback: the others wait out their own patience
    assert URL in storage_loss._given_up


def test_a_patience_that_is_not_a_number_is_bad_input(monkeypatch):
    monkeypatch.setenv(PATIENCE_ENV, "soon")
    with pytest.raises(storage_loss.ConfigError, match=PATIENCE_ENV):
        storage_loss.reconnect_patience()


def test_mid_command_a_refusal_is_waited_out_and_a_cut_connection_on_a_live_storage_is_tried_again(tmp_path,
                                                                                                monkeypatch):
    """Once the storage answered, a refusal (its host name gone while a container restarts) is a state
    it may leave: waited out like an unreachable one. A connection cut mid-statement while the server
    answers (a terminated backend) is tried again; any other error of a live storage is real."""
    monkeypatch.setenv(PATIENCE_ENV, "30")
    probes = []

    def reason(url):
        probes.append(url)
        if len(probes) <= 2:
            raise storage_loss.StoreRefused("could not translate host name: Name or service not known")
        return None
    monkeypatch.setattr(storage_loss, "study_storage_reason", reason)
    share_storage_loss(URL, tmp_path, fresh=True)
    assert ride_out_loss(URL, RuntimeError("cut")) is True and len(probes) == 3

    class Cut(Exception):
        connection_invalidated = True
    wrapped = RuntimeError("optuna: storage error")
    wrapped.__cause__ = Cut("server closed the connection unexpectedly")
    assert ride_out_loss(URL, wrapped) is True
    assert ride_out_loss(URL, ValueError("a bug")) is False
