"""Encryption at rest (EncryptionConfiguration): round trips, key rotation, tamper detection,
upstream's stored format and validation wording."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import nacl.secret
import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeagent.cluster.auth.encryption import (
    DecryptError,
    EncryptionConfig,
    EncryptionConfigError,
    load_encryption_config,
    parse_encryption_config,
)

K16, K32, K32B = os.urandom(16), os.urandom(32), os.urandom(32)
KEY = "/registry/core/secrets/default/db"
PLAIN = b'{"kind":"Secret","data":{"password":"aHVudGVyMg=="}}'


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def conf(*providers: dict[str, Any], resources: list[str] | None = None) -> EncryptionConfig:
    return parse_encryption_config({"apiVersion": "apiserver.config.k8s.io/v1", "kind": "EncryptionConfiguration",
                                    "resources": [{"resources": resources or ["secrets"],
                                                   "providers": list(providers)}]}, "enc.yaml")


def aesgcm(*keys: tuple[str, bytes]) -> dict[str, Any]:
    return {"aesgcm": {"keys": [{"name": n, "secret": b64(k)} for n, k in keys]}}


def secretbox(*keys: tuple[str, bytes]) -> dict[str, Any]:
    return {"secretbox": {"keys": [{"name": n, "secret": b64(k)} for n, k in keys]}}


IDENTITY: dict[str, Any] = {"identity": {}}


@pytest.mark.parametrize("provider", [aesgcm(("k1", K16)), aesgcm(("k1", K32)), secretbox(("k1", K32))])
def test_round_trip(provider: dict[str, Any]) -> None:
    c = conf(provider)
    stored = c.encrypt(KEY, PLAIN)
    assert PLAIN not in stored and b"aHVudGVyMg" not in stored
    assert c.decrypt(KEY, stored) == (PLAIN, False)
    assert c.encrypt(KEY, PLAIN) != stored  # a fresh nonce each time


def test_upstream_stored_format() -> None:
    stored = conf(aesgcm(("key1", K32))).encrypt(KEY, PLAIN)
    prefix = b"k8s:enc:aesgcm:v1:key1:"
    assert stored.startswith(prefix)
    body = stored[len(prefix):]
    # nonce (12) + AES-GCM with the storage key as additional data, as kube-apiserver writes it
    assert AESGCM(K32).decrypt(body[:12], body[12:], KEY.encode()) == PLAIN
    boxed = conf(secretbox(("sb", K32))).encrypt(KEY, PLAIN)
    assert boxed.startswith(b"k8s:enc:secretbox:v1:sb:")
    assert nacl.secret.SecretBox(K32).decrypt(boxed[len(b"k8s:enc:secretbox:v1:sb:"):]) == PLAIN


def test_only_configured_resources_are_encrypted() -> None:
    c = conf(aesgcm(("k", K32)), resources=["secrets", "configmaps.", "deployments.apps"])
    assert c.encrypt("/registry/core/configmaps/ns/c", b"x").startswith(b"k8s:enc:")
    assert c.encrypt("/registry/apps/deployments/ns/d", b"x").startswith(b"k8s:enc:")
    assert c.encrypt("/registry/core/pods/ns/p", b"x") == b"x"
    assert c.decrypt("/registry/core/pods/ns/p", b"x") == (b"x", False)
    everything_core = conf(aesgcm(("k", K32)), resources=["*."])
    assert everything_core.encrypt("/registry/core/pods/ns/p", b"x").startswith(b"k8s:enc:")
    assert everything_core.encrypt("/registry/apps/deployments/ns/d", b"x") == b"x"
    assert conf(aesgcm(("k", K32)), resources=["*.*"]).encrypt("/registry/apps/deployments/a/b", b"x") != b"x"


def test_key_rotation() -> None:
    old = conf(aesgcm(("old", K32)))
    written_old = old.encrypt(KEY, PLAIN)
    # step 1: the new key first, the old one still listed: old values read (stale), new writes use the new key
    both = conf(aesgcm(("new", K32B), ("old", K32)))
    assert both.decrypt(KEY, written_old) == (PLAIN, True)
    rewritten = both.encrypt(KEY, PLAIN)
    assert rewritten.startswith(b"k8s:enc:aesgcm:v1:new:")
    assert both.decrypt(KEY, rewritten) == (PLAIN, False)
    # step 2: the old key dropped: rewritten values still read, old ones fail clearly
    new = conf(aesgcm(("new", K32B)))
    assert new.decrypt(KEY, rewritten) == (PLAIN, False)
    with pytest.raises(DecryptError, match="no matching key was found for the provided aesgcm transformer"):
        new.decrypt(KEY, written_old)


def test_rotation_across_providers_and_to_plain() -> None:
    boxed = conf(secretbox(("sb", K32))).encrypt(KEY, PLAIN)
    migrating = conf(aesgcm(("a", K32B)), secretbox(("sb", K32)), IDENTITY)
    assert migrating.decrypt(KEY, boxed) == (PLAIN, True)  # read by the second provider: stale
    assert migrating.decrypt(KEY, PLAIN) == (PLAIN, True)  # plain values from before encryption
    # decrypting away from encryption: identity first, the old provider still listed
    away = conf(IDENTITY, secretbox(("sb", K32)))
    assert away.encrypt(KEY, PLAIN) == PLAIN
    assert away.decrypt(KEY, boxed) == (PLAIN, True)


def test_wrong_key() -> None:
    stored = conf(aesgcm(("k", K32))).encrypt(KEY, PLAIN)
    with pytest.raises(DecryptError, match=r"cannot decrypt secrets at /registry/core/secrets/default/db: "
                                           r"aesgcm: key 'k': message authentication failed"):
        conf(aesgcm(("k", K32B))).decrypt(KEY, stored)
    boxed = conf(secretbox(("k", K32))).encrypt(KEY, PLAIN)
    with pytest.raises(DecryptError, match="secretbox: key 'k': decryption failed"):
        conf(secretbox(("k", K32B))).decrypt(KEY, boxed)


@pytest.mark.parametrize("provider", [aesgcm(("k", K32)), secretbox(("k", K32))])
def test_tampering_is_detected(provider: dict[str, Any]) -> None:
    c = conf(provider)
    stored = bytearray(c.encrypt(KEY, PLAIN))
    for i in (len(stored) - 1, len(stored) - 20, len(b"k8s:enc:aesgcm:v1:k:") + 2):
        tampered = bytearray(stored)
        tampered[i] ^= 0x01
        with pytest.raises(DecryptError):
            c.decrypt(KEY, bytes(tampered))
    with pytest.raises(DecryptError, match="shorter than the required size"):
        c.decrypt(KEY, bytes(stored[: len(b"k8s:enc:aesgcm:v1:k:") + 5]))


def test_a_value_moved_to_another_key_does_not_decrypt() -> None:
    c = conf(aesgcm(("k", K32)))
    stored = c.encrypt(KEY, PLAIN)
    with pytest.raises(DecryptError, match="authentication failed"):
        c.decrypt("/registry/core/secrets/default/other", stored)


def test_unknown_prefix_and_encrypted_without_config() -> None:
    c = conf(aesgcm(("k", K32)))
    with pytest.raises(DecryptError, match=r"no matching prefix found \(stored with 'k8s:enc:kms:v2:'"):
        c.decrypt(KEY, b"k8s:enc:kms:v2:foo:bar")
    with pytest.raises(DecryptError, match="no matching prefix found"):
        c.decrypt(KEY, PLAIN)  # plain value, identity not listed
    stored = c.encrypt(KEY, PLAIN)
    with pytest.raises(DecryptError, match="the value is encrypted .* but no provider is configured"):
        conf(aesgcm(("k", K32)), resources=["configmaps"]).decrypt(KEY, stored)
    with pytest.raises(DecryptError, match="stored with 'k8s:enc:aesgcm:v1:', which no configured provider reads"):
        conf(IDENTITY).decrypt(KEY, stored)  # identity never passes encrypted data through


def _errors(data: Any) -> list[str]:
    with pytest.raises(EncryptionConfigError) as exc:
        parse_encryption_config(data, "enc.yaml")
    return exc.value.errors


def _doc(resources: list[Any]) -> dict[str, Any]:
    return {"apiVersion": "apiserver.config.k8s.io/v1", "kind": "EncryptionConfiguration", "resources": resources}


INVALID = [
    ({"kind": "Other", "apiVersion": "v1", "resources": []}, "kind: got unexpected config type"),
    (_doc([]), "resources: Required value: at least one resources is required"),
    (_doc([{"providers": [IDENTITY]}]), "resources[0].resources: Required value"),
    (_doc([{"resources": ["secrets"]}]), "resources[0].providers: Required value"),
    (_doc([{"resources": ["Secrets"], "providers": [IDENTITY]}]),
     'resources[0].resources[0]: Invalid value: "Secrets": resource name should not contain capital letters'),
    (_doc([{"resources": ["*"], "providers": [IDENTITY]}]), "use '*.' to encrypt all the resources from core API group"),
    (_doc([{"resources": ["events.events.k8s.io"], "providers": [IDENTITY]}]), "Use 'events' instead"),
    (_doc([{"resources": ["secrets", "secrets"], "providers": [IDENTITY]}]),
     "the same resource cannot be specified multiple times"),
    (_doc([{"resources": ["secrets", "*."], "providers": [IDENTITY]}]), "using overlapping resources"),
    (_doc([{"resources": ["pods.*"], "providers": [IDENTITY]}]), "encrypting the same resource across groups"),
    (_doc([{"resources": ["*.*"], "providers": [IDENTITY]}, {"resources": ["secrets"], "providers": [IDENTITY]}]),
     'resource "secrets" is masked by earlier rule "*.*"'),
    (_doc([{"resources": ["secrets"], "providers": [{}]}]),
     "provider does not contain any of the expected providers: KMS, AESGCM, AESCBC, Secretbox, Identity"),
    (_doc([{"resources": ["secrets"], "providers": [{"identity": {}, "aesgcm": {"keys": []}}]}]),
     "more than one provider specified in a single element"),
    (_doc([{"resources": ["secrets"], "providers": [{"aescbc": {"keys": []}}]}]),
     "resources[0].providers[0].aescbc: Unsupported value"),
    (_doc([{"resources": ["secrets"], "providers": [{"aesgcm": {"keys": []}}]}]),
     "resources[0].providers[0].aesgcm.keys: Required value: at least one keys is required"),
    (_doc([{"resources": ["secrets"], "providers": [{"aesgcm": {"keys": [{"secret": b64(K32)}]}}]}]),
     "resources[0].providers[0].aesgcm.keys[0].name: Required value: name is a mandatory field for a key"),
    (_doc([{"resources": ["secrets"], "providers": [{"aesgcm": {"keys": [{"name": "a:b", "secret": b64(K32)}]}}]}]),
     'keys[0].name: Invalid value: "a:b": must not contain ":"'),
    (_doc([{"resources": ["secrets"], "providers": [{"aesgcm": {"keys": [{"name": "k", "secret": "%%%"}]}}]}]),
     'keys[0].secret: Invalid value: "REDACTED": secrets must be base64 encoded'),
    (_doc([{"resources": ["secrets"], "providers": [{"aesgcm": {"keys": [{"name": "k", "secret": b64(b"x" * 20)}]}}]}]),
     "secret is not of the expected length, got 20, expected one of [16, 24, 32]"),
    (_doc([{"resources": ["secrets"], "providers": [{"secretbox": {"keys": [{"name": "k", "secret": b64(K16)}]}}]}]),
     "secret is not of the expected length, got 16, expected one of [32]"),
    (_doc([{"resources": ["secrets"], "providers": [aesgcm(("k", K32), ("k", K16))]}]), 'Duplicate value: "k"'),
    ({**_doc([{"resources": ["secrets"], "providers": [IDENTITY]}]), "extra": 1}, "extra: unknown field"),
]


@pytest.mark.parametrize(("data", "message"), INVALID)
def test_invalid_configuration_names_the_field(data: Any, message: str) -> None:
    errors = _errors(data)
    assert any(message in e for e in errors), errors
    assert all(b64(K32) not in e and b64(K16) not in e for e in errors), "a key leaked into an error"


def test_load_from_file(tmp_path: Path) -> None:
    path = tmp_path / "enc.yaml"
    path.write_text(f"""apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
  - resources: [secrets]
    providers:
      - secretbox:
          keys: [{{name: key1, secret: {b64(K32)}}}]
      - identity: {{}}
