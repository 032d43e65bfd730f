"""The pre-run tracking-server check honours MLflow's TLS and auth variables, as MLflow's client
does: a real HTTPS server on loopback with a self-signed certificate (and, for the client-cert
case, one that requires a client certificate) answers MLflow's experiments/search endpoint."""

from __future__ import annotations

import http.server
import json
import shutil
import ssl
import subprocess
import threading

import pytest

from grpolab.tracking.stores import StoreRefused, check_http_tracking

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl to make a certificate")
TLS_VARS = ("MLFLOW_TRACKING_INSECURE_TLS", "MLFLOW_TRACKING_SERVER_CERT_PATH", "MLFLOW_TRACKING_CLIENT_CERT_PATH",
            "MLFLOW_TRACKING_AUTH", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN")


def _self_signed(folder, name: str):
    key, cert = folder / f"{name}.key", folder / f"{name}.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return key, cert


class _Api(http.server.BaseHTTPRequestHandler):
    seen: list = []

    def do_GET(self):
        type(self).seen.append({"path": self.path, "authorization": self.headers.get("Authorization")})
        body = json.dumps({"experiments": []}).encode()
        self.send_response(200 if self.path.startswith("/api/2.0/mlflow/experiments/search") else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def _serve(tmp_path, require_client_cert=None):
    key, cert = _self_signed(tmp_path, "server")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    if require_client_cert is not None:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(require_client_cert)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"https://127.0.0.1:{server.server_address[1]}", cert


@pytest.fixture
def clean_env(monkeypatch):
    for name in TLS_VARS:
        monkeypatch.delenv(name, raising=False)
    _Api.seen = []
    return monkeypatch


def test_self_signed_server_needs_insecure_tls_or_its_certificate(tmp_path, clean_env):
    server, url, cert = _serve(tmp_path)
    try:
        with pytest.raises(StoreRefused, match="TLS handshake failed .*(CERTIFICATE_VERIFY_FAILED|certificate verify "
                                               "failed)"):   # bad input (exit 2): a rerun cannot help
            check_http_tracking(url)
        clean_env.setenv("MLFLOW_TRACKING_INSECURE_TLS", "true")
        check_http_tracking(url)
        clean_env.delenv("MLFLOW_TRACKING_INSECURE_TLS")
        clean_env.setenv("MLFLOW_TRACKING_SERVER_CERT_PATH", str(cert))
        check_http_tracking(url)
    finally:
        server.shutdown()
    assert [s["path"] for s in _Api.seen] == ["/api/2.0/mlflow/experiments/search?max_results=1"] * 2


def test_client_certificate_and_basic_auth_reach_the_server(tmp_path, clean_env):
    client_key, client_cert = _self_signed(tmp_path, "client")
    bundle = tmp_path / "client.pem"
    bundle.write_text(client_cert.read_text() + client_key.read_text())
    server, url, cert = _serve(tmp_path, require_client_cert=client_cert)
    clean_env.setenv("MLFLOW_TRACKING_SERVER_CERT_PATH", str(cert))
    clean_env.setenv("MLFLOW_TRACKING_USERNAME", "ada")
    clean_env.setenv("MLFLOW_TRACKING_PASSWORD", "s3cret")
    try:
        with pytest.raises(StoreRefused, match="TLS handshake failed"):
            check_http_tracking(url)   # the server refuses the handshake without a client certificate
        clean_env.setenv("MLFLOW_TRACKING_CLIENT_CERT_PATH", str(bundle))
        check_http_tracking(url)
    finally:
        server.shutdown()
    assert _Api.seen == [{"path": "/api/2.0/mlflow/experiments/search?max_results=1",
                          "authorization": "Basic YWRhOnMzY3JldA=="}]   # base64("ada:s3cret")


def test_the_auth_plugin_variable_reaches_mlflows_plugin_registry(tmp_path, clean_env):
    """MLFLOW_TRACKING_AUTH names an auth plugin; MLflow itself warns about an unregistered one and
    sends no header, and so does the check (it goes through the same registry)."""
    server, url, _ = _serve(tmp_path)
    clean_env.setenv("MLFLOW_TRACKING_INSECURE_TLS", "true")
    clean_env.setenv("MLFLOW_TRACKING_AUTH", "no_such_auth_plugin")
    try:
        with pytest.warns(UserWarning, match="no_such_auth_plugin"):
            check_http_tracking(url)
    finally:
        server.shutdown()
    assert _Api.seen == [{"path": "/api/2.0/mlflow/experiments/search?max_results=1", "authorization": None}]
