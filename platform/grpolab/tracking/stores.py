"""The stores a run or study writes to: fail-fast reachability checks, and the setup lock.

Fail fast: before anything is written, every store named by the user (``$MLFLOW_TRACKING_URI``,
``--storage``) is contacted with a short timeout, instead of MLflow's minutes of retries or a
half-initialised database. Either way one line names the URI with its password hidden, and the
exit code tells which: ``StoreUnreachable`` (exit 75, EX_TEMPFAIL: the server does not answer
now, or went away mid-command; restart it and run the same command again) or ``StoreRefused``
(exit 2, bad input: a malformed URL, an unknown kind of storage, a missing driver, a folder that
does not exist or is not writable, a database or user that does not exist, a refused password or
TLS certificate, an HTTP server that is not MLflow's; rerunning does not help).

Detail: docs/runs.md, "grpolab.tracking.stores".
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from grpolab.errors import ConfigError

log = logging.getLogger(__name__)
CONNECT_TIMEOUT_S = 5
# Advisory-lock keys, one per role of a database (advisory locks are scoped to a database):
# fixed, so two coordinators that share a store exclude each other whatever their other URLs are.
ADVISORY_LOCK_KEY = 0x67_72_70_6F_6C_61_62  # "grpolab"
TRACKING_LOCK_KEY, STUDY_LOCK_KEY = ADVISORY_LOCK_KEY, ADVISORY_LOCK_KEY + 1
DATABASE_SCHEMES = ("postgresql", "mysql", "mssql", "oracle")


EX_TEMPFAIL = 75   # sysexits.h: a temporary failure, the same command may succeed later


class StoreRefused(ConfigError):
    """A tracking store or study storage that cannot be used as given (exit 2, bad input)."""


class StoreUnreachable(ConfigError):
    """A tracking server or study storage that does not answer now (exit 75, EX_TEMPFAIL). Found at
    start, nothing is written; gone in the middle of a command (``storage_loss_ends_command``),
    what it recorded stays and the same command resumes from there once it is back."""
    exit_code = EX_TEMPFAIL


# answers no restart changes: the URL or the client's settings name a user, password, database, host,
# option or certificate the server (or the resolver) refuses
_REFUSALS = ("authentication failed", "does not exist", "no password supplied", "access denied", "unknown database",
             "invalid sslmode value", "invalid dsn", "invalid connection option", "no pg_hba.conf entry",
             "server does not support ssl, but ssl was required", "certificate verify failed",
             "name or service not known", "nodename nor servname provided")
# a server restarting, overloaded or briefly unreachable (checked before the TLS catch-all below:
# a handshake cut by a restart mentions SSL too)
_TRANSIENT = re.compile(r"temporary failure in name resolution|connection refused|timed? ?out|"
                        r"\bhttp (?:500|502|503|504|429)\b|too many (?:500|502|503|504|429) error|"
                        r"eof occurred|unexpected_eof|eof detected|connection reset|connection aborted|"
                        r"server closed the connection|the database system is (?:starting up|shutting down)",
                        re.IGNORECASE)


def exit_code_for(message: str, default: int = EX_TEMPFAIL) -> int:
    """The exit code a store's failure means: 2 (bad input, ``StoreRefused``) for an answer no
    restart changes, 75 (``StoreUnreachable``) for a server down, restarting or busy now. A TLS
    failure that is not a cut connection is a refused certificate or setting (2); a message that
    says neither gets ``default`` (a failed connection: 75; a store that answered: 2)."""
    text = message.lower()
    if any(refusal in text for refusal in _REFUSALS):
        return 2
    if _TRANSIENT.search(text):
        return EX_TEMPFAIL
    if re.search(r"\bssl|\btls|certificate", text):
        return 2
    if "max retries exceeded" in text:   # requests' wrapper of every failed connection: its cause decided above
        return EX_TEMPFAIL
    return default


def redact(uri: str) -> str:
    """The URI with any password replaced by ***, for messages."""
    parts = urlsplit(uri)
    if parts.password is None:
        return uri
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def _scheme(uri: str) -> str:
    return uri.split(":", 1)[0].split("+", 1)[0].lower() if ":" in uri else ""


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]


def connect_args(url: str) -> dict:
    """The short connect timeout, for the drivers that take one by that name (psycopg2, pymysql,
    mysqlclient); another driver refuses the keyword, which must not read as its server's answer."""
    return {"connect_timeout": CONNECT_TIMEOUT_S} if _scheme(url) in ("postgresql", "mysql") else {}


