"""Signed bearer tokens: service accounts (for workloads) and node identities (for agents).

Service-account tokens are kube-apiserver's bound tokens: a JWT signed with the server's key
(--service-account-signing-key-file), `iss` the server's issuer, `sub`
`system:serviceaccount:<ns>:<name>`, `aud`, `iat`/`nbf`/`exp`, `jti`, and the private claim
`kubernetes.io: {namespace, serviceaccount: {name, uid}, pod?: {name, uid}, node?: {...}}`. The
user is the service account in groups `system:serviceaccounts` and
`system:serviceaccounts:<ns>`, with the pod and node bindings and the credential id in `extra`.

Node tokens are ours: upstream kubelets present client certificates with CN `system:node:<name>`
and O `system:nodes`; an agent here may use such a certificate (pki.issue_client_certificate) or
this token, whose `sub` is `system:node:<name>` and whose private claim `nodeagent.io: {node}`
says it was issued as a node identity (a service-account claim never makes a node, nor the
reverse). The user is `system:node:<name>` in `system:nodes`.

PyJWT does the JWS work (a well-kept library, on `cryptography`); expiry is checked here against
the injectable clock, with upstream's one minute of leeway. A token whose issuer is not ours is
not ours (None: another authenticator may know it); ours but bad is a TokenError (401).
Verified tokens are cached by digest, so a busy client costs one signature check per token; the
revocation look-ups (the service account, the bound pod) run on every request, against the
server's in-memory objects.
"""

from __future__ import annotations

import base64
import hashlib
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import jwt
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from nodeagent.cluster.auth.user import (
    CREDENTIAL_ID_KEY,
    NODE_NAME_KEY,
    NODE_UID_KEY,
    NODE_USER_PREFIX,
    NODES_GROUP,
    POD_NAME_KEY,
    POD_UID_KEY,
    SERVICE_ACCOUNT_USER_PREFIX,
    UserInfo,
    frozen_extra,
    service_account_groups,
    service_account_username,
)
from nodeagent.core.clock import Clock, SystemClock

DEFAULT_ISSUER = "https://kubernetes.default.svc.cluster.local"
LEEWAY_SECONDS = 60  # go-jose's DefaultLeeway, which upstream's validator uses
MIN_EXPIRATION_SECONDS = 600  # TokenRequest: "may not specify a duration less than 10 minutes"
PRIVATE_CLAIM = "kubernetes.io"
NODE_CLAIM = "nodeagent.io"
CACHE_SIZE = 4096

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey
PublicKey = ec.EllipticCurvePublicKey | rsa.RSAPublicKey


class TokenError(ValueError):
    """A token that is ours but not valid (expired, bad signature, revoked ...): 401."""


class KeyFileError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class ObjectRef:
    name: str
    uid: str = ""


class ServiceAccountLookup(Protocol):
    """The server's current objects, for revocation: a token whose service account (or bound pod)
    is gone, or was re-created with another uid, is no longer valid. None means absent."""

    def service_account_uid(self, namespace: str, name: str) -> str | None: ...
    def pod_uid(self, namespace: str, name: str) -> str | None: ...


def _algorithm(key: PrivateKey | PublicKey) -> str:
    if isinstance(key, (rsa.RSAPrivateKey, rsa.RSAPublicKey)):
        return "RS256"
    curve = key.curve.name
    return {"secp256r1": "ES256", "secp384r1": "ES384", "secp521r1": "ES512"}.get(curve, "")


def key_id(public_key: PublicKey) -> str:
    """Upstream's key id: unpadded base64url of the SHA-256 of the DER (PKIX) public key."""
    der = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return base64.urlsafe_b64encode(hashlib.sha256(der).digest()).rstrip(b"=").decode()


def generate_signing_key() -> ec.EllipticCurvePrivateKey:
    """A new ECDSA P-256 key (ES256: small tokens, fast to make)."""
    return ec.generate_private_key(ec.SECP256R1())


def load_private_key(pem: bytes, source: str) -> PrivateKey:
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as e:
        raise KeyFileError(f"{source}: not a PEM private key: {e}") from None
    if not isinstance(key, (ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey)) or not _algorithm(key):
        raise KeyFileError(f"{source}: the signing key must be RSA or ECDSA (P-256, P-384, P-521)")
    return key


