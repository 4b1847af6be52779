"""API access control: config keys, the pure rules, tokens, client certificates, the Unix socket."""

from __future__ import annotations

import os
import socket
import ssl
import stat
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer, make_mocked_request

from nodeagent.agent.api.app import create_app
from nodeagent.agent.config.settings import AuthenticationConfig, ConfigError, parse_config
from nodeagent.core.errors import FieldError
from nodeagent.daemonkit.auth import (
    Authenticator,
    Peer,
    bind_unix_socket,
    check_bind_safety,
    decide,
    is_loopback,
    make_ssl_context,
    read_token,
    unlink_unix_socket,
)

TOKEN = "s3cret-token-value"
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
       "spec": {"containers": [{"name": "c", "image": "x"}]}}


class Backend:
    def __init__(self) -> None:
        self.created: list[str] = []

    def node(self) -> dict[str, Any]:
        return {"kind": "Node"}

    def list_pods(self) -> list[dict[str, Any]]:
        return []

    def get_pod(self, ns: str, name: str) -> dict[str, Any] | None:
        return None

    async def create_pod(self, manifest: dict[str, Any]) -> dict[str, Any]:
        self.created.append(manifest["metadata"]["name"])
        return manifest

    async def delete_pod(self, ns: str, name: str, grace: int | None) -> dict[str, Any] | None:
        return {"metadata": {"name": name}}

    def log_source(self, *args: Any) -> None:
        return None

    def events(self) -> list[dict[str, Any]]:
        return []


def token_auth() -> Authenticator:
    return Authenticator(AuthenticationConfig(tokenFile="/unused"), TOKEN.encode())


@pytest.fixture
async def client() -> AsyncIterator[TestClient]:
    async with TestClient(TestServer(create_app(Backend(), auth=token_auth()))) as c:
        yield c


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# ---- config keys ----


