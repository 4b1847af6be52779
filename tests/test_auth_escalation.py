"""RBAC escalation prevention: nobody grants through Roles or bindings what they do not hold
(upstream's Covers table and the registry's escalate/bind rules)."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.cluster.auth.authorizer import build_authorizer
from nodeagent.cluster.auth.escalation import EscalationCheck, compact_string, covers
from nodeagent.cluster.auth.node import NodeGraph
from nodeagent.cluster.auth.rbac import bootstrap
from nodeagent.cluster.auth.rbac.index import RBACIndex
from nodeagent.cluster.auth.rbac.rules import PolicyRule, parse_rules
from nodeagent.cluster.auth.user import UserInfo

R = PolicyRule.make


COVERS = [
    # (owner rules, servant rules, covered)
    ([R(["*"], ["*"], ["*"])], [R(["get", "delete"], ["", "apps"], ["pods", "deployments/scale"])], True),
    ([R(["get"], [""], ["pods"])], [R(["get"], [""], ["pods"])], True),
    ([R(["get"], [""], ["pods"])], [R(["get", "list"], [""], ["pods"])], False),
    ([R(["get"], [""], ["pods"])], [R(["get"], [""], ["pods/log"])], False),
    ([R(["get"], [""], ["*/log"])], [R(["get"], [""], ["pods/log", "nodes/log"])], True),
    ([R(["get"], [""], ["*/log"])], [R(["get"], [""], ["pods"])], False),
    ([R(["get"], ["*"], ["pods"])], [R(["get"], ["apps", ""], ["pods"])], True),
    ([R(["get"], [""], ["pods"])], [R(["get"], ["*"], ["pods"])], False),  # a wildcard is covered only by one
    ([R(["get"], [""], ["pods"])], [R(["*"], [""], ["pods"])], False),
    ([R(["get"], [""], ["cm"], ["a"])], [R(["get"], [""], ["cm"], ["a"])], True),
    ([R(["get"], [""], ["cm"], ["a"])], [R(["get"], [""], ["cm"], ["a", "b"])], False),
    ([R(["get"], [""], ["cm"], ["a"])], [R(["get"], [""], ["cm"])], False),  # names never cover all names
    ([R(["get"], [""], ["cm"])], [R(["get"], [""], ["cm"], ["a"])], True),
    ([R(["get"], non_resource_urls=["/healthz/*"])], [R(["get"], non_resource_urls=["/healthz/etcd"])], True),
    ([R(["get"], non_resource_urls=["/healthz"])], [R(["get"], non_resource_urls=["/healthz/etcd"])], False),
    ([R(["*"], non_resource_urls=["*"])], [R(["post"], non_resource_urls=["/anything"])], True),
    ([], [R(["get"], ["apps"])], True),  # no resources: nothing to grant
]


@pytest.mark.parametrize(("owner", "servant", "covered"), COVERS)
def test_covers(owner: list[PolicyRule], servant: list[PolicyRule], covered: bool) -> None:
    assert (covers(owner, servant) == []) is covered


def test_compact_string() -> None:
    assert compact_string(R(["list", "get"], [""], ["pods"])) == '{APIGroups:[""], Resources:["pods"], Verbs:["get" "list"]}'
    assert compact_string(R(["get"], non_resource_urls=["/x"])) == '{NonResourceURLs:["/x"], Verbs:["get"]}'


def _idx() -> RBACIndex:
    idx = RBACIndex(bootstrap.cluster_roles() + bootstrap.cluster_role_bindings())
    for name, role in (("alice", "admin"), ("bob", "edit")):
        idx.put({"kind": "RoleBinding", "metadata": {"name": f"{name}-{role}", "namespace": "team"},
                 "roleRef": {"kind": "ClusterRole", "name": role}, "subjects": [{"kind": "User", "name": name}]})
    return idx


def role(rules: list[dict[str, Any]], name: str = "r", ns: str = "team") -> dict[str, Any]:
    return {"kind": "Role", "metadata": {"name": name, "namespace": ns}, "rules": rules}


def rb(ref_kind: str, ref: str, ns: str = "team", name: str = "b") -> dict[str, Any]:
    kind = "RoleBinding" if ns else "ClusterRoleBinding"
    meta = {"name": name, "namespace": ns} if ns else {"name": name}
    return {"kind": kind, "metadata": meta, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": ref_kind,
                                                        "name": ref},
            "subjects": [{"kind": "User", "name": "carol"}]}


ALICE = UserInfo("alice", groups=("system:authenticated",))
ROOT = UserInfo("root", groups=("system:masters", "system:authenticated"))


@pytest.fixture
def check() -> EscalationCheck:
    idx = _idx()
    return EscalationCheck(idx, build_authorizer(["Node", "RBAC"], idx, NodeGraph()))


def test_role_within_what_one_holds(check: EscalationCheck) -> None:
    assert check.check(ALICE, role([{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}])) is None


def test_role_beyond_what_one_holds(check: EscalationCheck) -> None:
    obj = role([{"verbs": ["update", "get"], "apiGroups": [""], "resources": ["resourcequotas"]},
                {"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}])
    assert check.check(ALICE, obj) == (
        'roles.rbac.authorization.k8s.io "r" is forbidden: user "alice" (groups=["system:authenticated"]) is '
        "attempting to grant RBAC permissions not currently held:\n"
        '{APIGroups:[""], Resources:["resourcequotas"], Verbs:["update"]}')
    assert check.check(ALICE, role([{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}], ns="other")) \
        is not None  # alice is admin of team only
    assert check.check(ROOT, obj) is None


def test_binding_needs_the_rules_or_bind(check: EscalationCheck) -> None:
    assert check.check(ALICE, rb("ClusterRole", "edit")) is None  # admin covers edit in team
    denied = check.check(ALICE, rb("ClusterRole", "cluster-admin"))
    assert denied is not None and denied.startswith('rolebindings.rbac.authorization.k8s.io "b" is forbidden: user '
                                                    '"alice"')
    assert '{APIGroups:["*"], Resources:["*"], Verbs:["*"]}' in denied
    assert check.check(ALICE, rb("ClusterRole", "view", ns="")) is not None  # cluster-wide: alice holds it nowhere
    assert check.check(UserInfo("bob"), rb("ClusterRole", "admin")) is not None  # edit cannot make admins
    assert check.check(ALICE, rb("ClusterRole", "does-not-exist")) is None  # grants nothing
    check.rbac.put({"kind": "ClusterRole", "metadata": {"name": "binder"},
                    "rules": [{"verbs": ["bind"], "apiGroups": ["rbac.authorization.k8s.io"],
                               "resources": ["clusterroles"], "resourceNames": ["cluster-admin"]}]})
    check.rbac.put({"kind": "RoleBinding", "metadata": {"name": "alice-binder", "namespace": "team"},
                    "roleRef": {"kind": "ClusterRole", "name": "binder"},
                    "subjects": [{"kind": "User", "name": "alice"}]})
    assert check.check(ALICE, rb("ClusterRole", "cluster-admin")) is None  # may `bind` it, in team


def test_escalate_verb_and_aggregation(check: EscalationCheck) -> None:
    greedy = role([{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}])
    assert check.check(ALICE, greedy) is not None
    check.rbac.put({"kind": "Role", "metadata": {"name": "escalator", "namespace": "team"},
                    "rules": [{"verbs": ["escalate"], "apiGroups": ["rbac.authorization.k8s.io"],
                               "resources": ["roles"]}]})
    check.rbac.put({"kind": "RoleBinding", "metadata": {"name": "alice-escalator", "namespace": "team"},
                    "roleRef": {"kind": "Role", "name": "escalator"}, "subjects": [{"kind": "User", "name": "alice"}]})
    assert check.check(ALICE, greedy) is None
    aggregated = {"kind": "ClusterRole", "metadata": {"name": "agg"},
                  "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"x": "y"}}]}}
    assert check.check(ALICE, aggregated) == ('clusterroles.rbac.authorization.k8s.io "agg" is forbidden: must have '
                                              "cluster-admin privileges to use the aggregationRule")
    assert check.check(ROOT, aggregated) is None


def test_gc_only_updates_and_other_kinds(check: EscalationCheck) -> None:
    old = rb("ClusterRole", "cluster-admin")
    new = {**old, "metadata": {**old["metadata"], "finalizers": ["x"], "ownerReferences": [{"uid": "1"}]}}
    assert check.check(ALICE, new, old) is None
    assert check.check(ALICE, {**new, "subjects": [{"kind": "User", "name": "alice"}]}, old) is not None
    assert check.check(ALICE, {"kind": "Pod", "metadata": {"name": "p"}}) is None
    assert check.check(ALICE, {"kind": "RoleBinding", "metadata": {"name": "x", "namespace": "team"}}) is None  # 422


def test_bootstrap_admin_covers_edit_and_view() -> None:
    idx = _idx()
    for lower in ("edit", "view"):
        assert covers(list(idx.role_rules("ClusterRole", "", "admin") or ()),
                      list(idx.role_rules("ClusterRole", "", lower) or ())) == []
    assert covers(parse_rules([{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]),
                  list(idx.role_rules("ClusterRole", "", "view") or ())) != []
