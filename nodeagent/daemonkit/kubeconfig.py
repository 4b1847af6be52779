"""Reading a kubeconfig the way client-go's clientcmd does, for a daemon that calls an API server.

The agent reaches the control plane as a kubelet does: `--kubeconfig` names a file holding the
server's URL, the CA that signed its serving certificate and the node's credential (a bearer
token, or a client certificate and key). `nodeagent server kubeconfig --user system:node:<n>
--group system:nodes` prints one. Only what a daemon needs is read: the current context (or the
only one), its cluster and user; `-data` fields inline or file paths (relative to the kubeconfig's
directory, as clientcmd resolves them); `token` or `tokenFile`. Exec plugins and auth providers
are refused with a message, not ignored. Every problem is a `KubeconfigError` naming the key path.
"""

from __future__ import annotations

import base64
import binascii
import os
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml


class KubeconfigError(ValueError):
    """A kubeconfig that cannot be used; the message names the file and the key."""


@dataclass(frozen=True)
class ClusterCredentials:
    """The server and how to reach it. PEM bytes, not paths: the file may change under us."""

    server: str  # scheme://host:port, no trailing slash
    ca_pem: bytes | None = None
    insecure_skip_tls_verify: bool = False
    token: str | None = None
    client_cert_pem: bytes | None = None
    client_key_pem: bytes | None = None
    tls_server_name: str | None = None

    def __repr__(self) -> str:  # the token and key never reach a log line
        return f"ClusterCredentials(server={self.server!r}, token={'***' if self.token else None})"

    @property
    def user_kind(self) -> str:
        return "token" if self.token else "client-certificate" if self.client_cert_pem else "none"


def _named(doc: dict[str, Any], section: str, name: str, source: str) -> tuple[int, dict[str, Any]]:
    items = doc.get(section) or []
    if not isinstance(items, list):
        raise KubeconfigError(f"{source}: {section}: must be a list")
    for i, item in enumerate(items):
        if isinstance(item, dict) and item.get("name") == name:
            body = item.get(section[:-1])  # clusters[].cluster, users[].user, contexts[].context
            if not isinstance(body, dict):
                raise KubeconfigError(f"{source}: {section}[{i}].{section[:-1]}: must be a mapping")
            return i, body
    raise KubeconfigError(f'{source}: {section}: no entry named "{name}"')


def _material(body: dict[str, Any], key: str, where: str, base: Path, source: str) -> bytes | None:
    """`<key>-data` (base64) or `<key>` (a path, relative to the kubeconfig's directory)."""
    data = body.get(f"{key}-data")
    if data is not None:
        try:
            return base64.b64decode(str(data), validate=True)
        except (binascii.Error, ValueError):
            raise KubeconfigError(f"{source}: {where}.{key}-data: not valid base64") from None
    path = body.get(key)
    if path is None:
        return None
    full = base / str(path)
    try:
        return full.read_bytes()
    except OSError as e:
        raise KubeconfigError(f"{source}: {where}.{key}: cannot read {full}: {e.strerror}") from None


