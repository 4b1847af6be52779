"""The request authenticator chain (upstream union semantics) and signed tokens."""

from __future__ import annotations

import base64

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from nodeagent.cluster.auth.authenticator import Anonymous, Authenticator, BearerTokenAuthenticator, bearer_token
from nodeagent.cluster.auth.request import AuthnRequest, PeerCertificate
from nodeagent.cluster.auth.serviceaccount import (
    DEFAULT_ISSUER,
    ObjectRef,
    TokenError,
    TokenIssuer,
    TokenVerifier,
    generate_signing_key,
    key_id,
    load_public_keys,
    public_key_pem,
)
from nodeagent.cluster.auth.tokenfile import TokenFile, parse_token_file
from nodeagent.cluster.auth.user import CREDENTIAL_ID_KEY, POD_NAME_KEY, POD_UID_KEY, UserInfo
from nodeagent.cluster.auth.x509 import CertificateAuthenticationError, X509Authenticator, user_from_certificate
from nodeagent.core.clock import FakeClock

TOKENS = 'admin-token,admin,u-1,"system:masters"\nalice-token,alice,u-2,dev\n'


def _req(auth: str | None = None, cert: PeerCertificate | None = None, path: str = "/api/v1/pods",
         **headers: str) -> AuthnRequest:
    h = dict(headers)
    if auth is not None:
        h["Authorization"] = auth
    return AuthnRequest(path=path, headers=h, peer_certificate=cert)


def _chain(anonymous: Anonymous | None = None, *more: object) -> Authenticator:
    tf = TokenFile(parse_token_file(TOKENS, "t")[0])
    return Authenticator([X509Authenticator(), BearerTokenAuthenticator([tf, *more])], anonymous)  # type: ignore[list-item]


BEARER_CASES = [
    ("Bearer abc", "abc"),
    ("bearer abc", "abc"),
    ("BEARER abc", "abc"),
    ("  Bearer abc  ", "abc"),
    ("Bearer abc extra", "abc"),  # upstream splits in three and takes the second
    ("Bearer  abc", None),  # an extra space: the token is empty, so no token (upstream warns)
    ("Bearer", None),
    ("Bearer ", None),
    ("Basic YWxpY2U6cHc=", None),  # another scheme: no bearer credentials
    ("", None),
]


@pytest.mark.parametrize(("header", "token"), BEARER_CASES)
def test_bearer_token_parsing(header: str, token: str | None) -> None:
    assert bearer_token(_req(header)) == token


def test_websocket_subprotocol_carries_a_token() -> None:
    enc = base64.urlsafe_b64encode(b"alice-token").rstrip(b"=").decode()
    req = _req(**{"Sec-WebSocket-Protocol": f"v5.channel.k8s.io, base64url.bearer.authorization.k8s.io.{enc}"})
    result = _chain().authenticate(req)
    assert result.user is not None and result.user.name == "alice"


def test_headers_are_found_without_regard_to_case() -> None:
    req = AuthnRequest(headers={"authorization": "Bearer alice-token"})
    assert _chain().authenticate(req).user.name == "alice"  # type: ignore[union-attr]


CHAIN_CASES = [
    # (anonymous, Authorization, certificate CN/O, expected user or None, expected groups)
    (False, "Bearer admin-token", None, "admin", ("system:masters", "system:authenticated")),
    (False, "Bearer alice-token", None, "alice", ("dev", "system:authenticated")),
    (False, "Bearer wrong", None, None, ()),
    (True, "Bearer wrong", None, None, ()),  # a wrong token is 401 even where anonymous is allowed
    (False, None, None, None, ()),  # no credentials, no anonymous: 401
    (True, None, None, "system:anonymous", ("system:unauthenticated",)),  # no system:authenticated
    (False, None, ("bob", ("ops", "dev")), "bob", ("ops", "dev", "system:authenticated")),
    (True, None, ("bob", ()), "bob", ("system:authenticated",)),
    (False, "Bearer wrong", ("bob", ()), "bob", ("system:authenticated",)),  # x509 first: its user wins
    (False, "Bearer alice-token", ("bob", ()), "bob", ("system:authenticated",)),
    (False, None, ("", ("ops",)), None, ()),  # no CN: no user
    (True, None, ("", ("ops",)), "system:anonymous", ("system:unauthenticated",)),
    (True, "Basic YWxpY2U6cHc=", None, "system:anonymous", ("system:unauthenticated",)),
]


