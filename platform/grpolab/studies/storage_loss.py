"""A database study storage that stops answering: ridden out for its patience (a restart, a
fail-over), then given up in every process of the study at once.

Patience: ``GRPOLAB_STORAGE_PATIENCE`` seconds (default 60), for a new connection and for a
statement the server cut alike. Only a process that waited it out gives the storage up, and it
leaves a mark in the state folder that every other process of the study reads, so N workers and
their coordinator end together instead of each waiting again.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import time
from pathlib import Path

from grpolab.errors import ConfigError
from grpolab.signals import raise_if_signalled
from grpolab.tracking.stores import StoreRefused, StoreUnreachable, redact, unreachable_reason

log = logging.getLogger(__name__)

RECONNECT_S = 60.0   # how long a database that has answered may stay away (a restart, a fail-over)
PATIENCE_ENV = "GRPOLAB_STORAGE_PATIENCE"
_given_up: set[str] = set()   # storage URLs found gone for good: their connections are tried once, not waited for
_markers: dict[str, Path] = {}   # storage URL -> the file in the state folder that says it is gone to every process


def reconnect_patience() -> float:
    """Seconds a database storage that has answered may stay away: ``GRPOLAB_STORAGE_PATIENCE``,
    else ``RECONNECT_S``."""
    value = os.environ.get(PATIENCE_ENV)
    if not value:
        return RECONNECT_S
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:
        raise ConfigError(f"{PATIENCE_ENV}: must be a number of seconds >= 0, got {value!r}")
    return seconds


def is_file_storage(url: str) -> bool:
    """A journal or a SQLite file: no server to wait for, so no loss to ride out or share."""
    return url.startswith(("journal:", "sqlite:"))


def study_storage_reason(url: str) -> str | None:
    """stores.unreachable_reason, its refusals (bad input) named as the study storage's."""
    try:
        return unreachable_reason(url)
    except StoreRefused as exc:
        raise StoreRefused(f"study storage {exc}") from None


def rides_out_restarts(engine, url: str = "", patience: float | None = None) -> None:
    """Make ``engine`` wait for its database across a restart instead of failing the caller.

    A restart cuts every pooled connection: ``pool_pre_ping`` finds a cut one before a statement
    uses it and connects again, and a connection that cannot be made yet is tried again each second
    for up to ``patience`` seconds (None: ``reconnect_patience()``). Otherwise a worker's next store
    call after a restart (naming its run, reporting its finished row) fails, and its row is recorded
    failed with an error, which a rerun does not re-queue. Called once the storage has connected
    (RDBStorage's constructor does): an unreachable storage still fails at once.

    A server that stays away longer is gone: once one wait ran out (or ``give_up(url)`` said so, in
    this process or another of the study's: ``share_storage_loss``), every later connection of a
    storage at ``url`` is tried once, so a command that must end (closing what it can) does not
    wait ``patience`` again at each store call, nor in each thread; a connection that succeeds
    again ends that."""
    from sqlalchemy import event
    patience = reconnect_patience() if patience is None else patience

    @event.listens_for(engine, "do_connect")
    def connect(dialect, connection_record, cargs, cparams):
        deadline, tries = time.monotonic() + patience, 0
        while True:
            try:
                connection = dialect.connect(*cargs, **cparams)
                if storage_gone(url):
                    _answered(url)
                return connection
            except dialect.loaded_dbapi.OperationalError as exc:
                if storage_gone(url):
                    _given_up.add(url)
                    raise
                if time.monotonic() >= deadline:
                    give_up(url)
                    raise
                tries += 1
                if tries == 1:
                    log.warning("study storage unreachable (%s); trying again for up to %.0f s",
                                (str(exc).strip().splitlines() or [type(exc).__name__])[0], patience)
                raise_if_signalled()   # no connection yet, so no transaction to leave open (signals.in_store_library)
                time.sleep(1.0)


def give_up(url: str) -> None:
    """The storage at ``url`` stayed away past a wait of its patience: connections still waiting
    for it stop at their next try, in this process and (once ``share_storage_loss`` named the
    state folder) in every process of the study that shares that folder. A mark that cannot be
    written (a read-only state folder) leaves the others to their own wait."""
    if url:
        _given_up.add(url)
        if url in _markers:
            try:
                _markers[url].touch()
            except OSError as exc:
                log.warning("study storage %s: could not mark it gone for the study's other processes (%s)",
                            redact(url), exc)


