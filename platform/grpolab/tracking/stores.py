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


# a database's own answer that no restart changes: the URL names a user, password or database it refuses
_REFUSALS = ("authentication failed", "does not exist", "no password supplied", "access denied", "unknown database")


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
    try:
        engine = sqlalchemy.create_engine(url, poolclass=NullPool, connect_args={"connect_timeout": CONNECT_TIMEOUT_S})
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
        if any(refusal in reason.lower() for refusal in _REFUSALS):
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
        if re.search(r"SSL|TLS|certificate", reason, re.IGNORECASE):   # answered, but its certificate is refused
            raise StoreRefused(f"tracking server {redact(uri)}: TLS handshake failed ({reason}); check "
                               "MLFLOW_TRACKING_SERVER_CERT_PATH, MLFLOW_TRACKING_CLIENT_CERT_PATH or "
                               "MLFLOW_TRACKING_INSECURE_TLS") from None
        raise StoreUnreachable(f"tracking server {redact(uri)}: unreachable ({reason}); check "
                               f"MLFLOW_TRACKING_URI (and for https MLFLOW_TRACKING_SERVER_CERT_PATH or "
                               f"MLFLOW_TRACKING_INSECURE_TLS)") from None
    if response.status_code in (401, 403):   # it answers; MLflow's own client decides next
        return
    if response.status_code in (502, 503, 504):   # a proxy answers for a server that is down
        raise StoreUnreachable(f"tracking server {redact(uri)}: HTTP {response.status_code} (it is down or "
                               "restarting); once it answers, run the same command again")
    if response.status_code != 200:
        raise StoreRefused(f"tracking server {redact(uri)}: HTTP {response.status_code} from its API "
                               "(is it an MLflow tracking server?)")


def _check_sqlite(uri: str, what: str) -> None:
    path = uri.split(":///", 1)[1] if ":///" in uri else ""
    if path and path != ":memory:" and not Path(path).parent.is_dir():
        raise StoreRefused(f"{what} {uri}: folder {str(Path(path).parent)!r} does not exist")


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
    try:   # client_for also writes the state folder's artifact-root mark here, under the lock
        client_for(state).search_experiments(max_results=1)
    except Exception as exc:  # noqa: BLE001 - MlflowException, driver errors, unknown schemes
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
    engine = sqlalchemy.create_engine(url, poolclass=NullPool, connect_args={"connect_timeout": CONNECT_TIMEOUT_S})
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