""")
    c = load_encryption_config(path)
    assert c.decrypt(KEY, c.encrypt(KEY, PLAIN)) == (PLAIN, False)
    path.write_text("")
    with pytest.raises(EncryptionConfigError, match="is empty"):
        load_encryption_config(path)
    path.write_text("resources: [\n")
    with pytest.raises(EncryptionConfigError, match="invalid YAML"):
        load_encryption_config(path)
    with pytest.raises(EncryptionConfigError, match="cannot read"):
        load_encryption_config(tmp_path / "missing.yaml")


CONF_KEYS = st.sampled_from(["apiVersion", "kind", "resources", "providers", "aesgcm", "secretbox", "identity", "keys",
                             "name", "secret", "aescbc", "kms"])
CONF_LIKE = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=10) | st.just(b64(K32)),
                         lambda kids: st.lists(kids, max_size=3) | st.dictionaries(CONF_KEYS, kids, max_size=4),
                         max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(CONF_LIKE)
def test_malformed_configuration_is_always_a_clear_error(data: Any) -> None:
    doc = {"apiVersion": "apiserver.config.k8s.io/v1", "kind": "EncryptionConfiguration", "resources": data}
    for candidate in (data, doc):
        try:
            parse_encryption_config(candidate, "enc.yaml")
        except EncryptionConfigError as e:
            assert e.errors  # every problem named; only this error type, never a crash