def check_database(url: str, what: str) -> None:
    """Connect once with a short timeout and run ``SELECT 1``."""
    try:
        reason = unreachable_reason(url)
    except StoreRefused as exc:
        raise StoreRefused(f"{what} {exc}") from None
    except ModuleNotFoundError as exc:
        raise StoreRefused(f"{what} {redact(url)}: its database driver is not installed ({exc}); for PostgreSQL "
                           "install grpolab[postgres] and write postgresql+psycopg2://...") from None
    if reason is not None:
        raise StoreUnreachable(f"{what} {redact(url)}: cannot connect ({reason}); once it answers (start it), "
                               "run the same command again")


def unreachable_reason(url: str) -> str | None:
    """Why the database at ``url`` cannot be used now (one connection and ``SELECT 1``, a short
    timeout, no retries), or None when it answers. A missing driver raises ModuleNotFoundError; a
    URL that cannot name a database, or one whose server refuses its user, password or database,
    raises ``StoreRefused`` (no restart helps)."""
    import sqlalchemy
    from sqlalchemy.pool import NullPool
    if _scheme(url) == "sqlite":   # a file, as a journal is: checked by check_storage_url, never "unreachable"
        return None
    try:
        engine = sqlalchemy.create_engine(url, poolclass=NullPool, connect_args=connect_args(url))
    except ModuleNotFoundError:
        raise
    except Exception as exc:  # noqa: BLE001 - ArgumentError (unparsable), NoSuchModuleError (unknown dialect)
        raise StoreRefused(f"{redact(url)}: not a usable database URL ({_first_line(exc)})") from None
    try:
        with engine.connect() as conn:
            conn.execute(sqlalchemy.text("SELECT 1"))
        engine.dispose()
    except ModuleNotFoundError:
        raise
    except Exception as exc:  # noqa: BLE001 - any driver error means the store is unusable
        reason = _first_line(exc)
        if exit_code_for(str(getattr(exc, "orig", None) or exc)) != EX_TEMPFAIL:
            raise StoreRefused(f"{redact(url)}: refused ({reason}); check the user, password and database it "
                               "names") from None
        return reason
    return None