def load_public_keys(pem: bytes, source: str) -> list[PublicKey]:
    """Every key of a PEM file (--service-account-key-file): public keys, certificates or private
    keys, RSA or ECDSA, several blocks allowed (old keys kept for rotation)."""
    keys: list[PublicKey] = []
    blocks = [b for b in pem.split(b"-----END ") if b"-----BEGIN " in b]
    for block in blocks:
        text = block[block.index(b"-----BEGIN "):]
        label = text[len(b"-----BEGIN "):text.index(b"-----", len(b"-----BEGIN "))]
        whole = text + b"-----END " + label + b"-----\n"
        try:
            if label == b"CERTIFICATE":
                pub: object = x509.load_pem_x509_certificate(whole).public_key()
            elif label.endswith(b"PRIVATE KEY"):
                pub = serialization.load_pem_private_key(whole, password=None).public_key()
            else:
                pub = serialization.load_pem_public_key(whole)
        except (ValueError, TypeError) as e:
            raise KeyFileError(f"{source}: cannot read the {label.decode(errors='replace')} block: {e}") from None
        if isinstance(pub, (ec.EllipticCurvePublicKey, rsa.RSAPublicKey)) and _algorithm(pub):
            keys.append(pub)
        else:
            raise KeyFileError(f"{source}: only RSA and ECDSA (P-256, P-384, P-521) keys verify tokens")
    if not keys:
        raise KeyFileError(f"{source}: no PEM keys found")
    return keys