def test_authentication_config_forms() -> None:
    assert parse_config({}, "x").authentication is None
    assert parse_config({"authentication": "none"}, "x").authentication == "none"
    c = parse_config({"authentication": {"tokenFile": "/etc/na/token"}}, "x")
    assert isinstance(c.authentication, AuthenticationConfig) and c.authentication.token_file == "/etc/na/token"
    assert parse_config(c.to_dict(), "dumped") == c


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({"authentication": "token"}, 'authentication: must be "none" or a mapping'),
        ({"authentication": {}}, "authentication: set tokenFile and/or clientCAFile"),
        ({"authentication": {"tokenFile": "token"}}, "authentication.tokenFile: must be an absolute path"),
        ({"authentication": {"clientCAFile": "/ca.crt"}}, "authentication.clientCAFile: client certificates need TLS"),
        ({"tlsCertFile": "/c.crt"}, "tlsPrivateKeyFile: tlsCertFile and tlsPrivateKeyFile must be set together"),
        ({"unixSocket": "/" + "s" * 120}, "unixSocket: path too long"),
        ({"maxRequestBodyBytes": 10}, "maxRequestBodyBytes: "),
    ],
)
def test_config_errors_name_the_key(data: dict[str, Any], error: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(data, "x")
    assert any(e.startswith(error) for e in info.value.errors), info.value.errors


def test_unix_socket_defaults_under_state_dir_and_null_disables() -> None:
    assert parse_config({"stateDir": "/srv/na/"}, "x").unix_socket == "/srv/na/nodeagent.sock"
    assert parse_config({"unixSocket": None}, "x").unix_socket is None
    assert parse_config({}, "x").max_request_body_bytes == 1 << 20


# ---- pure rules ----


@pytest.mark.parametrize(
    ("address", "auth", "tls", "ok"),
    [
        ("127.0.0.1", None, False, True),
        ("::1", None, False, True),
        ("127.8.0.1", None, False, True),
        ("0.0.0.0", None, False, False),
        ("::", None, False, False),
        ("10.1.2.3", None, False, False),
        ("10.1.2.3", "none", False, True),
        ("10.1.2.3", AuthenticationConfig(tokenFile="/t"), False, False),  # token in clear
        ("10.1.2.3", AuthenticationConfig(tokenFile="/t"), True, True),
        ("0.0.0.0", AuthenticationConfig(clientCAFile="/ca"), True, True),
        ("0.0.0.0", AuthenticationConfig(clientCAFile="/ca"), False, False),
    ],
)
def test_bind_safety(address: str, auth: Any, tls: bool, ok: bool) -> None:
    error = check_bind_safety(address, auth, tls=tls)
    assert (error is None) == ok, error
    if not ok:
        assert (address in error and "authentication" in error) or "tls" in error


def test_is_loopback() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("::ffff:127.0.0.1")
    assert not is_loopback("10.0.0.1") and not is_loopback("localhost") and not is_loopback("")


MODE = AuthenticationConfig(tokenFile="/t")
LOCAL, REMOTE, REMOTE_TLS = Peer(host="127.0.0.1"), Peer(host="192.0.2.7"), Peer(host="192.0.2.7", tls=True)


@pytest.mark.parametrize(
    ("mode", "peer", "method", "path", "header", "code"),
    [
        (MODE, LOCAL, "GET", "/api/v1/pods", None, 401),  # any local user reaches loopback: no anonymous reads
        (MODE, LOCAL, "GET", "/api/v1/pods", f"Bearer {TOKEN}", 200),
        (MODE, LOCAL, "GET", "/healthz", None, 200),
        (MODE, LOCAL, "POST", "/api/v1/pods", None, 401),
        (MODE, LOCAL, "DELETE", "/api/v1/namespaces/a/pods/b", None, 401),
        (MODE, LOCAL, "POST", "/api/v1/pods", f"Bearer {TOKEN}", 200),
        (MODE, LOCAL, "POST", "/api/v1/pods", f"bearer {TOKEN}", 200),
        (MODE, LOCAL, "GET", "/api/v1/pods", "Bearer wrong", 401),  # wrong token: loud, even for reads
        (MODE, LOCAL, "POST", "/api/v1/pods", f"Basic {TOKEN}", 401),
        (MODE, REMOTE, "GET", "/api/v1/pods", None, 401),
        (MODE, REMOTE, "GET", "/healthz", None, 200),
        (MODE, REMOTE, "POST", "/api/v1/pods", f"Bearer {TOKEN}", 403),  # token in clear over the network
        (MODE, REMOTE_TLS, "POST", "/api/v1/pods", f"Bearer {TOKEN}", 200),
        (MODE, Peer(host="192.0.2.7", tls=True, cert_subject="admin"), "POST", "/api/v1/pods", None, 200),
        (MODE, Peer(unix=True), "POST", "/api/v1/pods", None, 200),
        (None, LOCAL, "POST", "/api/v1/pods", None, 401),
        (None, LOCAL, "POST", "/api/v1/pods", f"Bearer {TOKEN}", 401),  # no token configured
        (None, LOCAL, "GET", "/api/v1/node", None, 401),
        (None, LOCAL, "GET", "/metrics", None, 401),
        (None, Peer(unix=True), "GET", "/api/v1/node", None, 200),
        ("none", REMOTE, "POST", "/api/v1/pods", None, 200),
    ],
)
def test_decide(mode: Any, peer: Peer, method: str, path: str, header: str | None, code: int) -> None:
    token = TOKEN.encode() if mode == MODE else None
    d = decide(mode, token, peer, method, path, header)
    assert (d.code if not d.allowed else 200) == code, d
    assert TOKEN not in d.message and TOKEN not in d.identity


@pytest.mark.parametrize(
    ("mode", "peer", "method", "header", "code"),
    [
        (MODE, LOCAL, "GET", None, 200),
        (MODE, LOCAL, "HEAD", None, 200),
        (None, LOCAL, "GET", None, 200),
        (MODE, LOCAL, "POST", None, 401),  # writes never
        (None, LOCAL, "DELETE", None, 401),
        (MODE, LOCAL, "GET", "Bearer wrong", 401),  # a wrong token stays loud
        (MODE, REMOTE, "GET", None, 401),  # loopback only
        (None, REMOTE_TLS, "GET", None, 401),
    ],
)
def test_decide_with_anonymous_loopback_reads(mode: Any, peer: Peer, method: str, header: str | None,
                                               code: int) -> None:
    d = decide(mode, TOKEN.encode() if mode == MODE else None, peer, method, "/api/v1/pods", header,
               loopback_reads=True)
    assert (d.code if not d.allowed else 200) == code, d


# ---- through the middleware ----


async def test_token_required_for_writes(client: TestClient) -> None:
    r = await client.post("/api/v1/pods", json=POD)
    assert r.status == 401 and r.headers["WWW-Authenticate"].startswith("Bearer")
    r = await client.post("/api/v1/pods", json=POD, headers=bearer("wrong"))
    assert r.status == 401
    r = await client.post("/api/v1/pods", json=POD, headers=bearer(TOKEN))
    assert r.status == 201
    r = await client.delete("/api/v1/namespaces/default/pods/web")
    assert r.status == 401
    r = await client.delete("/api/v1/namespaces/default/pods/web", headers=bearer(TOKEN))
    assert r.status == 200


async def test_reads_need_credentials_on_loopback_too(client: TestClient) -> None:
    r = await client.get("/api/v1/pods")
    assert r.status == 401 and (await r.json())["message"].startswith("unauthorized: reads need a bearer token")
    assert (await client.get("/api/v1/namespaces/default/pods/web/log")).status == 401
    assert (await client.get("/api/v1/pods", headers=bearer(TOKEN))).status == 200
    assert (await client.get("/healthz")).status == 200


async def test_reads_open_on_loopback_when_opted_in() -> None:
    auth = Authenticator(AuthenticationConfig(tokenFile="/unused"), TOKEN.encode(), loopback_reads=True)
    async with TestClient(TestServer(create_app(Backend(), auth=auth))) as c:
        assert (await c.get("/api/v1/pods")).status == 200
        assert (await c.post("/api/v1/pods", json=POD)).status == 401
        upgrade = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
                   "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Protocol": "v5.channel.k8s.io"}
        resp = await c.get("/api/v1/namespaces/default/pods/web/exec?command=id&stdout=true", headers=upgrade)
        assert resp.status == 401  # exec is no read: an anonymous loopback peer may not run commands


