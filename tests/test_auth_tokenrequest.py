"""TokenRequest (kubectl create token, projected tokens) and TokenReview."""

from __future__ import annotations

from typing import Any

import jwt
import pytest

from nodeagent.cluster.auth.authenticator import Anonymous, Authenticator, BearerTokenAuthenticator
from nodeagent.cluster.auth.reviews import token_review
from nodeagent.cluster.auth.serviceaccount import DEFAULT_ISSUER, TokenIssuer, TokenVerifier, generate_signing_key
from nodeagent.cluster.auth.tokenrequest import BoundObjectError, token_request
from nodeagent.core.clock import FakeClock
from nodeagent.core.errors import ValidationErrors

SA = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "ci", "namespace": "team", "uid": "sa-1"}}
PODS = {("team", "runner"): {"metadata": {"name": "runner", "uid": "pod-1"},
                             "spec": {"serviceAccountName": "ci", "nodeName": "n1"}},
        ("team", "other"): {"metadata": {"name": "other", "uid": "pod-2"}, "spec": {}}}


class Lookup:
    def service_account_uid(self, namespace: str, name: str) -> str | None:
        return "sa-1" if (namespace, name) == ("team", "ci") else None

    def pod_uid(self, namespace: str, name: str) -> str | None:
        pod = PODS.get((namespace, name))
        return pod["metadata"]["uid"] if pod else None


@pytest.fixture
def setup() -> tuple[TokenIssuer, TokenVerifier, FakeClock]:
    clock = FakeClock()
    key = generate_signing_key()
    return TokenIssuer(key, clock=clock), TokenVerifier([key.public_key()], lookup=Lookup(), clock=clock), clock


def _req(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "metadata": {}, "spec": spec}


def test_create_token(setup: tuple[TokenIssuer, TokenVerifier, FakeClock]) -> None:
    issuer, verifier, _ = setup
    out = token_request(_req(), SA, issuer, api_audiences=[DEFAULT_ISSUER], get_pod=lambda ns, n: PODS.get((ns, n)))
    assert out["spec"] == {"audiences": [DEFAULT_ISSUER], "expirationSeconds": 3600}
    assert out["status"]["expirationTimestamp"] == "2023-11-14T23:30:00Z"
    user = verifier.authenticate_token(out["status"]["token"])
    assert user is not None and user.name == "system:serviceaccount:team:ci" and user.uid == "sa-1"


def test_bound_to_a_pod(setup: tuple[TokenIssuer, TokenVerifier, FakeClock]) -> None:
    issuer, verifier, _ = setup
    out = token_request(_req(boundObjectRef={"kind": "Pod", "apiVersion": "v1", "name": "runner", "uid": "pod-1"}),
                        SA, issuer, api_audiences=[DEFAULT_ISSUER], get_pod=lambda ns, n: PODS.get((ns, n)))
    claims = jwt.decode(out["status"]["token"], options={"verify_signature": False})
    assert claims["kubernetes.io"]["pod"] == {"name": "runner", "uid": "pod-1"}
    assert claims["kubernetes.io"]["node"]["name"] == "n1"
    user = verifier.authenticate_token(out["status"]["token"])
    assert user is not None and user.extra["authentication.kubernetes.io/pod-name"] == ("runner",)


@pytest.mark.parametrize(("ref", "code", "message"), [
    ({"kind": "Pod", "name": "ghost"}, 404, 'pods "ghost" not found'),
    ({"kind": "Pod", "name": "runner", "uid": "old"}, 400, "does not match the UID in record"),
    ({"kind": "Pod", "name": "other"}, 400, 'cannot bind token for serviceaccount "ci" to pod running with different'),
])
def test_bound_object_errors(setup: tuple[TokenIssuer, TokenVerifier, FakeClock], ref: dict[str, str], code: int,
                             message: str) -> None:
    issuer, _, _ = setup
    with pytest.raises(BoundObjectError, match=message) as exc:
        token_request(_req(boundObjectRef=ref), SA, issuer, api_audiences=["a"], get_pod=lambda ns, n: PODS.get((ns, n)))
    assert exc.value.code == code


@pytest.mark.parametrize(("spec", "field", "message"), [
    ({"expirationSeconds": 599}, "spec.expirationSeconds", "may not specify a duration less than 10 minutes"),
    ({"expirationSeconds": 1 << 33}, "spec.expirationSeconds", "larger than 2^32 seconds"),
    ({"expirationSeconds": "1h"}, "spec.expirationSeconds", "must be an integer"),
    ({"audiences": [""]}, "spec.audiences", "non-empty strings"),
    ({"boundObjectRef": {"kind": "Node", "name": "n1"}}, "spec.boundObjectRef.kind", 'Unsupported value: "Node"'),
])
def test_invalid_requests(setup: tuple[TokenIssuer, TokenVerifier, FakeClock], spec: dict[str, Any], field: str,
                          message: str) -> None:
    issuer, _, _ = setup
    with pytest.raises(ValidationErrors) as exc:
        token_request(_req(**spec), SA, issuer, api_audiences=["a"], get_pod=lambda ns, n: None)
    assert exc.value.errors[0].path == field and message in exc.value.errors[0].message


def test_expiration_clamped(setup: tuple[TokenIssuer, TokenVerifier, FakeClock]) -> None:
    issuer, _, _ = setup
    out = token_request(_req(expirationSeconds=86400 * 30), SA, issuer, api_audiences=["a"], get_pod=lambda ns, n: None,
                        max_expiration_seconds=86400)
    assert out["spec"]["expirationSeconds"] == 86400


def test_token_review(setup: tuple[TokenIssuer, TokenVerifier, FakeClock]) -> None:
    issuer, verifier, clock = setup
    chain = Authenticator([BearerTokenAuthenticator([verifier])], Anonymous())
    token = token_request(_req(), SA, issuer, api_audiences=[DEFAULT_ISSUER], get_pod=lambda ns, n: None)
    review = token_review({"spec": {"token": token["status"]["token"]}}, chain, [DEFAULT_ISSUER])
    assert review["status"]["authenticated"] is True
    assert review["status"]["user"]["username"] == "system:serviceaccount:team:ci"
    assert "system:authenticated" in review["status"]["user"]["groups"]
    assert "token" not in review["spec"]  # the token is not echoed back
    bad = token_review({"spec": {"token": "nope"}}, chain)
    assert bad["status"]["authenticated"] is False and bad["status"]["error"]  # never anonymous
    clock.advance(7200)
    expired = token_review({"spec": {"token": token["status"]["token"]}}, chain)
    assert expired["status"] == {"authenticated": False, "user": {}, "error": "service account token has expired"}
    with pytest.raises(ValidationErrors, match="token is required"):
        token_review({"spec": {}}, chain)
