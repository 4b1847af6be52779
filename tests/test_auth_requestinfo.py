"""An HTTP request's authorization attributes (upstream RequestInfoFactory tests), and the 401/403
bodies kube-apiserver sends."""

from __future__ import annotations

import pytest

from nodeagent.cluster.auth.attributes import Attributes, forbidden_message, forbidden_status, unauthorized_status
from nodeagent.cluster.auth.requestinfo import RequestInfoError, exact_field_value, request_attributes
from nodeagent.cluster.auth.user import UserInfo

U = UserInfo("alice")

CASES = [
    # method, path, query, (verb, group, version, namespace, resource, subresource, name)
    ("GET", "/api/v1/namespaces", {}, ("list", "", "v1", "", "namespaces", "", "")),
    ("GET", "/api/v1/namespaces/other", {}, ("get", "", "v1", "other", "namespaces", "", "other")),
    ("GET", "/api/v1/namespaces/other/pods", {}, ("list", "", "v1", "other", "pods", "", "")),
    ("GET", "/api/v1/namespaces/other/pods/foo", {}, ("get", "", "v1", "other", "pods", "", "foo")),
    ("HEAD", "/api/v1/namespaces/other/pods/foo", {}, ("get", "", "v1", "other", "pods", "", "foo")),
    ("GET", "/api/v1/pods", {}, ("list", "", "v1", "", "pods", "", "")),
    ("GET", "/api/v1/namespaces/other/pods/foo/log", {}, ("get", "", "v1", "other", "pods", "log", "foo")),
    ("GET", "/api/v1/namespaces/other/pods", {"watch": "true"}, ("watch", "", "v1", "other", "pods", "", "")),
    ("GET", "/api/v1/namespaces/other/pods", {"watch": "1"}, ("watch", "", "v1", "other", "pods", "", "")),
    ("GET", "/api/v1/namespaces/other/pods", {"watch": "false"}, ("list", "", "v1", "other", "pods", "", "")),
    ("GET", "/api/v1/namespaces/other/pods", {"watch": "yes"}, ("watch", "", "v1", "other", "pods", "", "")),
    ("GET", "/api/v1/watch/namespaces/other/pods", {}, ("watch", "", "v1", "other", "pods", "", "")),
    ("GET", "/api/v1/watch/namespaces/other/pods/foo", {}, ("watch", "", "v1", "other", "pods", "", "foo")),
    ("GET", "/api/v1/namespaces/other/pods", {"fieldSelector": "metadata.name=foo"},
     ("list", "", "v1", "other", "pods", "", "foo")),
    ("GET", "/api/v1/namespaces/other/pods", {"fieldSelector": "metadata.name==foo,status.phase=Running"},
     ("list", "", "v1", "other", "pods", "", "foo")),
    ("GET", "/api/v1/namespaces/other/pods", {"fieldSelector": "metadata.name!=foo"},
     ("list", "", "v1", "other", "pods", "", "")),
    ("GET", "/api/v1/namespaces/other/pods", {"fieldSelector": "metadata.name=a/b"},
     ("list", "", "v1", "other", "pods", "", "")),  # not a path segment: no name
    ("POST", "/api/v1/namespaces/other/pods", {}, ("create", "", "v1", "other", "pods", "", "")),
    ("PUT", "/api/v1/namespaces/other/pods/foo", {}, ("update", "", "v1", "other", "pods", "", "foo")),
    ("PATCH", "/api/v1/namespaces/other/pods/foo", {}, ("patch", "", "v1", "other", "pods", "", "foo")),
    ("DELETE", "/api/v1/namespaces/other/pods/foo", {}, ("delete", "", "v1", "other", "pods", "", "foo")),
    ("DELETE", "/api/v1/namespaces/other/pods", {}, ("deletecollection", "", "v1", "other", "pods", "", "")),
    ("PUT", "/api/v1/namespaces/other/finalize", {}, ("update", "", "v1", "other", "namespaces", "finalize", "other")),
    ("PUT", "/api/v1/namespaces/other/status", {}, ("update", "", "v1", "other", "namespaces", "status", "other")),
    ("GET", "/api/v1/namespaces/other/pods/foo/proxy/a/b", {}, ("get", "", "v1", "other", "pods", "proxy", "foo")),
    ("GET", "/api/v1/proxy/namespaces/other/pods/foo/a", {}, ("proxy", "", "v1", "other", "pods", "", "foo")),
    ("GET", "/apis/apps/v1/namespaces/other/deployments/web", {}, ("get", "apps", "v1", "other", "deployments", "", "web")),
    ("PATCH", "/apis/apps/v1/namespaces/other/deployments/web/scale", {},
     ("patch", "apps", "v1", "other", "deployments", "scale", "web")),
    ("GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles", {},
     ("list", "rbac.authorization.k8s.io", "v1", "", "clusterroles", "", "")),
    ("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", {},
     ("create", "authorization.k8s.io", "v1", "", "selfsubjectaccessreviews", "", "")),
    ("GET", "/api/v1/nodes/n1/proxy/stats", {}, ("get", "", "v1", "", "nodes", "proxy", "n1")),
    ("OPTIONS", "/api/v1/pods", {}, ("", "", "v1", "", "pods", "", "")),
]


