"""Access reviews (`kubectl auth can-i`, `--list`, `whoami`) from the same authorizer chain."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeagent.cluster.auth.attributes import Attributes
from nodeagent.cluster.auth.authorizer import build_authorizer
from nodeagent.cluster.auth.node import NodeGraph
from nodeagent.cluster.auth.rbac import bootstrap
from nodeagent.cluster.auth.rbac.index import RBACIndex
from nodeagent.cluster.auth.reviews import (
    NamespaceMismatch,
    local_subject_access_review,
    self_subject_access_review,
    self_subject_review,
    self_subject_rules_review,
    subject_access_review,
)
from nodeagent.cluster.auth.user import UserInfo
from nodeagent.core.errors import ValidationErrors

ALICE = UserInfo("alice", groups=("system:authenticated",))


@pytest.fixture
def rbac() -> RBACIndex:
    idx = RBACIndex(bootstrap.cluster_roles() + bootstrap.cluster_role_bindings())
    idx.put({"kind": "RoleBinding", "metadata": {"name": "alice-edit", "namespace": "team"},
             "roleRef": {"kind": "ClusterRole", "name": "edit"},
             "subjects": [{"kind": "User", "name": "alice"}]})
    return idx


def ssar(**ra: str) -> dict[str, Any]:
    # what kubectl auth can-i sends
    return {"kind": "SelfSubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
            "metadata": {"creationTimestamp": None}, "spec": {"resourceAttributes": ra}, "status": {"allowed": False}}


def test_can_i(rbac: RBACIndex) -> None:
    chain = build_authorizer(["Node", "RBAC"], rbac, NodeGraph())
    yes = self_subject_access_review(ssar(namespace="team", verb="create", resource="pods"), ALICE, chain)
    assert yes["status"] == {"allowed": True, "reason": 'RBAC: allowed by RoleBinding "alice-edit/team" of '
                                                        'ClusterRole "edit" to User "alice"'}
    assert yes["kind"] == "SelfSubjectAccessReview" and yes["spec"]["resourceAttributes"]["verb"] == "create"
    no = self_subject_access_review(ssar(namespace="default", verb="create", resource="pods"), ALICE, chain)
    assert no["status"] == {"allowed": False}
    url = {"spec": {"nonResourceAttributes": {"path": "/apis", "verb": "get"}}}
    assert self_subject_access_review(url, ALICE, chain)["status"]["allowed"]
    masters = UserInfo("root", groups=("system:masters",))
    assert self_subject_access_review(ssar(verb="delete", resource="nodes"), masters, chain)["status"] == \
        {"allowed": True}  # the privileged-group authorizer gives no reason


INVALID = [
    ({"spec": {}}, "spec.resourceAttributes",
     'Invalid value: "null": exactly one of nonResourceAttributes or resourceAttributes must be specified'),
    ({"spec": {"resourceAttributes": {}, "nonResourceAttributes": {}}}, "spec.nonResourceAttributes",
     "Invalid value: {}: cannot be specified in combination with resourceAttributes"),
    ({"metadata": {"name": "x"}, "spec": {"resourceAttributes": {}}}, "metadata", "must be empty"),
    ({"spec": {"resourceAttributes": {"verb": 3}}}, "spec.resourceAttributes.verb", "must be a string"),
    ({"spec": "x"}, "spec", "must be an object"),
]


@pytest.mark.parametrize(("body", "field", "message"), INVALID)
def test_invalid_reviews_name_the_field(rbac: RBACIndex, body: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(ValidationErrors) as exc:
        self_subject_access_review(body, ALICE, rbac)
    assert exc.value.errors[0].path == field
    assert message in exc.value.errors[0].message


def test_subject_access_review(rbac: RBACIndex) -> None:
    body = {"spec": {"user": "alice", "groups": ["system:authenticated"],
                     "resourceAttributes": {"namespace": "team", "verb": "get", "resource": "secrets", "name": "s"}}}
    assert subject_access_review(body, rbac)["status"]["allowed"]
    body["spec"]["user"] = "bob"
    assert not subject_access_review(body, rbac)["status"]["allowed"]
    with pytest.raises(ValidationErrors) as exc:
        subject_access_review({"spec": {"resourceAttributes": {"verb": "get"}}}, rbac)
    assert [(e.path, e.message) for e in exc.value.errors] == [
        ("spec.user", 'Invalid value: "": at least one of user or group must be specified')]
    by_group = {"spec": {"groups": ["system:masters"], "resourceAttributes": {"verb": "*", "resource": "*"}}}
    assert subject_access_review(by_group, build_authorizer(["RBAC"], rbac))["status"]["allowed"]


def test_local_subject_access_review(rbac: RBACIndex) -> None:
    body = {"metadata": {"namespace": "team"},
            "spec": {"user": "alice", "resourceAttributes": {"namespace": "team", "verb": "list", "resource": "pods"}}}
    out = local_subject_access_review(body, "team", rbac)
    assert out["status"]["allowed"] and out["metadata"]["namespace"] == "team"
    with pytest.raises(NamespaceMismatch, match="spec.resourceAttributes.namespace must match namespace: other"):
        local_subject_access_review(body, "other", rbac)
    with pytest.raises(ValidationErrors, match="disallowed on this kind of request"):
        local_subject_access_review({"spec": {"user": "a", "nonResourceAttributes": {"path": "/"}}}, "team", rbac)


def test_rules_review(rbac: RBACIndex) -> None:
    out = self_subject_rules_review({"spec": {"namespace": "team"}}, ALICE, rbac)
    st = out["status"]
    assert st["incomplete"] is False
    assert {"verbs": ["create", "delete", "deletecollection", "patch", "update"], "apiGroups": [""],
            "resources": ["pods", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy"]} in st["resourceRules"]
    assert {"verbs": ["create"], "apiGroups": ["authorization.k8s.io"],
            "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]} in st["resourceRules"]
    assert any("/apis/*" in r["nonResourceURLs"] for r in st["nonResourceRules"])
    elsewhere = self_subject_rules_review({"spec": {"namespace": "default"}}, ALICE, rbac)["status"]["resourceRules"]
    assert not any("pods" in r["resources"] for r in elsewhere)
    node = UserInfo("system:node:n1", groups=("system:nodes",))
    st = self_subject_rules_review({"spec": {}}, node, rbac)["status"]
    assert st["incomplete"] is True and "node authorizer does not support" in st["evaluationError"]


def test_whoami() -> None:
    user = UserInfo("alice", "u1", ("dev", "system:authenticated"))
    out = self_subject_review(user, 1_700_000_000.0)
    assert out == {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview",
                   "metadata": {"creationTimestamp": "2023-11-14T22:13:20Z"},
                   "status": {"userInfo": {"username": "alice", "uid": "u1",
                                           "groups": ["dev", "system:authenticated"]}}}


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=12), kids, max_size=4),
                    max_leaves=12)
KEYS = st.sampled_from(["spec", "metadata", "resourceAttributes", "nonResourceAttributes", "user", "groups", "extra",
                        "verb", "resource", "namespace", "path", "fieldSelector", "rawSelector", "kind", "subjects",
                        "roleRef", "rules", "name", "aggregationRule", "clusterRoleSelectors", "matchLabels"])
SHAPED = st.recursive(JSON, lambda kids: st.dictionaries(KEYS, kids, max_size=5), max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(SHAPED)
def test_malformed_review_bodies_never_crash(body: Any) -> None:
    rbac = RBACIndex(bootstrap.cluster_roles())
    for call in (lambda b: self_subject_access_review(b, ALICE, rbac), lambda b: subject_access_review(b, rbac),
                 lambda b: local_subject_access_review(b, "team", rbac),
                 lambda b: self_subject_rules_review(b, ALICE, rbac)):
        try:
            out = call(body if isinstance(body, dict) else {"spec": body})
        except (ValidationErrors, NamespaceMismatch):
            continue
        assert isinstance(out["status"], dict)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"]), SHAPED)
def test_malformed_rbac_objects_never_break_the_index(kind: str, obj: Any) -> None:
    rbac = RBACIndex(bootstrap.cluster_roles() + bootstrap.cluster_role_bindings())
    body = {**obj, "kind": kind} if isinstance(obj, dict) else {"kind": kind, "spec": obj}
    rbac.apply("ADDED", body)
    rbac.apply("DELETED", body)
    master = UserInfo("root", groups=("system:masters",))
    assert rbac.authorize(Attributes(master, "get", resource="pods")).allowed
