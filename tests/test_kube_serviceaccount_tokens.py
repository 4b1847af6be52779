"""Service-account tokens on a real secure server with the real kubectl: `kubectl create token`
gives a token that authenticates as `system:serviceaccount:<ns>:<name>` in the service-account
groups (RBAC then decides), and that is refused once the account is deleted, or recreated under
the same name, or once the pod it was bound to is gone, as kube-apiserver's bound tokens; a
token for another audience is refused; bad requests get the Status kubectl expects."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kube.secure_server import SecureServer, module_server, needs_kubectl

pytestmark = needs_kubectl
server = module_server("satokens")


def as_token(server: SecureServer, token: str, *args: str) -> Any:
    return server.kubectl("--token", token, *args, check=False)


def refused(res: Any) -> None:
    """401: kubectl says Unauthorized ("You must be logged in to the server")."""
    assert res.returncode != 0, res.stdout
    assert "Unauthorized" in res.stderr or "must be logged in" in res.stderr, res.stderr


def authenticated_as(res: Any, user: str) -> None:
    """403 naming the user: authenticated, and RBAC grants it nothing here."""
    assert res.returncode != 0 and "(Forbidden)" in res.stderr, res.stderr
    assert f'User "{user}" cannot' in res.stderr, res.stderr


def test_create_token_authenticates_as_the_service_account_until_it_is_deleted(server: SecureServer) -> None:
    server.kubectl("create", "namespace", "robots")
    server.kubectl("create", "serviceaccount", "robot", "-n", "robots")
    token = server.kubectl("create", "token", "robot", "-n", "robots").stdout.strip()
    assert token.count(".") == 2, token
    authenticated_as(as_token(server, token, "get", "pods", "-n", "robots"), "system:serviceaccount:robots:robot")
    # its groups: a binding to the namespace's service-account group lets it read
    server.kubectl("create", "rolebinding", "sa-view", "-n", "robots", "--clusterrole=view",
                   "--group=system:serviceaccounts:robots")
    assert as_token(server, token, "get", "pods", "-n", "robots").returncode == 0
    assert as_token(server, token, "auth", "can-i", "list", "pods", "-n", "robots").stdout.strip() == "yes"

    server.kubectl("delete", "serviceaccount", "robot", "-n", "robots")
    refused(as_token(server, token, "get", "pods", "-n", "robots"))
    server.kubectl("create", "serviceaccount", "robot", "-n", "robots")  # same name, another uid: still dead
    refused(as_token(server, token, "get", "pods", "-n", "robots"))
    fresh = server.kubectl("create", "token", "robot", "-n", "robots").stdout.strip()
    assert as_token(server, fresh, "get", "pods", "-n", "robots").returncode == 0


def test_a_token_bound_to_a_pod_dies_with_the_pod(server: SecureServer) -> None:
    server.kubectl("create", "serviceaccount", "runner")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "job", "namespace": "default"},
           "spec": {"serviceAccountName": "runner", "containers": [{"name": "c", "image": "busybox"}]}}
    path = server.tmp / "job.json"
    path.write_text(json.dumps(pod))
    server.kubectl("create", "-f", str(path))
    token = server.kubectl("create", "token", "runner", "--bound-object-kind", "Pod", "--bound-object-name", "job",
                           ).stdout.strip()
    authenticated_as(as_token(server, token, "get", "secrets"), "system:serviceaccount:default:runner")
    server.kubectl("delete", "pod", "job", "--grace-period=0", "--force")
    refused(as_token(server, token, "get", "secrets"))
    res = server.kubectl("create", "token", "runner", "--bound-object-kind", "Pod", "--bound-object-name", "job",
                         check=False)
    assert res.returncode != 0 and 'pods "job" not found' in res.stderr, res.stderr
    server.kubectl("create", "-f", str(path))
    server.kubectl("create", "serviceaccount", "other")
    res = server.kubectl("create", "token", "other", "--bound-object-kind", "Pod", "--bound-object-name", "job",
                         check=False)
    assert res.returncode != 0 and "running with different serviceaccount name" in res.stderr, res.stderr
    server.kubectl("delete", "pod", "job", "--grace-period=0", "--force")


def test_another_audience_is_refused_and_bad_requests_get_a_status(server: SecureServer) -> None:
    server.kubectl("create", "serviceaccount", "aud")
    refused(as_token(server, server.kubectl("create", "token", "aud", "--audience", "vault").stdout.strip(), "get", "pods"))
    res = server.kubectl("create", "token", "nobody", check=False)
    assert res.returncode != 0 and 'serviceaccounts "nobody" not found' in res.stderr, res.stderr
    kubernetes = pytest.importorskip("kubernetes")
    api = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(str(server.admin)))
    with pytest.raises(kubernetes.client.exceptions.ApiException) as e:
        api.create_namespaced_service_account_token("aud", "default", {"spec": {"expirationSeconds": 60}})
    assert e.value.status == 422, e.value.body
    status = json.loads(e.value.body)
    assert status["reason"] == "Invalid" and status["details"]["causes"][0]["field"] == "spec.expirationSeconds", status
    out = api.create_namespaced_service_account_token("aud", "default", {"spec": {"expirationSeconds": 3600}})
    authenticated_as(as_token(server, out.status.token, "get", "pods"), "system:serviceaccount:default:aud")