@pytest.mark.parametrize(("method", "path", "query", "expected"), CASES)
def test_resource_requests(method: str, path: str, query: dict[str, str], expected: tuple[str, ...]) -> None:
    a = request_attributes(U, method, path, query)
    assert a.resource_request
    assert (a.verb, a.api_group, a.api_version, a.namespace, a.resource, a.subresource, a.name) == expected


NON_RESOURCE = [
    ("GET", "/", "get"), ("GET", "/healthz", "get"), ("GET", "/version", "get"), ("GET", "/api", "get"),
    ("GET", "/api/v1", "get"), ("GET", "/apis", "get"), ("GET", "/apis/apps", "get"), ("GET", "/apis/apps/v1", "get"),
    ("GET", "/openapi/v3/apis/apps/v1", "get"), ("POST", "/metrics", "post"), ("PUT", "/other/thing", "put"),
]


@pytest.mark.parametrize(("method", "path", "verb"), NON_RESOURCE)
def test_non_resource_requests(method: str, path: str, verb: str) -> None:
    a = request_attributes(U, method, path, {})
    assert (a.resource_request, a.verb, a.path) == (False, verb, path)


def test_selectors_only_on_collection_verbs() -> None:
    q = {"fieldSelector": "spec.nodeName=n1", "labelSelector": "app=web"}
    a = request_attributes(U, "GET", "/api/v1/pods", q)
    assert (a.field_selector, a.label_selector) == ("spec.nodeName=n1", "app=web")
    assert request_attributes(U, "GET", "/api/v1/namespaces/a/pods/p", q).field_selector == ""
    assert request_attributes(U, "GET", "/api/v1/watch/pods", q).field_selector == ""  # deprecated path verb


def test_unparseable_watch_path() -> None:
    with pytest.raises(RequestInfoError, match="unable to determine kind and namespace"):
        request_attributes(U, "GET", "/api/v1/watch", {})


@pytest.mark.parametrize(("selector", "field", "value"), [
    ("spec.nodeName=n1", "spec.nodeName", "n1"),
    ("a=1,spec.nodeName==n1", "spec.nodeName", "n1"),
    ("spec.nodeName!=n1", "spec.nodeName", None),
    ("spec.nodeNameX=n1", "spec.nodeName", None),
    (r"metadata.name=a\,b", "metadata.name", "a,b"),
    ("", "spec.nodeName", None),
])
def test_exact_field_value(selector: str, field: str, value: str | None) -> None:
    assert exact_field_value(selector, field) == value


FORBIDDEN = [
    (Attributes(U, "list", resource="pods", namespace="default"),
     'pods is forbidden: User "alice" cannot list resource "pods" in API group "" in the namespace "default"'),
    (Attributes(U, "get", resource="pods", subresource="log", namespace="ns", name="web"),
     'pods "web" is forbidden: User "alice" cannot get resource "pods/log" in API group "" in the namespace "ns"'),
    (Attributes(U, "create", api_group="apps", resource="deployments", namespace="ns"),
     'deployments.apps is forbidden: User "alice" cannot create resource "deployments" in API group "apps" in the '
     'namespace "ns"'),
    (Attributes(U, "delete", resource="nodes", name="n1"),
     'nodes "n1" is forbidden: User "alice" cannot delete resource "nodes" in API group "" at the cluster scope'),
    (Attributes(U, "get", resource_request=False, path="/metrics"),
     'forbidden: User "alice" cannot get path "/metrics"'),
    (Attributes(UserInfo('a"<b>'), "get", resource_request=False, path="/x&y"),
     'forbidden: User "a\\"&lt;b&gt;" cannot get path "/x&amp;y"'),
]


@pytest.mark.parametrize(("attrs", "message"), FORBIDDEN)
def test_forbidden_message_is_kube_apiservers(attrs: Attributes, message: str) -> None:
    assert forbidden_message(attrs) == message


def test_forbidden_status_body() -> None:
    a = Attributes(U, "get", api_group="apps", resource="deployments", namespace="ns", name="web")
    assert forbidden_status(a, "RBAC: x") == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'deployments.apps "web" is forbidden: User "alice" cannot get resource "deployments" in API '
                   'group "apps" in the namespace "ns": RBAC: x',
        "reason": "Forbidden", "details": {"name": "web", "group": "apps", "kind": "deployments"}, "code": 403}
    assert forbidden_status(Attributes(U, "get", resource_request=False, path="/"))["details"] == {}
    assert unauthorized_status() == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                     "message": "Unauthorized", "reason": "Unauthorized", "code": 401}
