"""Which store failures are bad input (exit 2: no restart changes them) and which are a store
that does not answer now (exit 75: the same command may succeed later), from the drivers' and
MLflow's own messages; and the tracking store's first open keeps a bug's own error."""

import pytest
from mlflow.exceptions import MlflowException

from grpolab.tracking import recorder
from grpolab.tracking.stores import (StoreRefused, StoreUnreachable, exit_code_for, init_tracking_store)

MESSAGES = [   # (a failure's message, its exit code)
    ('invalid sslmode value: "sometimes"', 2),
    ('invalid dsn: invalid connection option "foo"', 2),
    ('connection to server at "db" (10.0.0.5), port 5432 failed: FATAL:  no pg_hba.conf entry for host "10.0.0.9", '
     'user "u", database "d", no encryption', 2),
    ("server does not support SSL, but SSL was required", 2),
    ("connection to server at \"db\" failed: SSL error: certificate verify failed", 2),
    ('could not translate host name "nosuchhost" to address: Name or service not known', 2),
    ('FATAL:  password authentication failed for user "u"', 2),
    ('FATAL:  database "nope" does not exist', 2),
    ("HTTPSConnectionPool(host='t', port=443): Max retries exceeded with url: /api (Caused by "
     "SSLError(SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed')))", 2),
    ("[SSL: WRONG_VERSION_NUMBER] wrong version number", 2),
    ('could not translate host name "db" to address: Temporary failure in name resolution', 75),
    ('connection to server at "127.0.0.1", port 5432 failed: Connection refused', 75),
    ('connection to server at "10.0.0.5", port 5432 failed: timeout expired', 75),
    ("HTTPConnectionPool(host='t', port=80): Read timed out. (read timeout=5)", 75),
    ("HTTP 503", 75), ("HTTP 502", 75), ("HTTP 504", 75), ("HTTP 500", 75), ("HTTP 429", 75),
    ("API request to http://t/api/2.0/mlflow/runs/search failed with exception HTTPConnectionPool(host='t', "
     "port=80): Max retries exceeded with url: /api (Caused by ResponseError('too many 503 error responses'))", 75),
    ("HTTPConnectionPool(host='127.0.0.1', port=9): Max retries exceeded with url: /api", 75),
    ("[SSL: UNEXPECTED_EOF_WHILE_READING] EOF occurred in violation of protocol (_ssl.c:1006)", 75),
    ("SSL SYSCALL error: EOF detected", 75),
    ("('Connection aborted.', ConnectionResetError(104, 'Connection reset by peer'))", 75),
    ("_ssl.c:980: The handshake operation timed out", 75),
    ("server closed the connection unexpectedly", 75),
    ("FATAL:  the database system is shutting down", 75),
]


@pytest.mark.parametrize(("message", "code"), MESSAGES, ids=[m[:40] for m, _ in MESSAGES])
def test_a_store_failure_message_gives_its_exit_code(message, code):
    assert exit_code_for(message) == code


def test_the_tracking_stores_first_open_refuses_only_a_refusal(tmp_path, monkeypatch):
    def failing(error):
        def client_for(state):
            raise error
        return client_for
    monkeypatch.setattr(recorder, "client_for", failing(MlflowException("Max retries exceeded with url: /api "
                                                                        "(Caused by ResponseError('too many 503 "
                                                                        "error responses'))")))
    with pytest.raises(StoreUnreachable):
        init_tracking_store(tmp_path)
    monkeypatch.setattr(recorder, "client_for", failing(MlflowException("Detected out-of-date database schema")))
    with pytest.raises(StoreRefused) as refused:
        init_tracking_store(tmp_path)
    assert not isinstance(refused.value, StoreUnreachable)
    monkeypatch.setattr(recorder, "client_for", failing(KeyError("a bug")))
    with pytest.raises(KeyError):
        init_tracking_store(tmp_path)