def parse_kubeconfig(doc: Any, source: str, base: Path | None = None) -> ClusterCredentials:
    """The credentials of the current context (or the only context) of a parsed kubeconfig."""
    base = base or Path(".")
    if not isinstance(doc, dict):
        raise KubeconfigError(f"{source}: (root): expected a kubeconfig mapping (kind: Config)")
    if doc.get("kind", "Config") != "Config":
        raise KubeconfigError(f'{source}: kind: must be "Config", got "{doc.get("kind")}"')
    current = doc.get("current-context")
    if not current:
        contexts = doc.get("contexts") or []
        if not isinstance(contexts, list) or len(contexts) != 1:
            raise KubeconfigError(f"{source}: current-context: not set, and there is not exactly one context")
        current = contexts[0].get("name") if isinstance(contexts[0], dict) else None
    ci, context = _named(doc, "contexts", str(current), source)
    cluster_name, user_name = context.get("cluster"), context.get("user")
    if not cluster_name:
        raise KubeconfigError(f"{source}: contexts[{ci}].context.cluster: required")
    ki, cluster = _named(doc, "clusters", str(cluster_name), source)
    where = f"clusters[{ki}].cluster"
    server = str(cluster.get("server") or "")
    parts = urlsplit(server)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise KubeconfigError(f'{source}: {where}.server: must be an http:// or https:// URL, got "{server}"')
    insecure = cluster.get("insecure-skip-tls-verify") is True
    ca = _material(cluster, "certificate-authority", where, base, source)
    if insecure and ca is not None:  # kubectl's own refusal
        raise KubeconfigError(f"{source}: {where}: specifying a root certificates file with the insecure flag "
                              "is not allowed")
    token = cert = key = None
    if user_name:
        ui, user = _named(doc, "users", str(user_name), source)
        uwhere = f"users[{ui}].user"
        for unsupported in ("exec", "auth-provider", "username", "password"):
            if user.get(unsupported) is not None:
                raise KubeconfigError(f"{source}: {uwhere}.{unsupported}: not supported by nodeagent; use a token, "
                                      "a tokenFile or a client certificate")
        if user.get("token") is not None:
            token = str(user["token"]).strip()
        elif user.get("tokenFile") is not None:
            token_path = base / str(user["tokenFile"])
            try:
                token = token_path.read_text().strip()
            except OSError as e:
                raise KubeconfigError(f"{source}: {uwhere}.tokenFile: cannot read {token_path}: {e.strerror}") from None
            if not token:
                raise KubeconfigError(f"{source}: {uwhere}.tokenFile: {token_path} is empty")
        cert = _material(user, "client-certificate", uwhere, base, source)
        key = _material(user, "client-key", uwhere, base, source)
        if (cert is None) != (key is None):
            missing = "client-key" if key is None else "client-certificate"
            raise KubeconfigError(f"{source}: {uwhere}.{missing}: a client certificate needs its key and the key "
                                  "its certificate")
    if parts.scheme == "http" and (token or cert):
        raise KubeconfigError(f"{source}: {where}.server: credentials are not sent over plain http; use https://")
    return ClusterCredentials(server=server.rstrip("/"), ca_pem=ca, insecure_skip_tls_verify=insecure, token=token,
                              client_cert_pem=cert, client_key_pem=key,
                              tls_server_name=cluster.get("tls-server-name") or None)


def load_kubeconfig(path: str | Path) -> ClusterCredentials:
    """Read and parse a kubeconfig file (blocking: call it in a thread from the event loop)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise KubeconfigError(f"{path}: cannot read: {e.strerror}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise KubeconfigError(f"{path}: not YAML: {str(e).splitlines()[0]}") from None
    return parse_kubeconfig(doc, str(path), path.parent)


def client_ssl_context(creds: ClusterCredentials) -> ssl.SSLContext | None:
    """The TLS context for an https server (None for http). The client key is written to a private
    temporary file only for as long as OpenSSL needs to read it (ssl has no in-memory key load)."""
    if not creds.server.startswith("https://"):
        return None
    try:
        ctx = ssl.create_default_context(cadata=creds.ca_pem.decode() if creds.ca_pem else None)
    except (ssl.SSLError, UnicodeDecodeError) as e:
        raise KubeconfigError(f"the certificate-authority is not a usable PEM certificate: {e}") from None
    if creds.insecure_skip_tls_verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if creds.client_cert_pem and creds.client_key_pem:
        fd, name = tempfile.mkstemp(prefix="nodeagent-kubeconfig-", suffix=".pem")
        try:
            with os.fdopen(fd, "wb") as f:  # mkstemp's file is 0600
                f.write(creds.client_cert_pem.rstrip(b"\n") + b"\n" + creds.client_key_pem)
            ctx.load_cert_chain(name)
        except ssl.SSLError as e:
            raise KubeconfigError(f"the client certificate or key is not usable: {e.reason or e}") from None
        finally:
            os.unlink(name)
    return ctx
