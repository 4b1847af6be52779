"""Who may call the API: bearer token, TLS client certificate, the root-only Unix socket, loopback.

The API can start pods that run as any user, so write access is root-equivalent. The rules:
- `authentication: none` (explicit): everything is open (for a closed test network, on purpose);
- the Unix socket is trusted: it is mode 0600 in a root-owned directory, so only root connects;
- a valid bearer token or a verified client certificate may do everything;
- without credentials only /healthz is open, from anywhere. Any local user can reach 127.0.0.1,
  and reads show pod specs, env values and logs, so anonymous reads from a loopback peer
  (GET/HEAD) are an explicit opt-in (`loopback_reads`, the agent's `anonymousLoopbackReads`),
  as the kubelet keeps its unauthenticated read-only port off by default; writes need
  credentials even then;
- a bearer token that is presented but wrong is 401 even where anonymous reads are allowed, so a
  misconfigured client fails loudly instead of silently reading as anonymous;
- a valid token sent in clear from another host (plain HTTP, non-loopback peer) is 403: the token
  has crossed the network readable. `check_bind_safety` refuses that setup at start; this is the
  second line.
Tokens are compared with hmac.compare_digest and never logged.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import socket
import ssl
import stat
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import structlog
from aiohttp import web

from nodeagent.core.errors import FieldError
from nodeagent.daemonkit.configfile import AuthenticationConfig
from nodeagent.daemonkit.status import status_body

log = structlog.get_logger(__name__)

READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
OPEN_PATHS = frozenset({"/healthz"})
IDENTITY: web.RequestKey[str] = web.RequestKey("identity", str)

Authentication = Literal["none"] | AuthenticationConfig | None
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ServingConfig(Protocol):
    """The keys of a daemon's config that say how its API is served (the agent's and the server's)."""

    @property
    def authentication(self) -> Authentication: ...
    @property
    def tls_cert_file(self) -> str | None: ...
    @property
    def tls_private_key_file(self) -> str | None: ...


# ---- pure policy ----


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 and IPv4-mapped loopback; host names and garbage are not loopback."""
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return bool(ip.is_loopback or (mapped is not None and mapped.is_loopback))


def check_bind_safety(address: str, authentication: Authentication, *, tls: bool = False) -> str | None:
    """Why serving on `address` would be unsafe (an error message), or None if it is fine.

    A loopback address is always fine (writes still need credentials). Elsewhere the API needs
    authentication, or an explicit `authentication: none`; tokens need TLS there.
    """
    if is_loopback(address) or authentication == "none":
        return None
    if authentication is None:
        return (f"address {address} is not a loopback address and authentication is not configured: set "
                "authentication.tokenFile and/or authentication.clientCAFile (with tlsCertFile and "
                "tlsPrivateKeyFile), or write `authentication: none` to serve without authentication on purpose")
    assert isinstance(authentication, AuthenticationConfig)
    if not tls:
        what = "bearer tokens would cross the network in clear" if authentication.token_file \
            else "client certificates need TLS"
        return f"address {address} is not a loopback address and {what}: set tlsCertFile and tlsPrivateKeyFile"
    return None


@dataclass(frozen=True)
class Peer:
    """Where a request came from, as the transport says (never from headers)."""

    unix: bool = False
    host: str | None = None
    tls: bool = False
    cert_subject: str | None = None  # set only for a client certificate that verified

    @property
    def loopback(self) -> bool:
        return self.unix or (self.host is not None and is_loopback(self.host))


@dataclass(frozen=True)
class AuthDecision:
    allowed: bool
    identity: str
    code: int = 200
    message: str = ""


def bearer_token(header: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header; "" for any other scheme."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def decide(mode: Authentication, token: bytes | None, peer: Peer, method: str, path: str,
           authorization: str | None, *, loopback_reads: bool = False) -> AuthDecision:
    """The access rules of this module's docstring, without I/O."""
    if mode == "none":
        return AuthDecision(True, "anonymous (authentication: none)")
    if peer.unix:
        return AuthDecision(True, "unix-socket")
    presented = bearer_token(authorization)
    if presented is not None:
        if not presented or token is None or not hmac.compare_digest(presented.encode(), token):
            return AuthDecision(False, "anonymous", 401, "invalid bearer token")
        if not peer.tls and not peer.loopback:
            return AuthDecision(False, "token", 403, "bearer tokens are not accepted over plain HTTP from "
                                                     "another host; use TLS (tlsCertFile)")
        return AuthDecision(True, "token")
    if peer.cert_subject is not None:
        return AuthDecision(True, f"x509:{peer.cert_subject}")
    if path in OPEN_PATHS or (loopback_reads and method in READ_METHODS and peer.loopback):
        return AuthDecision(True, "anonymous")
    needs = "writes need" if method not in READ_METHODS else "reads need"
    return AuthDecision(False, "anonymous", 401, f"{needs} a bearer token or a client certificate "
                                                 "(or the agent's Unix socket)")


# ---- adapters ----


def _subject(cert: dict[str, Any]) -> str:
    """CN (or the whole subject) of a getpeercert() dict, for logs."""
    parts = [f"{k}={v}" for rdn in cert.get("subject", ()) for k, v in rdn]
    cn = [p[3:] for p in parts if p.startswith("commonName=")]
    return cn[0] if cn else ",".join(parts) or "unknown"