@pytest.mark.parametrize(("anon", "auth", "cert", "name", "groups"), CHAIN_CASES)
def test_chain(anon: bool, auth: str | None, cert: tuple[str, tuple[str, ...]] | None, name: str | None,
               groups: tuple[str, ...]) -> None:
    peer = PeerCertificate(cert[0], cert[1], sha256="ab") if cert else None
    result = _chain(Anonymous() if anon else None).authenticate(_req(auth, peer))
    if name is None:
        assert result.user is None
        assert result.error  # the reason goes to the log
        assert "wrong" not in result.error  # never the credential
    else:
        assert result.user is not None
        assert (result.user.name, result.user.groups) == (name, groups)


def test_anonymous_limited_to_paths() -> None:
    chain = _chain(Anonymous(paths=["/healthz", "/livez"]))
    assert chain.authenticate(_req(path="/healthz")).user.name == "system:anonymous"  # type: ignore[union-attr]
    assert chain.authenticate(_req(path="/api/v1/pods")).user is None


def test_system_authenticated_is_not_added_twice() -> None:
    tf = TokenFile(parse_token_file("t,u,1,system:authenticated\n", "x")[0])
    user = Authenticator([BearerTokenAuthenticator([tf])]).authenticate(_req("Bearer t")).user
    assert user is not None and user.groups == ("system:authenticated",)


def test_certificate_identity_and_credential_id() -> None:
    user = user_from_certificate(PeerCertificate("system:node:n1", ("system:nodes",), ("uid-9",), "ff00"))
    assert user == UserInfo("system:node:n1", "uid-9", ("system:nodes",), user.extra)  # type: ignore[union-attr]
    assert user.extra[CREDENTIAL_ID_KEY] == ("X509SHA256=ff00",)  # type: ignore[union-attr]
    with pytest.raises(CertificateAuthenticationError, match="expected 1 UID, but found multiple"):
        user_from_certificate(PeerCertificate("a", (), ("1", "2")))


# ---- signed tokens ----


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


class Lookup:
    def __init__(self) -> None:
        self.service_accounts = {("ns1", "builder"): "sa-uid"}
        self.pods = {("ns1", "web-1"): "pod-uid"}

    def service_account_uid(self, namespace: str, name: str) -> str | None:
        return self.service_accounts.get((namespace, name))

    def pod_uid(self, namespace: str, name: str) -> str | None:
        return self.pods.get((namespace, name))


def _pair(clock: FakeClock, lookup: Lookup | None = None) -> tuple[TokenIssuer, TokenVerifier]:
    key = generate_signing_key()
    return TokenIssuer(key, clock=clock), TokenVerifier([key.public_key()], lookup=lookup, clock=clock)


def test_service_account_token_identity(clock: FakeClock) -> None:
    lookup = Lookup()
    issuer, verifier = _pair(clock, lookup)
    token = issuer.service_account_token("ns1", "builder", "sa-uid", audiences=[DEFAULT_ISSUER],
                                         pod=ObjectRef("web-1", "pod-uid"))
    user = verifier.authenticate_token(token)
    assert user is not None
    assert user.name == "system:serviceaccount:ns1:builder"
    assert user.uid == "sa-uid"
    assert user.groups == ("system:serviceaccounts", "system:serviceaccounts:ns1")
    assert user.extra[POD_NAME_KEY] == ("web-1",) and user.extra[POD_UID_KEY] == ("pod-uid",)
    assert user.extra[CREDENTIAL_ID_KEY][0].startswith("JTI=")
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims["kubernetes.io"]["serviceaccount"] == {"name": "builder", "uid": "sa-uid"}
    assert claims["exp"] - claims["iat"] == 3600
    assert jwt.get_unverified_header(token)["kid"] == key_id(issuer._key.public_key())