async def test_denials_are_kubernetes_status_objects(client: TestClient) -> None:
    r = await client.post("/api/v1/pods", json=POD, headers=bearer("wrong"))
    body = await r.json()
    assert body["kind"] == "Status" and body["apiVersion"] == "v1" and body["status"] == "Failure"
    assert body["reason"] == "Unauthorized" and body["code"] == 401
    assert "wrong" not in body["message"]


async def test_unknown_route_needs_credentials_before_404(client: TestClient) -> None:
    assert (await client.post("/api/v1/nothing")).status == 401  # route existence not leaked
    assert (await client.post("/api/v1/nothing", headers=bearer(TOKEN))).status == 404


class FakeTransport:
    def __init__(self, extra: dict[str, Any]) -> None:
        self.extra = extra

    def get_extra_info(self, key: str, default: Any = None) -> Any:
        return self.extra.get(key, default)


async def test_remote_plain_http_token_is_forbidden() -> None:
    transport = FakeTransport({"peername": ("192.0.2.7", 40000)})
    req = make_mocked_request("POST", "/api/v1/pods", headers=bearer(TOKEN), transport=transport)

    async def handler(request: web.Request) -> web.Response:
        raise AssertionError("must not be called")

    resp = await token_auth().middleware(req, handler)
    assert resp.status == 403
    req = make_mocked_request("GET", "/api/v1/pods", transport=transport)
    assert (await token_auth().middleware(req, handler)).status == 401


