"""Which credentials and which transport security a pull uses (pure), and the auth file handed to
skopeo.

Credentials come, as the kubelet merges them, from the pod's imagePullSecrets (the
`.dockerconfigjson` or legacy `.dockercfg` data of each Secret, `parse_docker_config`) and then from
the agent config's `imageRegistries.<registry>` (username + passwordFile). The secrets' entries form
one keyring whose keys are `host[:port][/path]` (with `*` globs per host label, the kubelet's
credentialprovider.BasicDockerKeyring): every key matching the image is a candidate, the most
specific first (keys reverse-sorted, so `reg/team` comes before `reg`). The config's credential
for the registry comes after them. The puller tries the candidates in that order and stops at the
first the registry accepts (the kubelet's pullImage loop); without any the pull is anonymous.
skopeo gets them in an auth file of its own (mode 0600, in a private directory, removed after
the call), never on its command line, where every user could read them in /proc. With them it
answers both basic auth and the bearer-token flow (a 401 with `WWW-Authenticate: Bearer
realm=...`: it fetches a token from the realm with the credentials).

Transport: TLS with verification, except for a loopback registry (localhost, 127.0.0.0/8, [::1]),
where plain HTTP is allowed as Docker and containerd allow it, and for a registry the config marks
`insecure: true`. `certDir` adds CA certificates / a client certificate (skopeo's cert-dir layout:
*.crt, *.cert, *.key).
"""

from __future__ import annotations

import base64
import binascii
import fnmatch
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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
    """Normalise a dockerconfig `auths` key (`https://host/v1/`, `host/path`) to `host[:port][/path]`:
    the scheme dropped, a /v1/ or /v2/ path prefix is the host itself (as docker and the kubelet read it)."""
    if key in _HUB_ALIASES:
        return DEFAULT_REGISTRY
    rest = key.split("://", 1)[-1]
    host, _, path = rest.partition("/")
    if path.startswith(("v1/", "v2/")) or path in ("v1", "v2"):
        path = path[3:]
    if host in _HUB_ALIASES:
        host = DEFAULT_REGISTRY
    path = path.strip("/")
    return f"{host}/{path}" if path else host


def _split_host(host: str) -> tuple[str, str]:
    """(hostname, port) of `host[:port]` (IPv6 in brackets kept whole)."""
    if host.startswith("[") and "]" in host:
        end = host.index("]") + 1
        return host[:end], host[end + 1:] if host[end:end + 1] == ":" else ""
    name, _, port = host.partition(":")
    return name, port


def key_matches(key: str, image: str) -> bool:
    """The kubelet's URLsMatchStr: the key `host[:port][/path]` (host labels may be globs such as
    `*.example.com`) matches the image name `registry/repository`: same port, as many host labels,
    each label matched by its glob, and the image's path starting with the key's."""
    khost, _, kpath = key.partition("/")
    ihost, _, ipath = image.partition("/")
    kname, kport = _split_host(khost)
    iname, iport = _split_host(ihost)
    if kport != iport:
        return False
    kparts, iparts = kname.split("."), iname.split(".")
    if len(kparts) != len(iparts):
        return False
    if not all(fnmatch.fnmatchcase(i, k) for k, i in zip(kparts, iparts, strict=True)):
        return False
    return ("/" + ipath).startswith("/" + kpath) if kpath else True


def lookup(keyrings: Sequence[Mapping[str, Credential]], image: str) -> list[Credential]:
    """Every credential of the merged keyrings whose key matches `image` (`registry/repository`),
    the most specific key first (keys reverse-sorted; a key in several keyrings gives each one's
    credential, in keyring order)."""
    merged: dict[str, list[Credential]] = {}
    for keyring in keyrings:
        for key, credential in keyring.items():
            merged.setdefault(key, [])
            if credential not in merged[key]:
                merged[key].append(credential)
    out: list[Credential] = []
    for key in sorted(merged, reverse=True):
        if key_matches(key, image):
            out += merged[key]
    return out


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


def accesses_for(ref: ImageRef, registries: Mapping[str, RegistryConfig],
                 secrets: Sequence[Mapping[str, Credential]] = (),
                 read_file: object = None) -> list[Access]:
    """The Accesses to try, in order, for pulling `ref` (never empty: one anonymous Access when no
    credential matches). `read_file(path) -> str` reads a password file (injectable)."""
    conf = registries.get(ref.registry)
    credentials = lookup(secrets, ref.name)
    if conf is not None and conf.username:
        reader = read_file if callable(read_file) else _read_text
        password = reader(conf.password_file) if conf.password_file else ""
        node = Credential(conf.username, password.strip("\n"))
        if node not in credentials:
            credentials.append(node)
    insecure = bool(conf and conf.insecure)
    tls_verify = not (insecure or ref.is_loopback)
    cert_dir = conf.cert_dir if conf else None
    return [Access(ref.registry, tls_verify=tls_verify, credential=c, cert_dir=cert_dir)
            for c in (credentials or (None,))]


def access_for(ref: ImageRef, registries: Mapping[str, RegistryConfig],
               secrets: Sequence[Mapping[str, Credential]] = (),
               read_file: object = None) -> Access:
    """The first Access `accesses_for` would try."""
    return accesses_for(ref, registries, secrets, read_file)[0]


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


SECRET_TYPES = {"kubernetes.io/dockerconfigjson": ".dockerconfigjson", "kubernetes.io/dockercfg": ".dockercfg"}


def pull_secret_keyring(secret: Mapping[str, Any]) -> dict[str, Credential]:
    """The keyring of one imagePullSecret object as the API serves it (the kubelet's
    MakeDockerKeyring): `.dockerconfigjson` of a kubernetes.io/dockerconfigjson Secret or
    `.dockercfg` of a kubernetes.io/dockercfg one (base64 in `data`); any other type, or an empty
    value, gives nothing. ValueError naming the key when the value does not parse."""
    key = SECRET_TYPES.get(str(secret.get("type") or ""))
    value = (secret.get("data") or {}).get(key) if key else None
    if not key or not value:
        return {}
    try:
        raw = base64.b64decode(str(value), validate=True)
    except binascii.Error:
        raise ValueError(f"data[{key}]: not base64") from None
    try:
        return parse_docker_config(raw)
    except ValueError as e:
        raise ValueError(f"data[{key}]: {e}") from None


__all__ = [
    "SECRET_TYPES",
    "Access",
    "Credential",
    "access_for",
    "accesses_for",
    "auth_file",
    "key_matches",
    "lookup",
    "parse_docker_config",
    "pull_secret_keyring",
]