def test_node_token_identity(clock: FakeClock) -> None:
    issuer, verifier = _pair(clock)
    user = verifier.authenticate_token(issuer.node_token("n1", audiences=[DEFAULT_ISSUER]))
    assert user is not None and (user.name, user.groups) == ("system:node:n1", ("system:nodes",))


def test_expiry_with_upstream_leeway(clock: FakeClock) -> None:
    issuer, verifier = _pair(clock)
    token = issuer.service_account_token("ns1", "builder", "sa-uid", audiences=[DEFAULT_ISSUER],
                                         expiration_seconds=600)
    assert verifier.authenticate_token(token) is not None
    clock.advance(600 + 59)
    assert verifier.authenticate_token(token) is not None  # within the minute of leeway (and cached)
    clock.advance(2)
    with pytest.raises(TokenError, match="service account token has expired"):
        verifier.authenticate_token(token)


def test_not_valid_yet(clock: FakeClock) -> None:
    issuer, verifier = _pair(clock)
    token = issuer.service_account_token("ns1", "b", "u", audiences=[DEFAULT_ISSUER])
    clock.advance(-120)
    with pytest.raises(TokenError, match="not valid yet"):
        verifier.authenticate_token(token)


def test_revocation_by_lookup(clock: FakeClock) -> None:
    lookup = Lookup()
    issuer, verifier = _pair(clock, lookup)
    token = issuer.service_account_token("ns1", "builder", "sa-uid", audiences=[DEFAULT_ISSUER],
                                         pod=ObjectRef("web-1", "pod-uid"))
    assert verifier.authenticate_token(token) is not None
    lookup.pods[("ns1", "web-1")] = "new-pod-uid"  # the pod was re-created
    with pytest.raises(TokenError, match=r"pod UID \(new-pod-uid\) does not match"):
        verifier.authenticate_token(token)
    del lookup.pods[("ns1", "web-1")]
    with pytest.raises(TokenError, match="has been invalidated"):
        verifier.authenticate_token(token)
    lookup.service_accounts[("ns1", "builder")] = "other"
    with pytest.raises(TokenError, match=r"service account UID \(other\) does not match claim \(sa-uid\)"):
        verifier.authenticate_token(token)
    del lookup.service_accounts[("ns1", "builder")]
    with pytest.raises(TokenError, match='serviceaccounts "builder" not found'):
        verifier.authenticate_token(token)


def test_tokens_that_are_not_ours_or_not_valid(clock: FakeClock) -> None:
    issuer, verifier = _pair(clock)
    stranger = TokenIssuer(generate_signing_key(), clock=clock)
    forged = stranger.service_account_token("ns1", "b", "u", audiences=[DEFAULT_ISSUER])
    with pytest.raises(TokenError, match="signature"):
        verifier.authenticate_token(forged)
    other_issuer = TokenIssuer(generate_signing_key(), issuer="https://elsewhere", clock=clock)
    assert verifier.authenticate_token(other_issuer.node_token("n1", audiences=["x"])) is None
    assert verifier.authenticate_token("not-a-jwt") is None
    assert verifier.authenticate_token("a.b.c") is None
    wrong_aud = issuer.service_account_token("ns1", "b", "u", audiences=["vault"])
    with pytest.raises(TokenError, match="token audiences"):
        verifier.authenticate_token(wrong_aud)
    # alg=none and HMAC-with-the-public-key are refused (only the key's own algorithm is accepted)
    claims = jwt.decode(issuer.node_token("n1", audiences=[DEFAULT_ISSUER]), options={"verify_signature": False})
    unsigned = jwt.encode(claims, None, algorithm="none")
    with pytest.raises(TokenError, match="alg"):
        verifier.authenticate_token(unsigned)
    hmac_forged = jwt.encode(claims, "x" * 32, algorithm="HS256")
    with pytest.raises(TokenError, match="alg"):
        verifier.authenticate_token(hmac_forged)