def check_http_tracking(uri: str) -> None:
    """An MLflow tracking server answers its REST API, asked through MLflow's own request helper
    with MLflow's own host credentials, so that what MLflow's client would send is what is
    checked: MLFLOW_TRACKING_TOKEN / _USERNAME / _PASSWORD (or ~/.mlflow/credentials),
    MLFLOW_TRACKING_AUTH (an auth plugin), MLFLOW_TRACKING_INSECURE_TLS, MLFLOW_TRACKING_SERVER_CERT_PATH
    and MLFLOW_TRACKING_CLIENT_CERT_PATH. No retries: the point is to answer in seconds."""
    from mlflow.tracking._tracking_service.utils import get_default_host_creds
    from mlflow.utils.rest_utils import http_request
    try:
        response = http_request(get_default_host_creds(uri), "/api/2.0/mlflow/experiments/search", "GET",
                                max_retries=0, backoff_factor=0, timeout=CONNECT_TIMEOUT_S, raise_on_status=False,
                                params={"max_results": 1})
    except Exception as exc:  # noqa: BLE001 - connection refused, TLS verification, a failing auth plugin
        caused = re.search(r"Caused by (.+)", str(exc))   # requests' own reason inside MLflow's wrapping message
        reason = caused.group(1)[:240] if caused else _first_line(exc)
        # a server that takes the connection, then ends the TLS handshake (EOF) as a command starts,
        # refuses this client's TLS (a client certificate it requires: the client may see EOF or the
        # alert, by timing); mid-command the study storage's wait rides such a cut out instead
        handshake_cut = re.search(r"SSL", reason) and re.search(r"EOF", reason)
        if handshake_cut or exit_code_for(str(exc)) != EX_TEMPFAIL:   # a refused certificate, an unknown host
            if not re.search(r"SSL|TLS|certificate", reason, re.IGNORECASE):
                raise StoreRefused(f"tracking server {redact(uri)}: refused ({reason}); check MLFLOW_TRACKING_URI") from None
            raise StoreRefused(f"tracking server {redact(uri)}: TLS handshake failed ({reason}); check "
                               "MLFLOW_TRACKING_SERVER_CERT_PATH, MLFLOW_TRACKING_CLIENT_CERT_PATH or "
                               "MLFLOW_TRACKING_INSECURE_TLS") from None
        raise StoreUnreachable(f"tracking server {redact(uri)}: unreachable ({reason}); check "
                               f"MLFLOW_TRACKING_URI (and for https MLFLOW_TRACKING_SERVER_CERT_PATH or "
                               f"MLFLOW_TRACKING_INSECURE_TLS)") from None
    if response.status_code in (401, 403):   # it answers; MLflow's own client decides next
        return
    if response.status_code in (429, 500, 502, 503, 504):   # down, restarting, a proxy for it, or busy
        raise StoreUnreachable(f"tracking server {redact(uri)}: HTTP {response.status_code} (it is down, restarting "
                               "or overloaded); once it answers, run the same command again")
    if response.status_code != 200:
        raise StoreRefused(f"tracking server {redact(uri)}: HTTP {response.status_code} from its API "
                               "(is it an MLflow tracking server?)")


def _check_sqlite(uri: str, what: str) -> None:
    """A SQLite store is a file, as a journal is: its folder exists, and a file already there is a
    SQLite database (one that is not stays so: bad input, never "unreachable")."""
    import sqlite3
    path = uri.split(":///", 1)[1] if ":///" in uri else ""
    if not path or path == ":memory:":
        return
    if not Path(path).parent.is_dir():
        raise StoreRefused(f"{what} {uri}: folder {str(Path(path).parent)!r} does not exist")
    if Path(path).is_file():
        try:
            with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
                db.execute("PRAGMA schema_version").fetchone()
        except sqlite3.Error as exc:
            raise StoreRefused(f"{what} {uri}: not a usable SQLite database ({exc})") from None


def check_tracking_uri(uri: str) -> None:
    scheme = _scheme(uri)
    if scheme in ("http", "https"):
        check_http_tracking(uri)
    elif scheme == "sqlite":
        _check_sqlite(uri, "tracking store")
    elif scheme in DATABASE_SCHEMES:
        check_database(uri, "tracking store")


def check_storage_url(url: str) -> None:
    """An Optuna storage URL: ``journal:/path`` or an SQLAlchemy database URL."""
    scheme = _scheme(url)
    if scheme == "journal":
        folder = Path(url[len("journal:"):]).parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreRefused(f"study storage {url}: cannot create {str(folder)!r} ({exc.strerror})") from None
        if not os.access(folder, os.W_OK):
            raise StoreRefused(f"study storage {url}: folder {str(folder)!r} is not writable")
    elif scheme == "sqlite":
        _check_sqlite(url, "study storage")
    elif scheme in DATABASE_SCHEMES:
        check_database(url, "study storage")
    else:
        raise StoreRefused(f"study storage {redact(url)}: unknown kind; valid: journal:/path/file, "
                               "sqlite:///path.db, postgresql://user@host/db, mysql://user@host/db")


def tracking_uri_for(state: Path) -> str:
    from grpolab.tracking.recorder import tracking_uri
    return tracking_uri(state)


