"""A small synchronous HTTP client for the agent's API, for the human CLI.

Stdlib only (http.client): a CLI call makes one to three requests, so there is nothing to gain from
an event loop. It talks over the agent's Unix socket (`<stateDir>/nodeagent.sock`, the default: no
token needed, the socket's mode is the access control) or to `--server URL` (http or https, with
an optional bearer token and client certificate). Every failure is a `ClientError` carrying one
readable line: the caller prints it and exits 1, never a traceback.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

DEFAULT_TIMEOUT = 60.0  # creating a pod waits for admission and the first spawn


class ClientError(Exception):
    """One readable line about what went wrong; `code` is the HTTP status when the agent answered."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP over an AF_UNIX stream socket (the Host header says `localhost`)."""

    def __init__(self, path: str, timeout: float = DEFAULT_TIMEOUT) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self.socket_path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


@dataclass(frozen=True)
class Target:
    """Where the agent is: a Unix socket path, or an http(s) URL with credentials."""

    socket_path: str | None = None
    url: str | None = None
    token: str | None = None
    cacert: str | None = None
    cert: str | None = None
    key: str | None = None
    timeout: float = DEFAULT_TIMEOUT

    def __post_init__(self) -> None:
        if (self.socket_path is None) == (self.url is None):
            raise ValueError("give exactly one of a socket path and a server URL")
        if self.url is not None:
            parts = urlsplit(self.url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ClientError(f"--server must be an http:// or https:// URL, got {self.url!r}")
            if (parts.path not in ("", "/")) or parts.query or parts.fragment:
                raise ClientError(f"--server must be a bare scheme://host[:port] URL, got {self.url!r}")
            try:
                parts.port  # noqa: B018 - validates the port
            except ValueError as e:
                raise ClientError(f"--server {self.url!r}: {e}") from None
            if parts.scheme == "http" and (self.cacert or self.cert):
                raise ClientError("--cacert/--cert/--key need an https:// --server")
        if self.key and not self.cert:
            raise ClientError("--key needs --cert")

    def describe(self) -> str:
        """How the target reads in an error line."""
        return self.socket_path if self.socket_path is not None else str(self.url)

    def connection(self) -> http.client.HTTPConnection:
        if self.socket_path is not None:
            return UnixHTTPConnection(self.socket_path, self.timeout)
        parts = urlsplit(str(self.url))
        host = parts.hostname or "localhost"
        if parts.scheme == "https":
            ctx = ssl.create_default_context(cafile=self.cacert)
            if self.cert:
                ctx.load_cert_chain(self.cert, self.key)
            return http.client.HTTPSConnection(host, parts.port, timeout=self.timeout,
                                               context=ctx)
        return http.client.HTTPConnection(host, parts.port, timeout=self.timeout)


def pod_path(namespace: str, name: str, suffix: str = "") -> str:
    return f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}{suffix}"


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"TLS: {exc.verify_message or exc}"
    if isinstance(exc, ssl.SSLError):
        return f"TLS: {exc.reason or exc}"
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def _error_message(status: int, reason: str, body: bytes) -> str:
    """The Status object's message if the agent sent one, else the HTTP status and a snippet."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        data = None
    if isinstance(data, dict) and data.get("kind") == "Status" and data.get("message"):
        return str(data["message"])
    snippet = body.decode("utf-8", "replace").strip().splitlines()
    extra = f": {snippet[0][:200]}" if snippet else ""
    return f"the agent answered {status} {reason}{extra}"


class Client:
    """One request per call, each on a fresh connection (the CLI makes a handful)."""

    def __init__(self, target: Target) -> None:
        self.target = target

    def request(self, method: str, path: str, *, query: dict[str, Any] | None = None,
                body: bytes | None = None, content_type: str | None = None) -> bytes:
        """The response body of a 2xx answer; ClientError otherwise."""
        if query:
            path += "?" + urlencode({k: v for k, v in query.items() if v is not None})
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        if self.target.token:
            headers["Authorization"] = f"Bearer {self.target.token}"
        try:
            conn = self.target.connection()
        except (OSError, ssl.SSLError) as e:  # unreadable --cacert/--cert/--key
            raise ClientError(f"cannot set up TLS for {self.target.describe()}: {_reason(e)}") from None
        try:
            try:
                conn.request(method, path, body=body, headers=headers)
            except (OSError, http.client.HTTPException) as e:
                raise ClientError(f"cannot reach the agent at {self.target.describe()}: "
                                 f"{_reason(e)}") from None
            try:
                resp = conn.getresponse()
                data = resp.read()
            except (OSError, http.client.HTTPException) as e:
                raise ClientError(f"no answer from the agent at {self.target.describe()}: "
                                 f"{_reason(e)}") from None
        finally:
            conn.close()
        if not 200 <= resp.status < 300:
            raise ClientError(_error_message(resp.status, resp.reason, data), resp.status)
        return data

    def get_json(self, path: str, query: dict[str, Any] | None = None) -> Any:
        return _decode(self.request("GET", path, query=query))

    # ---- the API, one method per route ----
    def node(self) -> dict[str, Any]:
        return _mapping(self.get_json("/api/v1/node"), "node")

    def pod_list(self, namespace: str | None = None) -> dict[str, Any]:
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods" if namespace else "/api/v1/pods"
        return _mapping(self.get_json(path), "pod list")

    def pod(self, namespace: str, name: str) -> dict[str, Any]:
        return _mapping(self.get_json(pod_path(namespace, name)), "pod")

    def create_pod(self, manifest: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods" if namespace else "/api/v1/pods"
        body = json.dumps(manifest).encode()
        return _mapping(_decode(self.request("POST", path, body=body,
                                             content_type="application/json")), "pod")

    def delete_pod(self, namespace: str, name: str, grace: int | None = None) -> dict[str, Any]:
        data = self.request("DELETE", pod_path(namespace, name),
                            query={"gracePeriodSeconds": grace})
        return _mapping(_decode(data), "pod")

    def log(self, namespace: str, name: str, container: str | None = None,
            tail: int | None = None) -> str:
        data = self.request("GET", pod_path(namespace, name, "/log"),
                            query={"container": container, "tailLines": tail})
        return data.decode("utf-8", "replace")

    def events(self) -> dict[str, Any]:
        return _mapping(self.get_json("/api/v1/events"), "event list")


def _decode(data: bytes) -> Any:
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise ClientError("the agent answered with something that is not JSON") from None


def _mapping(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ClientError(f"the agent answered a {what} that is not a JSON object")
    return value


__all__ = ["Client", "ClientError", "Target", "UnixHTTPConnection", "pod_path"]
