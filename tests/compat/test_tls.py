"""TLS: ``--tls-port`` with a self-signed CA made at test time (``openssl`` CLI), redis-py
``ssl=True`` and ``redis-cli --tls``, client certificates (``--tls-auth-clients``), bad
configurations refused at start, certificate rotation through CONFIG SET."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from pion.server.run import StartupError
from tests.support.servers import ThreadServer, free_port, make_settings

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_cert(d: Path, name: str, ca: str, extensions: str) -> None:
    openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
            "-subj", f"/CN={name}", cwd=d)
    (d / f"{name}.ext").write_text(extensions)
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key", "-CAcreateserial",
            "-out", f"{name}.crt", "-days", "2", "-sha256", "-extfile", f"{name}.ext", cwd=d)


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("tls")
    for ca in ("ca", "otherca"):
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", f"{ca}.key", "-out", f"{ca}.crt",
                "-days", "2", "-subj", f"/CN=Pion test {ca}", cwd=d)
    make_cert(d, "server", "ca", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    make_cert(d, "server2", "ca", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    make_cert(d, "client", "ca", "extendedKeyUsage=clientAuth\n")
    make_cert(d, "stranger", "otherca", "extendedKeyUsage=clientAuth\n")
    return d


def tls_settings(certs: Path, **extra) -> dict:
    return {"tls_port": free_port(), "tls_cert_file": str(certs / "server.crt"),
            "tls_key_file": str(certs / "server.key"), "tls_ca_cert_file": str(certs / "ca.crt"), **extra}


def tls_client(srv, certs: Path, cert: str | None = "client", **kw) -> redis.Redis:
    extra = {"ssl_certfile": str(certs / f"{cert}.crt"), "ssl_keyfile": str(certs / f"{cert}.key")} if cert else {}
    return redis.Redis(port=srv.settings.tls_port, ssl=True, ssl_ca_certs=str(certs / "ca.crt"),
                       socket_timeout=10, retry=Retry(NoBackoff(), 0), **extra, **kw)


def test_redis_py_over_tls_with_a_client_certificate(make_server, certs):
    srv = make_server(**tls_settings(certs))
    for protocol in (2, 3):
        with tls_client(srv, certs, protocol=protocol) as c:
            assert c.set("k", "v") and c.get("k") == b"v"
            assert c.client_info()["laddr"].endswith(str(srv.settings.tls_port))
    with redis.Redis(port=srv.port) as plain:  # the plain port serves too
        assert plain.get("k") == b"v"


def test_client_certificates_are_required_by_default(make_server, certs):
    srv = make_server(**tls_settings(certs))
    for cert in (None, "stranger"):
        with tls_client(srv, certs, cert=cert) as c, pytest.raises(redis.ConnectionError):
            c.ping()
    with tls_client(srv, certs) as c:
        assert c.ping()


def test_auth_clients_no_and_optional(make_server, certs):
    srv = make_server(**tls_settings(certs, tls_auth_clients="no", tls_ca_cert_file=""))
    with tls_client(srv, certs, cert=None) as c:
        assert c.ping()
    srv = make_server(**tls_settings(certs, tls_auth_clients="optional"))
    with tls_client(srv, certs, cert=None) as c:
        assert c.ping()
    with tls_client(srv, certs, cert="stranger") as c, pytest.raises(redis.ConnectionError):
        c.ping()  # optional still rejects a certificate the CA did not sign


def test_tls_and_a_password_together(make_server, certs):
    srv = make_server(**tls_settings(certs), requirepass="pw")
    with tls_client(srv, certs, password="pw") as c:
        assert c.ping()
    with tls_client(srv, certs) as c, pytest.raises(redis.AuthenticationError):
        c.get("k")


def test_a_plain_client_on_the_tls_port_is_dropped(make_server, certs):
    srv = make_server(**tls_settings(certs))
    with redis.Redis(port=srv.settings.tls_port, socket_timeout=5, retry=Retry(NoBackoff(), 0)) as c, \
            pytest.raises(redis.ConnectionError):
        c.ping()
    with tls_client(srv, certs) as c:
        assert c.ping()  # the server is unharmed


@pytest.mark.skipif(shutil.which("redis-cli") is None, reason="needs redis-cli")
def test_redis_cli_tls(make_server, certs):
    srv = make_server(**tls_settings(certs))
    out = subprocess.run(
        ["redis-cli", "-p", str(srv.settings.tls_port), "--tls", "--cacert", str(certs / "ca.crt"),
         "--cert", str(certs / "client.crt"), "--key", str(certs / "client.key"), "SET", "cli", "ok"],
        capture_output=True, text=True, timeout=20)
    assert out.stdout.strip() == "OK", out.stderr
    with tls_client(srv, certs) as c:
        assert c.get("cli") == b"ok"


def test_bad_tls_configurations_are_refused_at_start(tmp_path, certs):
    cases = [
        ({"tls_cert_file": ""}, "needs --tls-cert-file and --tls-key-file"),
        ({"tls_cert_file": str(tmp_path / "missing.crt")}, "cannot load --tls-cert-file/--tls-key-file"),
        ({"tls_ca_cert_file": ""}, "needs --tls-ca-cert-file"),
        ({"tls_protocols": "SSLv3"}, "tls-protocols"),
        ({"tls_key_file": str(certs / "client.key")}, "cannot load"),
    ]
    for i, (change, message) in enumerate(cases):
        datadir = tmp_path / f"d{i}"
        datadir.mkdir()
        with pytest.raises(StartupError, match=message):
            ThreadServer(make_settings(datadir, **tls_settings(certs, **change))).start()


def test_certificate_rotation_with_config_set(make_server, certs):
    srv = make_server(**tls_settings(certs))
    with redis.Redis(port=srv.port) as admin:
        admin.execute_command("CONFIG", "SET", "tls-cert-file", str(certs / "server2.crt"),
                              "tls-key-file", str(certs / "server2.key"))
        with pytest.raises(redis.ResponseError, match="cannot load"):
            admin.config_set("tls-cert-file", str(certs / "nope.crt"))
        assert admin.config_get("tls-cert-file")["tls-cert-file"] == str(certs / "server2.crt")
        with pytest.raises(redis.ResponseError, match="only be set at startup"):
            admin.config_set("tls-port", 1)
    raw = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    raw.load_cert_chain(str(certs / "client.crt"), str(certs / "client.key"))
    with socket.create_connection(("127.0.0.1", srv.settings.tls_port)) as sock, \
            raw.wrap_socket(sock, server_hostname="127.0.0.1") as tls:
        assert tls.getpeercert()["subject"] == ((("commonName", "server2"),),)
        tls.sendall(b"PING\r\n")
        assert tls.recv(100) == b"+PONG\r\n"