def test_read_token(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(f"  {TOKEN}\n")
    path.chmod(0o600)
    assert read_token(str(path)) == TOKEN.encode()
    path.write_text("\n")
    with pytest.raises(FieldError, match="authentication.tokenFile: .* is empty"):
        read_token(str(path))
    with pytest.raises(FieldError, match="authentication.tokenFile: cannot read"):
        read_token(str(tmp_path / "missing"))


def test_authenticator_reload_rotates_token(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("old")
    auth = Authenticator.from_config(parse_config({"authentication": {"tokenFile": str(path)}}, "x"))
    assert auth.token == b"old"
    path.write_text("new")
    auth.reload()
    assert auth.token == b"new"


# ---- the Unix socket ----


async def test_unix_socket_is_root_only_and_trusted(tmp_path: Path) -> None:
    path = str(tmp_path / "na.sock")
    sock = bind_unix_socket(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    backend = Backend()
    runner = web.AppRunner(create_app(backend, auth=token_auth()))
    await runner.setup()
    try:
        await web.SockSite(runner, sock).start()
        async with aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=path)) as s:  # noqa: SIM117
            async with s.post("http://localhost/api/v1/pods", json=POD) as r:
                assert r.status == 201
        assert backend.created == ["web"]
        with pytest.raises(FieldError, match="unixSocket: .* in use"):
            bind_unix_socket(path)
    finally:
        await runner.cleanup()
    unlink_unix_socket(path)
    assert not os.path.exists(path)


def test_stale_socket_replaced_and_regular_file_refused(tmp_path: Path) -> None:
    path = str(tmp_path / "na.sock")
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(path)
    stale.close()  # file left behind, nobody listening
    bind_unix_socket(path).close()
    regular = tmp_path / "file"
    regular.write_text("x")
    with pytest.raises(FieldError, match="unixSocket: .* not a socket"):
        bind_unix_socket(str(regular))
    assert regular.read_text() == "x"


# ---- TLS and client certificates (certificates made with the openssl CLI) ----


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _make_ca(d: Path, name: str) -> None:
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.crt", "-days", "2", "-subj", f"/CN={name}",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)


def _make_cert(d: Path, name: str, ca: str, ext: str) -> None:
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
    (d / f"{name}.ext").write_text(ext)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key", "-CAcreateserial",
             "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext", cwd=d)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    _make_ca(d, "ca")
    _make_ca(d, "rogue-ca")
    _make_cert(d, "server", "ca", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    _make_cert(d, "admin", "ca", "extendedKeyUsage=clientAuth\n")
    _make_cert(d, "rogue", "rogue-ca", "extendedKeyUsage=clientAuth\n")
    return d


def _client_ctx(pki: Path, cert: str | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    if cert:
        ctx.load_cert_chain(str(pki / f"{cert}.crt"), str(pki / f"{cert}.key"))
    return ctx


async def test_client_certificate_authenticates_writes(pki: Path) -> None:
    config = parse_config({"authentication": {"clientCAFile": str(pki / "ca.crt")},
                           "tlsCertFile": str(pki / "server.crt"), "tlsPrivateKeyFile": str(pki / "server.key")}, "x")
    server_ctx = make_ssl_context(config)
    assert server_ctx is not None and server_ctx.verify_mode == ssl.CERT_OPTIONAL
    backend = Backend()
    runner = web.AppRunner(create_app(backend, auth=Authenticator.from_config(config)))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_ctx)
    await site.start()
    port = runner.addresses[0][1]
    url = f"https://127.0.0.1:{port}/api/v1/pods"
    try:
        async with aiohttp.ClientSession() as s:
            async with s.post(url, json=POD, ssl=_client_ctx(pki, "admin")) as r:
                assert r.status == 201
            async with s.post(url, json=POD, ssl=_client_ctx(pki, None)) as r:
                assert r.status == 401
            async with s.get(url, ssl=_client_ctx(pki, None)) as r:
                assert r.status == 401  # no anonymous reads, on loopback either
            with pytest.raises(aiohttp.ClientError):  # a certificate from another CA fails the handshake
                async with s.post(url, json=POD, ssl=_client_ctx(pki, "rogue")) as r:
                    pass
        assert backend.created == ["web"]
    finally:
        await runner.cleanup()


def test_make_ssl_context_errors_name_the_key(pki: Path, tmp_path: Path) -> None:
    assert make_ssl_context(parse_config({}, "x")) is None
    bad = parse_config({"tlsCertFile": str(tmp_path / "nope.crt"), "tlsPrivateKeyFile": str(pki / "server.key")}, "x")
    with pytest.raises(FieldError, match="^tlsCertFile: cannot load"):
        make_ssl_context(bad)
    bad_ca = parse_config({"authentication": {"clientCAFile": str(tmp_path / "nope.crt")},
                           "tlsCertFile": str(pki / "server.crt"), "tlsPrivateKeyFile": str(pki / "server.key")}, "x")
    with pytest.raises(FieldError, match="^authentication.clientCAFile: cannot load"):
        make_ssl_context(bad_ca)
