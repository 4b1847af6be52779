"""Which credentials and which transport security a pull uses (pure), and the auth file handed to
skopeo.

Credentials come, in this order, from the pod's imagePullSecrets (`.dockerconfigjson` data, once
the API has Secrets: `parse_docker_config` is the seam) and from the agent config's
`imageRegistries.<registry>` (username + passwordFile). The first that names the registry wins;
without any the pull is anonymous. skopeo gets them in an auth file of its own (mode 0600, in a
private directory, removed after the call), never on its command line, where every user could
read them in /proc. With them it answers both basic auth and the bearer-token flow (a 401 with
`WWW-Authenticate: Bearer realm=...`: it fetches a token from the realm with the credentials).

Transport: TLS with verification, except for a loopback registry (localhost, 127.0.0.0/8, [::1]),
where plain HTTP is allowed as Docker and containerd allow it, and for a registry the config marks
`insecure: true`. `certDir` adds CA certificates / a client certificate (skopeo's cert-dir layout:
*.crt, *.cert, *.key).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from nodeagent.agent.config.settings import RegistryConfig
from nodeagent.agent.images.reference import DEFAULT_REGISTRY, ImageRef


@dataclass(frozen=True)
class Credential:
    username: str
    password: str

    def __repr__(self) -> str:  # never in a log line
        return f"Credential(username={self.username!r}, password=<hidden>)"


@dataclass(frozen=True)
class Access:
    """How to reach one registry for one pull."""

    registry: str
    tls_verify: bool
    credential: Credential | None = None
    cert_dir: str | None = None


_HUB_ALIASES = ("docker.io", "index.docker.io", "registry-1.docker.io", "https://index.docker.io/v1/")


def _registry_key(key: str) -> str:
    """Normalise a dockerconfig `auths` key (`https://host/v1/`, `host`) to a registry host[:port]."""
    if key in _HUB_ALIASES:
        return DEFAULT_REGISTRY
    host = key.split("://", 1)[-1]
    return host.split("/", 1)[0]


def parse_docker_config(data: bytes) -> dict[str, Credential]:
    """The credentials of a `kubernetes.io/dockerconfigjson` secret (`{"auths": {...}}`) or of a
    legacy `.dockercfg` (the map itself); ValueError naming the problem."""
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise ValueError("must be a JSON object")
    auths = doc.get("auths", doc)
    if not isinstance(auths, dict):
        raise ValueError("auths: must be an object")
    out: dict[str, Credential] = {}
    for key, entry in auths.items():
        if not isinstance(entry, dict):
            raise ValueError(f"auths.{key}: must be an object")
        username, password = entry.get("username"), entry.get("password")
        if entry.get("auth"):
            try:
                decoded = base64.b64decode(str(entry["auth"]), validate=True).decode()
            except (binascii.Error, UnicodeDecodeError):
                raise ValueError(f"auths.{key}.auth: not base64 of user:password") from None
            username, sep, password = decoded.partition(":")
            if not sep:
                raise ValueError(f"auths.{key}.auth: not base64 of user:password")
        if isinstance(username, str) and isinstance(password, str) and username:
            out.setdefault(_registry_key(str(key)), Credential(username, password))
    return out


def access_for(ref: ImageRef, registries: Mapping[str, RegistryConfig],
               secrets: Sequence[Mapping[str, Credential]] = (),
               read_file: object = None) -> Access:
    """The Access for pulling `ref`. `read_file(path) -> str` reads a password file (injectable)."""
    conf = registries.get(ref.registry)
    credential = None
    for keyring in secrets:
        if ref.registry in keyring:
            credential = keyring[ref.registry]
            break
    if credential is None and conf is not None and conf.username:
        reader = read_file if callable(read_file) else _read_text
        password = reader(conf.password_file) if conf.password_file else ""
        credential = Credential(conf.username, password.strip("\n"))
    insecure = bool(conf and conf.insecure)
    return Access(ref.registry, tls_verify=not (insecure or ref.is_loopback), credential=credential,
                  cert_dir=conf.cert_dir if conf else None)


def _read_text(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def auth_file(access: Access) -> bytes:
    """containers-auth.json(5) for skopeo: `{"auths": {"<registry>": {"auth": base64(user:pass)}}}`."""
    auths: dict[str, dict[str, str]] = {}
    if access.credential is not None:
        token = f"{access.credential.username}:{access.credential.password}".encode()
        auths[access.registry] = {"auth": base64.b64encode(token).decode()}
    return json.dumps({"auths": auths}).encode()


__all__ = ["Access", "Credential", "access_for", "auth_file", "parse_docker_config"]