def private_key_pem(key: PrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def public_key_pem(key: PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


class TokenIssuer:
    """Signs tokens with the server's key (the TokenRequest API and `nodeagent server` use it)."""

    def __init__(self, key: PrivateKey, issuer: str = DEFAULT_ISSUER, clock: Clock | None = None) -> None:
        self._key = key
        self._alg = _algorithm(key)
        self._kid = key_id(key.public_key())
        self.issuer = issuer
        self.clock = clock or SystemClock()

    def _sign(self, claims: dict[str, Any]) -> str:
        return jwt.encode(claims, self._key, algorithm=self._alg, headers={"kid": self._kid})

    def _times(self, expiration_seconds: int) -> dict[str, int]:
        if expiration_seconds < MIN_EXPIRATION_SECONDS:
            raise ValueError(f"may not specify a duration less than {MIN_EXPIRATION_SECONDS // 60} minutes")
        now = int(self.clock.wall())
        return {"iat": now, "nbf": now, "exp": now + expiration_seconds}

    def service_account_token(self, namespace: str, name: str, uid: str, *, audiences: Sequence[str],
                              expiration_seconds: int = 3600, pod: ObjectRef | None = None,
                              node: ObjectRef | None = None) -> str:
        private: dict[str, Any] = {"namespace": namespace, "serviceaccount": {"name": name, "uid": uid}}
        if pod is not None:
            private["pod"] = {"name": pod.name, "uid": pod.uid}
        if node is not None:
            private["node"] = {"name": node.name, "uid": node.uid}
        return self._sign({"iss": self.issuer, "sub": service_account_username(namespace, name),
                           "aud": list(audiences), "jti": str(uuid.uuid4()),
                           **self._times(expiration_seconds), PRIVATE_CLAIM: private})

    def node_token(self, node: str, *, audiences: Sequence[str], expiration_seconds: int = 365 * 86400) -> str:
        """An agent's identity: `system:node:<node>` in system:nodes."""
        return self._sign({"iss": self.issuer, "sub": NODE_USER_PREFIX + node, "aud": list(audiences),
                           "jti": str(uuid.uuid4()), **self._times(expiration_seconds),
                           NODE_CLAIM: {"node": node}})


@dataclass(frozen=True, slots=True)
class _Verified:
    user: UserInfo
    not_before: int
    expires: int
    namespace: str = ""
    service_account: ObjectRef | None = None
    pod: ObjectRef | None = None


def _ref(value: object, what: str) -> ObjectRef:
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or not value["name"]:
        raise TokenError(f"service account token claims could not be validated: {what} has no name")
    uid = value.get("uid", "")
    return ObjectRef(value["name"], uid if isinstance(uid, str) else "")


class TokenVerifier:
    """The token authenticator for signed tokens (`authenticate_token`)."""

    def __init__(self, public_keys: Iterable[PublicKey], *, issuers: Sequence[str] = (DEFAULT_ISSUER,),
                 audiences: Sequence[str] = (), lookup: ServiceAccountLookup | None = None,
                 clock: Clock | None = None, cache_size: int = CACHE_SIZE) -> None:
        self._keys: dict[str, PublicKey] = {key_id(k): k for k in public_keys}
        if not self._keys:
            raise ValueError("at least one public key is needed to verify tokens")
        self.issuers = frozenset(issuers)
        self.audiences = tuple(audiences) or tuple(issuers)
        self.lookup = lookup
        self.clock = clock or SystemClock()
        self._cache: OrderedDict[bytes, _Verified] = OrderedDict()
        self._cache_size = cache_size

    def authenticate_token(self, token: str) -> UserInfo | None:
        if token.count(".") != 2:
            return None  # not a JWS compact serialization: another authenticator's token
        digest = hashlib.sha256(token.encode()).digest()
        verified = self._cache.get(digest)
        if verified is None:
            verified = self._verify(token)
            if verified is None:
                return None
            self._cache[digest] = verified
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(digest)
        self._check_time(verified)
        self._check_lookups(verified)
        return verified.user

    def _verify(self, token: str) -> _Verified | None:
        try:
            unverified = jwt.decode(token, options={"verify_signature": False})
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            return None  # not a JWT
        if unverified.get("iss") not in self.issuers:
            return None  # someone else's token
        kid = header.get("kid")
        keys = [self._keys[kid]] if isinstance(kid, str) and kid in self._keys else list(self._keys.values())
        claims: dict[str, Any] | None = None
        for key in keys:
            try:
                claims = jwt.decode(token, key, algorithms=[_algorithm(key)],
                                    options={"verify_exp": False, "verify_nbf": False, "verify_iat": False,
                                             "verify_aud": False, "verify_iss": False})
                break
            except jwt.InvalidSignatureError:
                continue
            except jwt.PyJWTError as e:
                raise TokenError(f"invalid token: {e}") from None
        if claims is None:
            raise TokenError("invalid token: the signature does not verify with any of the server's keys")
        aud = claims.get("aud")
        token_auds = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
        if not set(token_auds) & set(self.audiences):
            raise TokenError(f"token audiences {token_auds} is invalid for the target audiences {list(self.audiences)}")
        exp, nbf = claims.get("exp"), claims.get("nbf", claims.get("iat", 0))
        if not isinstance(exp, int) or not isinstance(nbf, int):
            raise TokenError("service account token claims could not be validated: exp and nbf must be numbers")
        sub = claims.get("sub")
        if not isinstance(sub, str):
            raise TokenError("service account token claims could not be validated: no subject")
        jti = claims.get("jti")
        credential = {CREDENTIAL_ID_KEY: f"JTI={jti}"} if isinstance(jti, str) and jti else {}
        if sub.startswith(SERVICE_ACCOUNT_USER_PREFIX) and NODE_CLAIM not in claims:
            return self._service_account(claims, sub, credential, nbf, exp)
        node_claim = claims.get(NODE_CLAIM)
        if sub.startswith(NODE_USER_PREFIX) and PRIVATE_CLAIM not in claims and isinstance(node_claim, dict) \
                and node_claim.get("node") == sub[len(NODE_USER_PREFIX):] and node_claim["node"]:
            user = UserInfo(name=sub, groups=(NODES_GROUP,), extra=frozen_extra(credential))
            return _Verified(user, nbf, exp)
        raise TokenError(f"token subject {sub!r} is neither a service account nor a node issued by this server")

    def _service_account(self, claims: dict[str, Any], sub: str, credential: dict[str, str],
                         nbf: int, exp: int) -> _Verified:
        private = claims.get(PRIVATE_CLAIM)
        if not isinstance(private, dict):
            raise TokenError("service account token claims could not be validated: no kubernetes.io claim")
        namespace = private.get("namespace")
        if not isinstance(namespace, str) or not namespace:
            raise TokenError("service account token claims could not be validated: no namespace")
        sa = _ref(private.get("serviceaccount"), "the service account")
        if sub != service_account_username(namespace, sa.name):
            raise TokenError("service account token claims could not be validated: subject and claims differ")
        pod = _ref(private["pod"], "the pod") if "pod" in private else None
        node = _ref(private["node"], "the node") if "node" in private else None
        extras: dict[str, str] = dict(credential)
        if pod is not None:
            extras.update({POD_NAME_KEY: pod.name, POD_UID_KEY: pod.uid})
        if node is not None:
            extras.update({NODE_NAME_KEY: node.name, NODE_UID_KEY: node.uid})
        user = UserInfo(name=sub, uid=sa.uid, groups=service_account_groups(namespace), extra=frozen_extra(extras))
        return _Verified(user, nbf, exp, namespace, sa, pod)

    def _check_time(self, v: _Verified) -> None:
        now = self.clock.wall()
        if now > v.expires + LEEWAY_SECONDS:
            raise TokenError("service account token has expired")
        if now < v.not_before - LEEWAY_SECONDS:
            raise TokenError("service account token is not valid yet")

    def _check_lookups(self, v: _Verified) -> None:
        if self.lookup is None or v.service_account is None:
            return
        sa = v.service_account
        current = self.lookup.service_account_uid(v.namespace, sa.name)
        if current is None:
            raise TokenError(f'serviceaccounts "{sa.name}" not found')
        if current != sa.uid:
            raise TokenError(f"service account UID ({current}) does not match claim ({sa.uid})")
        if v.pod is not None:
            pod_uid = self.lookup.pod_uid(v.namespace, v.pod.name)
            if pod_uid is None:
                raise TokenError("service account token has been invalidated")
            if pod_uid != v.pod.uid:
                raise TokenError(f"pod UID ({pod_uid}) does not match service account pod ref claim ({v.pod.uid})")