def init_tracking_store(state: Path) -> str:
    """Open the MLflow store once (a fresh database is created and migrated here, under the
    setup lock); a store MLflow refuses is reported in one line. Returns the URI."""
    uri = tracking_uri_for(state)
    from grpolab.tracking.recorder import client_for
    from mlflow.exceptions import MlflowException
    from sqlalchemy.exc import SQLAlchemyError
    try:   # client_for also writes the state folder's artifact-root mark here, under the lock
        client_for(state).search_experiments(max_results=1)
    except (MlflowException, SQLAlchemyError, OSError) as exc:   # a store's answer; any other error is a bug
        if exit_code_for(str(exc), default=2) == EX_TEMPFAIL:
            raise StoreUnreachable(f"tracking store {redact(uri)}: unreachable ({_first_line(exc)}); once it "
                                   "answers, run the same command again") from None
        raise StoreRefused(f"tracking store {redact(uri)}: {_first_line(exc)}") from None
    return uri


@contextlib.contextmanager
def _file_lock(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def _advisory_lock(url: str, key: int):
    import sqlalchemy
    from sqlalchemy.pool import NullPool
    engine = sqlalchemy.create_engine(url, poolclass=NullPool, connect_args=connect_args(url))
    conn = engine.connect()
    try:
        conn.execute(sqlalchemy.text("SELECT pg_advisory_lock(:key)"), {"key": key})
        conn.commit()
        yield
    finally:
        try:
            conn.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:key)"), {"key": key})
            conn.commit()
        finally:   # closing the session releases the lock anyway
            conn.close()
            engine.dispose()


def lock_files(state: Path, urls) -> list[Path]:
    files = {Path(state).resolve() / ".grpolab-setup.lock"}
    for url in urls:
        if url and url.startswith("journal:"):
            files.add(Path(url[len("journal:"):]).resolve().with_name(Path(url).name + ".grpolab-setup.lock"))
    return sorted(files)


@contextlib.contextmanager
def setup_lock(state: Path, tracking_url: str | None = None, storage_url: str | None = None):
    """Hold every lock that makes store init, parent run and enqueueing happen once: file locks
    (sorted, so two holders never deadlock), then a PostgreSQL advisory lock on the tracking
    store, then one on the study storage. The key is fixed per role (TRACKING_LOCK_KEY,
    STUDY_LOCK_KEY), never derived from the other URLs: coordinators whose MLflow stores differ
    but whose study storage is one database still exclude each other; one database in both
    roles takes two distinct keys, so it never waits on itself; the order is the same everywhere."""
    urls = [u for u in (tracking_url, storage_url) if u]
    with contextlib.ExitStack() as stack:
        for path in lock_files(state, urls):
            stack.enter_context(_file_lock(path))
        for url, key in ((tracking_url, TRACKING_LOCK_KEY), (storage_url, STUDY_LOCK_KEY)):
            scheme = _scheme(url) if url else ""
            if scheme == "postgresql":
                stack.enter_context(_advisory_lock(url, key))
            elif scheme in DATABASE_SCHEMES:
                log.warning("%s: no cross-machine setup lock for %s; start coordinators on several machines "
                            "one after another", redact(url), scheme)
        yield


def check_stores(state: Path, storage_url: str | None = None) -> str:
    """Fail fast: the tracking store and the study storage answer (nothing is written). Returns
    the tracking URI. A user's store comes from ``$MLFLOW_TRACKING_URI`` (read here directly, so
    the check runs before MLflow is even imported); the default is a file in the state folder."""
    user_uri = os.environ.get("MLFLOW_TRACKING_URI")
    if user_uri:
        check_tracking_uri(user_uri)
    if storage_url:
        check_storage_url(storage_url)
    return user_uri or tracking_uri_for(state)


def prepare_stores(state: Path, storage_url: str | None = None) -> str:
    """Fail-fast checks, then the MLflow store's first-time init under the setup lock."""
    uri = check_stores(state, storage_url)
    with setup_lock(state, uri, storage_url):
        init_tracking_store(state)
    return uri