def share_storage_loss(url: str, state: Path, fresh: bool = False) -> None:
    """Let the processes of one study learn from each other that the database storage at ``url``
    is gone: a file in the state folder, written by ``give_up`` and read by every connection
    attempt. Its name hashes the URL with its password hidden, so no password leaks into it. ``fresh``
    (the coordinator, once the storage answered at its start): a file left by an earlier command
    is removed."""
    if is_file_storage(url):
        return
    marker = Path(state) / f".study-storage-gone-{hashlib.sha256(redact(url).encode()).hexdigest()[:16]}"
    _markers[url] = marker
    if fresh:
        with contextlib.suppress(OSError):   # an unwritable folder: no mark is written there either
            marker.unlink(missing_ok=True)


def storage_gone(url: str) -> bool:
    """Whether this process or another of the study (``share_storage_loss``) gave the storage up."""
    return url in _given_up or (url in _markers and _markers[url].exists())


def end_if_gone(url: str) -> None:
    """Raise the command's ``StoreUnreachable`` when another process of the study gave the storage
    up and it still does not answer; one that answers again is no longer given up."""
    if not storage_gone(url):
        return
    reason = study_storage_reason(url)
    if reason is not None:
        raise _lost(url, reason)
    _answered(url)


def _answered(url: str) -> None:
    _given_up.discard(url)
    if url in _markers:
        with contextlib.suppress(OSError):
            _markers[url].unlink(missing_ok=True)


def _lost(url: str, reason: str) -> StoreUnreachable:
    return StoreUnreachable(f"study storage {redact(url)}: unreachable ({reason}); the rows it recorded as complete "
                            "are kept there: once it is back (restart it), run the same command again to resume")


def _mid_command_reason(url: str) -> str | None:
    """Why a storage that answered earlier in this command does not answer now. A refusal now (its
    host name gone while its container restarts, a TLS handshake cut short) is a state it may
    leave, so it is waited out like an unreachable one instead of ending the command as bad input."""
    try:
        return study_storage_reason(url)
    except StoreRefused as exc:
        return str(exc)


def _connection_cut(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it wraps: Optuna raises its own error from SQLAlchemy's) is a pooled
    connection cut mid-statement, which a new connection may not meet (a terminated backend, a
    proxy or fail-over dropping it) while the server itself answers."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if getattr(exc, "connection_invalidated", False):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def ride_out_loss(url: str, exc: BaseException) -> bool:
    """After ``exc`` from a database storage: True when what failed may be tried again (the storage
    did not answer but came back within its patience, or it answers and ``exc`` was a connection
    cut mid-statement); False when it answers and ``exc`` is a real error. Raises the command's
    ``StoreUnreachable`` when it stays away for the whole patience (then it is given up for the
    study) or another process of the study gave it up."""
    reason = _mid_command_reason(url)
    if reason is None:
        return _connection_cut(exc)
    patience = reconnect_patience()
    deadline = time.monotonic() + patience
    log.warning("study storage unreachable (%s); waiting for it for up to %.0f s", reason, patience)
    while not storage_gone(url):
        if time.monotonic() >= deadline:
            give_up(url)
            break
        raise_if_signalled()
        time.sleep(1.0)
        answered = _mid_command_reason(url)
        if answered is None:
            return True
        reason = answered
    raise _lost(url, reason) from exc


@contextlib.contextmanager
def storage_loss_ends_command(url: str):
    """An error raised while the database storage at ``url`` cannot be reached, and stays so for
    its patience, ends the command with one line saying so (``StoreUnreachable``, exit 75) instead
    of the store library's error. What the storage recorded before it went away (complete rows) is
    kept in it, and the same command run again once it is back resumes from there. A signal a
    library turned into the error stays the signal; an error while the storage answers (at once or
    within its patience) is raised as it is."""
    try:
        yield
    except StoreUnreachable:
        raise
    except Exception as exc:
        raise_if_signalled(exc)
        if is_file_storage(url):
            raise
        ride_out_loss(url, exc)
        raise


def outlasting_storage_loss(url: str, run):
    """``run()``, run again when it failed because the database storage at ``url`` stopped
    answering for less than its patience (a restart cut the statement a worker waited on to claim
    a row); otherwise as ``storage_loss_ends_command``. ``run`` must be safe to start again: a
    worker's loop is (it claims the next waiting row). A row whose report was cut stays RUNNING
    under this live process, so the reaper hands it back only at the study's row timeout."""
    while True:
        try:
            return run()
        except StoreUnreachable:
            raise
        except Exception as exc:
            raise_if_signalled(exc)
            if is_file_storage(url) or not ride_out_loss(url, exc):
                raise
            cause = exc.__cause__ or exc   # Optuna wraps the driver's error in a message of its own
            log.warning("study storage %s answers again after it cut a statement (%s); going on",
                        redact(url), (str(cause).strip().splitlines() or [type(cause).__name__])[0])