def test_unsigned_token_is_rejected_not_skipped(clock: FakeClock) -> None:
    issuer, verifier = _pair(clock)
    claims = jwt.decode(issuer.node_token("n1", audiences=[DEFAULT_ISSUER]), options={"verify_signature": False})
    head, body, _ = jwt.encode(claims, "k" * 32, algorithm="HS256").split(".")
    with pytest.raises(TokenError):
        verifier.authenticate_token(f"{head}.{body}.")


def test_a_node_claim_never_makes_a_service_account_nor_the_reverse(clock: FakeClock) -> None:
    key = generate_signing_key()
    verifier = TokenVerifier([key.public_key()], clock=clock)
    now = int(clock.wall())
    base = {"iss": DEFAULT_ISSUER, "aud": [DEFAULT_ISSUER], "iat": now, "nbf": now, "exp": now + 600}
    mixed = jwt.encode({**base, "sub": "system:node:n1", "kubernetes.io": {"namespace": "a"},
                        "nodeagent.io": {"node": "n1"}}, key, algorithm="ES256")
    with pytest.raises(TokenError, match="neither a service account nor a node"):
        verifier.authenticate_token(mixed)
    spoof = jwt.encode({**base, "sub": "system:node:n2", "nodeagent.io": {"node": "n1"}}, key, algorithm="ES256")
    with pytest.raises(TokenError):
        verifier.authenticate_token(spoof)
    sa_mismatch = jwt.encode({**base, "sub": "system:serviceaccount:a:b",
                              "kubernetes.io": {"namespace": "a", "serviceaccount": {"name": "c", "uid": "1"}}},
                             key, algorithm="ES256")
    with pytest.raises(TokenError, match="subject and claims differ"):
        verifier.authenticate_token(sa_mismatch)


def test_key_rotation_old_tokens_still_verify(clock: FakeClock) -> None:
    old, new = generate_signing_key(), generate_signing_key()
    pem = public_key_pem(old.public_key()) + public_key_pem(new.public_key())
    verifier = TokenVerifier(load_public_keys(pem, "sa.pub"), clock=clock)
    for key in (old, new):
        token = TokenIssuer(key, clock=clock).node_token("n1", audiences=[DEFAULT_ISSUER])
        assert verifier.authenticate_token(token) is not None


def test_rsa_keys_sign_rs256(clock: FakeClock) -> None:
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    token = TokenIssuer(key, clock=clock).node_token("n1", audiences=[DEFAULT_ISSUER])
    assert jwt.get_unverified_header(token)["alg"] == "RS256"
    assert TokenVerifier([key.public_key()], clock=clock).authenticate_token(token) is not None
    assert isinstance(generate_signing_key(), ec.EllipticCurvePrivateKey)


def test_short_expiration_refused(clock: FakeClock) -> None:
    issuer, _ = _pair(clock)
    with pytest.raises(ValueError, match="less than 10 minutes"):
        issuer.service_account_token("a", "b", "c", audiences=["x"], expiration_seconds=599)


def test_signed_tokens_in_the_chain(clock: FakeClock) -> None:
    issuer, verifier = _pair(clock)
    chain = _chain(Anonymous(), verifier)
    token = issuer.node_token("n1", audiences=[DEFAULT_ISSUER])
    user = chain.authenticate(_req(f"Bearer {token}")).user
    assert user is not None and user.groups == ("system:nodes", "system:authenticated")
    clock.advance(400 * 86400)
    result = chain.authenticate(_req(f"Bearer {token}"))
    assert result.user is None and "expired" in result.error  # expired: 401, not anonymous
