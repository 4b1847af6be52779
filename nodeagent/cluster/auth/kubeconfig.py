"""A kubeconfig for kubectl and the client libraries: one cluster (the server's URL and the CA that
signed its serving certificate, inline), one user (a bearer token, or a client certificate and
key, inline), one context, made current. `nodeagent server kubeconfig` prints it as YAML."""

from __future__ import annotations

import base64
from typing import Any


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def build_kubeconfig(server: str, ca_pem: bytes, *, user: str, token: str | None = None,
                     client_cert_pem: bytes | None = None, client_key_pem: bytes | None = None,
                     cluster: str = "nodeagent", namespace: str | None = None) -> dict[str, Any]:
    """The kubeconfig (a plain dict: `yaml.safe_dump` it). Exactly one credential: a token, or a
    client certificate with its key."""
    if not server.startswith("https://"):
        raise ValueError(f"the server URL must be https:// (kubectl sends no credentials over http): {server}")
    has_cert = client_cert_pem is not None or client_key_pem is not None
    if (token is not None) == has_cert:
        raise ValueError("give either a token or a client certificate and key")
    if has_cert and (client_cert_pem is None or client_key_pem is None):
        raise ValueError("a client certificate needs its key, and the key its certificate")
    credentials: dict[str, str] = {"token": token} if token is not None else {
        "client-certificate-data": _b64(client_cert_pem or b""), "client-key-data": _b64(client_key_pem or b"")}
    context_name = f"{user}@{cluster}"
    context: dict[str, str] = {"cluster": cluster, "user": user}
    if namespace:
        context["namespace"] = namespace
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster, "cluster": {"server": server, "certificate-authority-data": _b64(ca_pem)}}],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": context_name, "context": context}],
        "current-context": context_name,
        "preferences": {},
    }
