"""The proposed server config keys of the security pieces."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from nodeagent.cluster.auth.config import SecurityConfig


def test_defaults() -> None:
    c = SecurityConfig()
    assert c.authorization_mode == ("Node", "RBAC")
    assert c.anonymous_auth is False
    assert c.service_account_lookup is True
    assert c.audiences == ("https://kubernetes.default.svc.cluster.local",)


def test_kube_apiserver_names() -> None:
    c = SecurityConfig.model_validate({
        "tokenAuthFile": "/etc/tokens.csv", "clientCAFile": "/etc/ca.crt", "anonymousAuth": True,
        "anonymousAuthPaths": ["/healthz"], "authorizationMode": ["RBAC"], "serviceAccountIssuer": "https://x",
        "serviceAccountKeyFile": ["/etc/sa.pub"], "serviceAccountMaxTokenExpiration": "24h",
        "apiAudiences": ["api"], "encryptionProviderConfig": "/etc/enc.yaml", "tlsSan": ["api.example.test"]})
    assert c.client_ca_file == "/etc/ca.crt"
    assert c.service_account_issuer == ("https://x",)
    assert c.service_account_max_token_expiration == 86400
    assert c.audiences == ("api",)


@pytest.mark.parametrize(("data", "message"), [
    ({"authorizationMode": ["RBAC", "RBAC"]}, '"RBAC" is specified more than once'),
    ({"authorizationMode": ["ABAC"]}, "Input should be"),
    ({"authorizationMode": []}, "at least one authorization mode"),
    ({"tokenAuthFile": "tokens.csv"}, "must be an absolute path"),
    ({"tlsCertFile": "/a"}, "must be set together"),
    ({"anonymousAuthPaths": ["/healthz"]}, "needs anonymousAuth: true"),
    ({"anonymousAuth": True, "anonymousAuthPaths": ["healthz"]}, 'must start with "/"'),
    ({"serviceAccountMaxTokenExpiration": "5m"}, "at least 10m"),
    ({"clientCaFile": "/a"}, "Extra inputs are not permitted"),
])
def test_invalid(data: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        SecurityConfig.model_validate(data)
