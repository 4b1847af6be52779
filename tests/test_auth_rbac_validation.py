"""Defaulting and validation of RBAC objects, with upstream's paths and wording."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.cluster.auth.rbac import bootstrap
from nodeagent.cluster.auth.rbac.validation import default_object, validate

G = "rbac.authorization.k8s.io"


def binding(kind: str = "RoleBinding", **over: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {"kind": kind, "metadata": {"name": "b", "namespace": "ns"},
                           "roleRef": {"apiGroup": G, "kind": "ClusterRole", "name": "view"},
                           "subjects": [{"kind": "User", "name": "alice", "apiGroup": G}]}
    obj.update(over)
    return obj


CASES = [
    ({"kind": "Role", "metadata": {"name": "r"}, "rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]},
     []),
    ({"kind": "Role", "metadata": {"name": "r"}, "rules": [{"apiGroups": [""], "resources": ["pods"]}]},
     [("rules[0].verbs", "Required value: verbs must contain at least one value")]),
    ({"kind": "Role", "metadata": {"name": "r"}, "rules": [{"verbs": ["get"], "nonResourceURLs": ["/x"]}]},
     [("rules[0].nonResourceURLs", 'Invalid value: ["/x"]: namespaced rules cannot apply to non-resource URLs')]),
    ({"kind": "ClusterRole", "metadata": {"name": "r"},
      "rules": [{"verbs": ["get"], "nonResourceURLs": ["/x"], "resources": ["pods"]}]},
     [("rules[0].nonResourceURLs",
       'Invalid value: ["/x"]: rules cannot apply to both regular resources and non-resource URLs')]),
    ({"kind": "ClusterRole", "metadata": {"name": "r"}, "rules": [{"verbs": ["get"]}]},
     [("rules[0].apiGroups", "Required value: resource rules must supply at least one api group"),
      ("rules[0].resources", "Required value: resource rules must supply at least one resource")]),
    ({"kind": "ClusterRole", "metadata": {"name": "a/b"}, "rules": []},
     [("metadata.name", "Invalid value: \"a/b\": may not contain '/'")]),
    ({"kind": "ClusterRole", "metadata": {"name": "agg"}, "aggregationRule": {"clusterRoleSelectors": []}},
     [("aggregationRule.clusterRoleSelectors",
       "Required value: at least one clusterRoleSelector required if aggregationRule is non-nil")]),
    (binding(), []),
    (binding(roleRef={"apiGroup": "x", "kind": "ClusterRole", "name": "view"}),
     [("roleRef.apiGroup", 'Unsupported value: "x": supported values: "rbac.authorization.k8s.io"')]),
    (binding(roleRef={"apiGroup": G, "kind": "Pod", "name": "view"}),
     [("roleRef.kind", 'Unsupported value: "Pod": supported values: "Role", "ClusterRole"')]),
    (binding("ClusterRoleBinding", roleRef={"apiGroup": G, "kind": "Role", "name": "r"}),
     [("roleRef.kind", 'Unsupported value: "Role": supported values: "ClusterRole"')]),
    (binding(roleRef={"apiGroup": G, "kind": "Role", "name": ""}), [("roleRef.name", "Required value")]),
    (binding(subjects=[{"kind": "Robot", "name": "r2"}]),
     [("subjects[0].kind", 'Unsupported value: "Robot": supported values: "ServiceAccount", "User", "Group"')]),
    (binding(subjects=[{"kind": "User", "name": "u", "apiGroup": "x"}]),
     [("subjects[0].apiGroup", 'Unsupported value: "x": supported values: "rbac.authorization.k8s.io"')]),
    (binding(subjects=[{"kind": "ServiceAccount", "name": "Bad_Name", "apiGroup": G}]),
     [("subjects[0].name", 'Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain'),
      ("subjects[0].apiGroup", 'Unsupported value: "rbac.authorization.k8s.io": supported values: ""')]),
    (binding("ClusterRoleBinding", subjects=[{"kind": "ServiceAccount", "name": "sa"}]),
     [("subjects[0].namespace", "Required value")]),
    (binding(subjects=[{"kind": "ServiceAccount", "name": "sa"}]), []),  # a RoleBinding's namespace is the default
    (binding(subjects=[{"kind": "User", "name": ""}]),
     [("subjects[0].name", "Required value"),
      ("subjects[0].apiGroup", 'Unsupported value: "": supported values: "rbac.authorization.k8s.io"')]),
]


@pytest.mark.parametrize(("obj", "expected"), CASES)
def test_validate(obj: dict[str, Any], expected: list[tuple[str, str]]) -> None:
    got = [(e.path, e.message) for e in validate(obj)]
    assert len(got) == len(expected), got
    for (path, message), (gpath, gmessage) in zip(expected, got, strict=True):
        assert gpath == path and gmessage.startswith(message)


def test_defaults_fill_api_groups() -> None:
    obj = {"kind": "RoleBinding", "metadata": {"name": "b"}, "roleRef": {"kind": "Role", "name": "r"},
           "subjects": [{"kind": "User", "name": "u"}, {"kind": "Group", "name": "g"},
                        {"kind": "ServiceAccount", "name": "s"}]}
    default_object(obj)
    assert obj["roleRef"]["apiGroup"] == G
    assert [s.get("apiGroup") for s in obj["subjects"]] == [G, G, None]
    assert validate(obj) == []


def test_role_ref_cannot_change() -> None:
    old = binding()
    new = binding(roleRef={"apiGroup": G, "kind": "ClusterRole", "name": "edit"})
    assert [e.path for e in validate(new, old)] == ["roleRef"]
    assert "cannot change roleRef" in validate(new, old)[0].message
    assert validate(binding(subjects=[]), old) == []


def test_bootstrap_policy_is_valid() -> None:
    for obj in bootstrap.cluster_roles() + bootstrap.cluster_role_bindings():
        assert validate(obj) == [], obj["metadata"]["name"]