def peer_of(request: web.Request) -> Peer:
    transport = request.transport
    if transport is None:
        return Peer()
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family == socket.AF_UNIX:
        return Peer(unix=True)
    peername = transport.get_extra_info("peername")
    host = str(peername[0]) if isinstance(peername, (tuple, list)) and peername else None
    ssl_object = transport.get_extra_info("ssl_object")
    cert = transport.get_extra_info("peercert") if ssl_object is not None else None
    # with CERT_OPTIONAL, a presented certificate that fails verification fails the handshake;
    # an empty dict would mean "not validated", so only a non-empty one counts
    return Peer(host=host, tls=ssl_object is not None, cert_subject=_subject(cert) if cert else None)


def read_token(path: str) -> bytes:
    """The token file's contents, stripped; FieldError naming the key when unusable."""
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            data = f.read(64 * 1024).strip()
    except OSError as e:
        raise FieldError("authentication.tokenFile", f"cannot read {path}: {e.strerror}") from None
    if not data:
        raise FieldError("authentication.tokenFile", f"{path} is empty")
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("api_token_file_readable_by_others", path=path, mode=oct(stat.S_IMODE(st.st_mode)))
    return data


class Authenticator:
    """Holds the mode and the token, and gives the aiohttp middleware that applies `decide`."""

    def __init__(self, mode: Authentication, token: bytes | None = None, *, loopback_reads: bool = False) -> None:
        self.mode = mode
        self.token = token
        self.loopback_reads = loopback_reads
        self.cert_auth = isinstance(mode, AuthenticationConfig) and mode.client_ca_file is not None

    @classmethod
    def from_config(cls, config: ServingConfig, *, loopback_reads: bool = False) -> Authenticator:
        mode = config.authentication
        token = read_token(mode.token_file) if isinstance(mode, AuthenticationConfig) and mode.token_file else None
        return cls(mode, token, loopback_reads=loopback_reads)

    def reload(self) -> None:
        """Re-read the token file (SIGHUP): rotate tokens without a restart."""
        if isinstance(self.mode, AuthenticationConfig) and self.mode.token_file:
            self.token = read_token(self.mode.token_file)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        peer = peer_of(request)
        # a WebSocket upgrade (exec) carries input to the node: it is a write, whatever its method
        method = "POST" if request.headers.get("Upgrade", "").lower() == "websocket" else request.method
        d = decide(self.mode, self.token, peer, method, request.path,
                   request.headers.get("Authorization"), loopback_reads=self.loopback_reads)
        if not d.allowed:
            log.info("api_request_denied", method=request.method, path=request.path, code=d.code,
                     peer="unix" if peer.unix else peer.host, reason=d.message)
            reason = "Unauthorized" if d.code == 401 else "Forbidden"
            body = status_body(d.code, f"{reason.lower()}: {d.message}", reason)
            headers = {"WWW-Authenticate": 'Bearer realm="nodeagent"'} if d.code == 401 else None
            return web.json_response(body, status=d.code, headers=headers)
        request[IDENTITY] = d.identity
        return await handler(request)


def make_ssl_context(config: ServingConfig) -> ssl.SSLContext | None:
    """The server's TLS context (None without tlsCertFile); client certificates are requested
    and verified against clientCAFile when set (optional: token clients need none)."""
    if config.tls_cert_file is None or config.tls_private_key_file is None:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(config.tls_cert_file, config.tls_private_key_file)
    except (OSError, ssl.SSLError) as e:
        raise FieldError("tlsCertFile", f"cannot load {config.tls_cert_file} with key "
                                        f"{config.tls_private_key_file}: {e}") from None
    auth = config.authentication
    if isinstance(auth, AuthenticationConfig) and auth.client_ca_file:
        try:
            ctx.load_verify_locations(cafile=auth.client_ca_file)
        except (OSError, ssl.SSLError) as e:
            raise FieldError("authentication.clientCAFile", f"cannot load {auth.client_ca_file}: {e}") from None
        ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx


def bound_port(runner: web.AppRunner | None, configured: int) -> int:
    """The TCP port a started runner listens on (a config may say 0: any free port), else `configured`."""
    if runner is not None:
        for addr in runner.addresses:
            if isinstance(addr, tuple):
                return int(addr[1])
    return configured


def bind_unix_socket(path: str) -> socket.socket:
    """A bound, not yet listening AF_UNIX socket at `path`, mode 0600 before anyone can connect
    (listen() comes later, from the server); a stale socket file is replaced, a live one or a
    non-socket file is an error naming unixSocket."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        pass
    else:
        if not stat.S_ISSOCK(st.st_mode):
            raise FieldError("unixSocket", f"{path} exists and is not a socket")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(path)
        except OSError:
            os.unlink(path)  # stale: left behind by an agent that died
        else:
            raise FieldError("unixSocket", f"{path} is in use (another agent running?)")
        finally:
            probe.close()
    os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
        os.chmod(path, 0o600)
    except OSError as e:
        sock.close()
        raise FieldError("unixSocket", f"cannot bind {path}: {e.strerror}") from None
    return sock


def unlink_unix_socket(path: str | None) -> None:
    """Remove the socket file at shutdown (best effort)."""
    if path:
        try:
            if stat.S_ISSOCK(os.lstat(path).st_mode):
                os.unlink(path)
        except OSError:
            pass


__all__ = [
    "IDENTITY",
    "AuthDecision",
    "Authenticator",
    "Peer",
    "bind_unix_socket",
    "check_bind_safety",
    "decide",
    "make_ssl_context",
    "peer_of",
    "unlink_unix_socket",
]
