"""Encryption at rest, configured as kube-apiserver's --encryption-provider-config
(apiserver.config.k8s.io/v1 EncryptionConfiguration):

    apiVersion: apiserver.config.k8s.io/v1
    kind: EncryptionConfiguration
    resources:
      - resources: [secrets]            # "secrets", "configmaps", "deployments.apps", "*.", "*.apps", "*.*"
        providers:
          - aesgcm: {keys: [{name: key2, secret: <base64 of 16, 24 or 32 bytes>}, {name: key1, secret: ...}]}
          - secretbox: {keys: [{name: old, secret: <base64 of 32 bytes>}]}
          - identity: {}

The first provider (and its first key) encrypts every write; every listed provider and key
decrypts, so a rotation is: add the new key first, restart, rewrite the objects (a read reports
`stale` when the value was not written with the first key, so the server can rewrite it), then
drop the old key. Stored values are upstream's: `k8s:enc:aesgcm:v1:<key name>:` + 12-byte nonce +
ciphertext and tag, with the storage key as additional authenticated data (a value copied to
another key does not decrypt); `k8s:enc:secretbox:v1:<key name>:` + 24-byte nonce + box;
identity stores the plain value. AES-GCM is `cryptography`'s, secretbox PyNaCl's. With random
96-bit nonces a single aesgcm key should be rotated before about 200,000 writes (upstream's
advice); secretbox has no such limit. aescbc and kms are not supported (upstream discourages
aescbc; kms needs a plugin), and say so.

Wrong key, tampered value and unknown prefix are DecryptError with a message naming the
resource, the provider and the key, never the data. Values are bytes in, bytes out: the
storage layer calls `encrypt`/`decrypt` with the storage key around every value of a configured
resource.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import nacl.exceptions
import nacl.secret
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from nodeagent.daemonkit.configfile import ConfigError, read_yaml

API_VERSION = "apiserver.config.k8s.io/v1"
KIND = "EncryptionConfiguration"
ENCRYPTED_PREFIX = b"k8s:enc:"
AESGCM_PREFIX = b"k8s:enc:aesgcm:v1:"
SECRETBOX_PREFIX = b"k8s:enc:secretbox:v1:"
AES_KEY_SIZES = (16, 24, 32)
SECRETBOX_KEY_SIZES = (32,)
GCM_NONCE = 12


class EncryptionConfigError(ValueError):
    """An unusable EncryptionConfiguration: `errors` are `field.path: message` lines."""

    def __init__(self, source: str, errors: Sequence[str]) -> None:
        self.source = source
        self.errors = list(errors)
        super().__init__("\n".join(f"{source}: {e}" for e in self.errors))


class DecryptError(ValueError):
    """A stored value that cannot be read back."""


class _Cipher(Protocol):
    def seal(self, data: bytes, aad: bytes) -> bytes: ...
    def open(self, data: bytes, aad: bytes) -> bytes: ...


class _AESGCM:
    def __init__(self, key: bytes) -> None:
        self._aead = AESGCM(key)

    def seal(self, data: bytes, aad: bytes) -> bytes:
        nonce = os.urandom(GCM_NONCE)
        return nonce + self._aead.encrypt(nonce, data, aad)

    def open(self, data: bytes, aad: bytes) -> bytes:
        if len(data) < GCM_NONCE + 16:
            raise DecryptError("the stored data was shorter than the required size")
        try:
            return self._aead.decrypt(data[:GCM_NONCE], data[GCM_NONCE:], aad)
        except InvalidTag:
            raise DecryptError("message authentication failed (wrong key, or the value was altered or moved "
                               "to another key)") from None


class _Secretbox:
    def __init__(self, key: bytes) -> None:
        self._box = nacl.secret.SecretBox(key)

    def seal(self, data: bytes, aad: bytes) -> bytes:
        return bytes(self._box.encrypt(data))  # nonce (24 bytes) + box, as Go's secretbox.Seal(nonce, ...)

    def open(self, data: bytes, aad: bytes) -> bytes:
        if len(data) < nacl.secret.SecretBox.NONCE_SIZE + nacl.secret.SecretBox.MACBYTES:
            raise DecryptError("the stored data was shorter than the required size")
        try:
            return bytes(self._box.decrypt(data))
        except nacl.exceptions.CryptoError:
            raise DecryptError("decryption failed (wrong key, or the value was altered)") from None


@dataclass(frozen=True)
class Provider:
    """One entry of `providers`: a kind and its named keys (identity: none)."""

    kind: str  # aesgcm | secretbox | identity
    keys: tuple[tuple[str, _Cipher], ...] = ()

    @property
    def prefix(self) -> bytes:
        return {"aesgcm": AESGCM_PREFIX, "secretbox": SECRETBOX_PREFIX}.get(self.kind, b"")

    def encrypt(self, data: bytes, aad: bytes) -> bytes:
        if self.kind == "identity":
            return data
        name, cipher = self.keys[0]
        return self.prefix + name.encode() + b":" + cipher.seal(data, aad)

    def decrypt(self, data: bytes, aad: bytes) -> tuple[bytes, bool]:
        """(plain value, stale: not written with this provider's first key)."""
        if self.kind == "identity":
            if data.startswith(ENCRYPTED_PREFIX):
                raise DecryptError("identity transformer tried to read encrypted data")
            return data, False
        rest = data[len(self.prefix):]
        errors = []
        for i, (name, cipher) in enumerate(self.keys):
            tag = name.encode() + b":"
            if rest.startswith(tag):
                try:
                    return cipher.open(rest[len(tag):], aad), i != 0
                except DecryptError as e:
                    errors.append(f"key {name!r}: {e}")
        if errors:
            raise DecryptError("; ".join(errors))
        shown = rest.split(b":", 1)[0][:64].decode(errors="replace")
        raise DecryptError(f"no matching key was found for the provided {self.kind} transformer "
                           f"(the value names key {shown!r})")


@dataclass(frozen=True)
class ResourceTransformer:
    """The providers of one resource: the first encrypts, each (by prefix) decrypts."""

    resource: str
    providers: tuple[Provider, ...]

    def encrypt(self, data: bytes, storage_key: str) -> bytes:
        return self.providers[0].encrypt(data, storage_key.encode())

    def decrypt(self, data: bytes, storage_key: str) -> tuple[bytes, bool]:
        errors = []
        for i, p in enumerate(self.providers):
            if data.startswith(p.prefix):
                try:
                    plain, stale = p.decrypt(data, storage_key.encode())
                except DecryptError as e:
                    if p.kind != "identity":
                        errors.append(f"{p.kind}: {e}")
                    continue
                return plain, stale or i != 0
        if errors:
            raise DecryptError(f"cannot decrypt {self.resource} at {storage_key}: " + "; ".join(errors))
        prefix = _shown_prefix(data)
        raise DecryptError(f"cannot decrypt {self.resource} at {storage_key}: no matching prefix found"
                           + (f" (stored with {prefix!r}, which no configured provider reads)" if prefix else ""))


def _shown_prefix(data: bytes) -> str:
    m = re.match(rb"k8s:enc:[a-z0-9]+:v[0-9]+:", data)
    return m.group(0).decode() if m else ""


def _group_resource(value: str) -> tuple[str, str]:
    """schema.ParseGroupResource: "secrets" -> ("", "secrets"); "deployments.apps" -> ("apps",
    "deployments"); "*." -> ("", "*")."""
    resource, _, group = value.partition(".")
    return group, resource


@dataclass(frozen=True)
class EncryptionConfig:
    """Which resources are encrypted how. `for_resource` and `for_key` give the transformer (or
    None: stored plain)."""

    transformers: Mapping[tuple[str, str], ResourceTransformer]

    def for_resource(self, group: str, resource: str) -> ResourceTransformer | None:
        for key in ((group, resource), (group, "*"), ("*", "*")):
            t = self.transformers.get(key)
            if t is not None:
                return t
        return None

    def for_key(self, storage_key: str) -> ResourceTransformer | None:
        """By the store's key layout `/registry/<group>/<resource>/...` (`core` for group "")."""
        parts = storage_key.split("/")
        if len(parts) < 4 or parts[1] != "registry":
            return None
        group = "" if parts[2] == "core" else parts[2]
        return self.for_resource(group, parts[3])

    def encrypt(self, storage_key: str, data: bytes) -> bytes:
        t = self.for_key(storage_key)
        return data if t is None else t.encrypt(data, storage_key)

    def decrypt(self, storage_key: str, data: bytes) -> tuple[bytes, bool]:
        t = self.for_key(storage_key)
        if t is not None:
            return t.decrypt(data, storage_key)
        if data.startswith(ENCRYPTED_PREFIX):
            raise DecryptError(f"cannot decrypt {storage_key}: the value is encrypted "
                               f"({_shown_prefix(data) or 'k8s:enc:'}) but no provider is configured for it")
        return data, False


# ---- parsing and validation (upstream's rules and wording) ----


def _validate_resource_names(resources: list[Any], path: str, errors: list[str]) -> None:
    for j, res in enumerate(resources):
        p = f"{path}[{j}]"
        if not isinstance(res, str) or not res:
            errors.append(f"{p}: Required value: a resource name")
            continue
        group, name = _group_resource(res)
        if res != res.lower():
            errors.append(f'{p}: Invalid value: "{res}": resource name should not contain capital letters')
        elif res == "*":
            errors.append(f'{p}: Invalid value: "*": use \'*.\' to encrypt all the resources from core API group '
                          "or *.* to encrypt all resources")
        elif res in ("apiserveripinfo", "serviceipallocations", "servicenodeportallocations"):
            errors.append(f'{p}: Invalid value: "{res}": resources which do not have REST API/s cannot be encrypted')
        elif group == "events.k8s.io":
            errors.append(f"{p}: Invalid value: \"{res}\": '*.events.k8s.io' objects are stored using the 'events' "
                          "API group in etcd. Use 'events' instead in the config file")
        elif group == "extensions":
            errors.append(f"{p}: Invalid value: \"{res}\": 'extensions' group has been removed and cannot be used "
                          "for encryption")
        elif group == "*" and name != "*":
            errors.append(f'{p}: Invalid value: "{res}": encrypting the same resource across groups is not supported')
    parsed = [_group_resource(r) for r in resources if isinstance(r, str)]
    if len(set(parsed)) != len(parsed):
        errors.append(f"{path}: Invalid value: {resources}: the same resource cannot be specified multiple times")
    distinct = set(parsed)
    if len(distinct) > 1 and (("*", "*") in distinct or any(
            name == "*" and any(g2 == g and n2 != "*" for g2, n2 in distinct) for g, name in distinct)):
        errors.append(f"{path}: Invalid value: {resources}: using overlapping resources such as 'secrets' and '*.' "
                      "in the same resource list is not allowed as they will be masked")


def _keys(spec: Any, path: str, sizes: tuple[int, ...], errors: list[str]) -> list[tuple[str, bytes]]:
    keys = spec.get("keys") if isinstance(spec, Mapping) else None
    if not keys or not isinstance(keys, list):
        errors.append(f"{path}.keys: Required value: at least one keys is required")
        return []
    out: list[tuple[str, bytes]] = []
    names: set[str] = set()
    for i, key in enumerate(keys):
        p = f"{path}.keys[{i}]"
        if not isinstance(key, Mapping):
            errors.append(f"{p}: Invalid value: must be a mapping with name and secret")
            continue
        name, secret = key.get("name"), key.get("secret")
        if not isinstance(name, str) or not name:
            errors.append(f"{p}.name: Required value: name is a mandatory field for a key")
        elif ":" in name:
            errors.append(f'{p}.name: Invalid value: "{name}": must not contain ":" (it ends the key\'s prefix)')
        elif name in names:
            errors.append(f'{p}.name: Duplicate value: "{name}"')
        if not isinstance(secret, str) or not secret:
            errors.append(f"{p}.secret: Required value: secret is a mandatory field for a key")
            continue
        try:
            raw = base64.b64decode(secret, validate=True)
        except (binascii.Error, ValueError):
            errors.append(f'{p}.secret: Invalid value: "REDACTED": secrets must be base64 encoded')
            continue
        if len(raw) not in sizes:
            errors.append(f'{p}.secret: Invalid value: "REDACTED": secret is not of the expected length, got '
                          f"{len(raw)}, expected one of {list(sizes)}")
            continue
        if isinstance(name, str) and name and ":" not in name and name not in names:
            names.add(name)
            out.append((name, raw))
    return out


def _provider(entry: Any, path: str, errors: list[str]) -> Provider | None:
    if not isinstance(entry, Mapping):
        errors.append(f"{path}: Invalid value: must be a mapping naming one provider")
        return None
    known = [k for k in ("aesgcm", "aescbc", "secretbox", "identity", "kms") if k in entry]
    unknown = sorted(set(entry) - set(known))
    if unknown:
        errors.append(f"{path}: unknown field {unknown[0]!r}")
        return None
    if not known:
        errors.append(f"{path}: Invalid value: provider does not contain any of the expected providers: "
                      "KMS, AESGCM, AESCBC, Secretbox, Identity")
        return None
    if len(known) > 1:
        errors.append(f"{path}: Invalid value: more than one provider specified in a single element, should split "
                      "into different list elements")
        return None
    kind = known[0]
    if kind in ("aescbc", "kms"):
        errors.append(f"{path}.{kind}: Unsupported value: this server supports aesgcm, secretbox and identity")
        return None
    if kind == "identity":
        return Provider("identity")
    sizes = AES_KEY_SIZES if kind == "aesgcm" else SECRETBOX_KEY_SIZES
    keys = _keys(entry[kind], f"{path}.{kind}", sizes, errors)
    if not keys:
        return None
    make = _AESGCM if kind == "aesgcm" else _Secretbox
    return Provider(kind, tuple((name, make(raw)) for name, raw in keys))


def parse_encryption_config(data: Any, source: str) -> EncryptionConfig:
    """An EncryptionConfiguration's plain data -> EncryptionConfig; EncryptionConfigError lists
    every problem with its field path (secrets are never shown)."""
    if not isinstance(data, Mapping):
        raise EncryptionConfigError(source, ["(root): expected an EncryptionConfiguration mapping"])
    errors: list[str] = []
    if data.get("kind") != KIND or data.get("apiVersion") != API_VERSION:
        errors.append(f'kind: got unexpected config type: {data.get("apiVersion")}, Kind={data.get("kind")} '
                      f"(want {API_VERSION}, Kind={KIND})")
    for extra in sorted(set(data) - {"kind", "apiVersion", "resources"}):
        errors.append(f"{extra}: unknown field")
    resources = data.get("resources")
    if not resources or not isinstance(resources, list):
        errors.append("resources: Required value: at least one resources is required")
        raise EncryptionConfigError(source, errors)
    transformers: dict[tuple[str, str], ResourceTransformer] = {}
    for i, conf in enumerate(resources):
        base = f"resources[{i}]"
        if not isinstance(conf, Mapping):
            errors.append(f"{base}: Invalid value: must be a mapping with resources and providers")
            continue
        for extra in sorted(set(conf) - {"resources", "providers"}):
            errors.append(f"{base}.{extra}: unknown field")
        names, providers = conf.get("resources"), conf.get("providers")
        if not names or not isinstance(names, list):
            errors.append(f"{base}.resources: Required value: at least one {base}.resources is required")
            names = []
        else:
            _validate_resource_names(names, f"{base}.resources", errors)
        parsed: list[Provider] = []
        if not providers or not isinstance(providers, list):
            errors.append(f"{base}.providers: Required value: at least one {base}.providers is required")
        else:
            for j, entry in enumerate(providers):
                p = _provider(entry, f"{base}.providers[{j}]", errors)
                if p is not None:
                    parsed.append(p)
        if errors:
            continue
        for res in names:
            gr = _group_resource(res)
            for masking in ((gr[0], "*"), ("*", "*")):
                if masking in transformers and masking != gr:
                    errors.append(f'{base}.resources: resource "{res}" is masked by earlier rule '
                                  f'"{masking[1]}.{masking[0]}"')
            if gr in transformers:
                errors.append(f'{base}.resources: resource "{res}" is already configured by an earlier entry')
            transformers[gr] = ResourceTransformer(res, tuple(parsed))
    if errors:
        raise EncryptionConfigError(source, errors)
    return EncryptionConfig(transformers)


def load_encryption_config(path: str | Path) -> EncryptionConfig:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise EncryptionConfigError(str(path), [f"cannot read: {getattr(e, 'strerror', None) or e}"]) from None
    if not text.strip():
        raise EncryptionConfigError(str(path), ["encryption provider configuration file is empty"])
    try:
        data = read_yaml(text, str(path))
    except ConfigError as e:
        raise EncryptionConfigError(str(path), e.errors) from None
    return parse_encryption_config(data, str(path))
