"""RBAC: rule matching (upstream evaluation helpers), the index, aggregation, bootstrap policy."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.cluster.auth.attributes import Attributes, Verdict
from nodeagent.cluster.auth.rbac import bootstrap
from nodeagent.cluster.auth.rbac.index import RBACIndex
from nodeagent.cluster.auth.rbac.rules import PolicyRule
from nodeagent.cluster.auth.user import UserInfo
from nodeagent.core.errors import FieldError

U = UserInfo("alice", groups=("dev", "system:authenticated"))


def res(verb: str, resource: str, sub: str = "", group: str = "", ns: str = "", name: str = "",
        user: UserInfo = U) -> Attributes:
    return Attributes(user=user, verb=verb, api_group=group, resource=resource, subresource=sub, namespace=ns,
                      name=name)


def url(verb: str, path: str, user: UserInfo = U) -> Attributes:
    return Attributes(user=user, verb=verb, resource_request=False, path=path)


RULE_CASES: list[tuple[dict[str, Any], Attributes, bool]] = [
    ({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}, res("get", "pods"), True),
    ({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}, res("list", "pods"), False),
    ({"verbs": ["*"], "apiGroups": [""], "resources": ["pods"]}, res("deletecollection", "pods"), True),
    ({"verbs": ["get"], "apiGroups": ["apps"], "resources": ["pods"]}, res("get", "pods"), False),
    ({"verbs": ["get"], "apiGroups": ["*"], "resources": ["deployments"]}, res("get", "deployments", group="apps"), True),
    ({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}, res("get", "pods", "log"), False),  # res != res/sub
    ({"verbs": ["get"], "apiGroups": [""], "resources": ["pods/log"]}, res("get", "pods", "log"), True),
    ({"verbs": ["get"], "apiGroups": [""], "resources": ["pods/log"]}, res("get", "pods"), False),
    ({"verbs": ["get"], "apiGroups": [""], "resources": ["*/log"]}, res("get", "pods", "log"), True),
    ({"verbs": ["get"], "apiGroups": [""], "resources": ["*/log"]}, res("get", "pods", "status"), False),
    ({"verbs": ["get"], "apiGroups": [""], "resources": ["*/log"]}, res("get", "pods"), False),
    ({"verbs": ["get"], "apiGroups": [""], "resources": ["*"]}, res("get", "pods", "log"), True),  # * covers subresources
    ({"verbs": ["get"], "apiGroups": [""], "resources": ["*"]}, res("get", "secrets"), True),
    ({"verbs": ["update"], "apiGroups": [""], "resources": ["pods/status"]}, res("update", "pods", "status"), True),
    ({"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["cfg"]},
     res("get", "configmaps", name="cfg"), True),
    ({"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["cfg"]},
     res("get", "configmaps", name="other"), False),
    ({"verbs": ["list"], "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["cfg"]},
     res("list", "configmaps"), False),  # names never allow an unnamed list
    ({"verbs": ["create"], "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["cfg"]},
     res("create", "configmaps"), False),
    ({"verbs": ["get"], "nonResourceURLs": ["/healthz"]}, url("get", "/healthz"), True),
    ({"verbs": ["get"], "nonResourceURLs": ["/healthz"]}, url("get", "/healthz/etcd"), False),
    ({"verbs": ["get"], "nonResourceURLs": ["/healthz/*"]}, url("get", "/healthz/etcd"), True),
    ({"verbs": ["get"], "nonResourceURLs": ["/healthz/*"]}, url("get", "/healthz/"), True),
    ({"verbs": ["get"], "nonResourceURLs": ["/healthz/*"]}, url("get", "/healthz"), False),
    ({"verbs": ["get"], "nonResourceURLs": ["/api*"]}, url("get", "/apis/apps"), True),
    ({"verbs": ["get"], "nonResourceURLs": ["*"]}, url("get", "/anything"), True),
    ({"verbs": ["get"], "nonResourceURLs": ["*"]}, url("post", "/anything"), False),
    ({"verbs": ["get"], "nonResourceURLs": ["/healthz"]}, res("get", "healthz"), False),  # a URL rule never a resource
    ({"verbs": ["get"], "apiGroups": ["*"], "resources": ["*"]}, url("get", "/healthz"), False),  # nor the reverse
]


@pytest.mark.parametrize(("rule", "attrs", "allowed"), RULE_CASES)
def test_rule_matching(rule: dict[str, Any], attrs: Attributes, allowed: bool) -> None:
    assert PolicyRule.from_api(rule).allows(attrs) is allowed


def test_malformed_rule_names_the_field() -> None:
    with pytest.raises(FieldError) as exc:
        PolicyRule.from_api({"verbs": "get"}, "rules[3]")
    assert exc.value.path == "rules[3].verbs"


# ---- the index ----


def role(name: str, ns: str, *rules: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "Role", "metadata": {"name": name, "namespace": ns}, "rules": list(rules)}


def crole(name: str, *rules: dict[str, Any], labels: dict[str, str] | None = None,
          aggregate: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {"kind": "ClusterRole", "metadata": {"name": name, "labels": labels or {}},
                           "rules": list(rules)}
    if aggregate is not None:
        obj["aggregationRule"] = {"clusterRoleSelectors": aggregate}
    return obj


def binding(name: str, ns: str, ref_kind: str, ref: str, *subjects: dict[str, str]) -> dict[str, Any]:
    kind = "RoleBinding" if ns else "ClusterRoleBinding"
    meta = {"name": name, "namespace": ns} if ns else {"name": name}
    return {"kind": kind, "metadata": meta, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": ref_kind,
                                                        "name": ref}, "subjects": list(subjects)}


def user(name: str) -> dict[str, str]:
    return {"kind": "User", "name": name, "apiGroup": "rbac.authorization.k8s.io"}


def group(name: str) -> dict[str, str]:
    return {"kind": "Group", "name": name, "apiGroup": "rbac.authorization.k8s.io"}


def sa(name: str, ns: str = "") -> dict[str, str]:
    out = {"kind": "ServiceAccount", "name": name}
    if ns:
        out["namespace"] = ns
    return out


READ_PODS = {"verbs": ["get", "list", "watch"], "apiGroups": [""], "resources": ["pods"]}


def test_role_binding_grants_in_its_namespace_only() -> None:
    idx = RBACIndex([role("reader", "ns1", READ_PODS), binding("rb", "ns1", "Role", "reader", user("alice"))])
    d = idx.authorize(res("list", "pods", ns="ns1"))
    assert d.allowed
    assert d.reason == 'RBAC: allowed by RoleBinding "rb/ns1" of Role "reader" to User "alice"'
    assert not idx.authorize(res("list", "pods", ns="ns2")).allowed
    assert not idx.authorize(res("list", "pods")).allowed  # cluster scope
    assert not idx.authorize(res("list", "pods", ns="ns1", user=UserInfo("bob"))).allowed


def test_role_binding_to_a_cluster_role_is_namespaced() -> None:
    idx = RBACIndex([crole("pod-reader", READ_PODS), binding("rb", "ns1", "ClusterRole", "pod-reader", group("dev"))])
    d = idx.authorize(res("get", "pods", ns="ns1", name="x"))
    assert d.reason == 'RBAC: allowed by RoleBinding "rb/ns1" of ClusterRole "pod-reader" to Group "dev"'
    assert not idx.authorize(res("get", "pods", ns="ns2", name="x")).allowed


def test_cluster_role_binding_grants_everywhere() -> None:
    idx = RBACIndex([crole("pod-reader", READ_PODS), binding("crb", "", "ClusterRole", "pod-reader", group("dev"))])
    for ns in ("", "ns1", "kube-system"):
        assert idx.authorize(res("list", "pods", ns=ns)).reason == \
            'RBAC: allowed by ClusterRoleBinding "crb" of ClusterRole "pod-reader" to Group "dev"'


def test_service_account_subjects() -> None:
    me = UserInfo("system:serviceaccount:ns1:builder", groups=("system:serviceaccounts",
                                                                "system:serviceaccounts:ns1"))
    idx = RBACIndex([
        crole("pod-reader", READ_PODS),
        binding("local", "ns1", "ClusterRole", "pod-reader", sa("builder")),  # namespace defaults to the binding's
        binding("remote", "ns2", "ClusterRole", "pod-reader", sa("builder", "ns1")),
        binding("elsewhere", "ns3", "ClusterRole", "pod-reader", sa("builder")),  # that is ns3's builder
        binding("cluster-no-ns", "", "ClusterRole", "pod-reader", sa("builder")),  # never applies
    ])
    assert idx.authorize(res("list", "pods", ns="ns1", user=me)).reason == \
        'RBAC: allowed by RoleBinding "local/ns1" of ClusterRole "pod-reader" to ServiceAccount "builder/ns1"'
    assert idx.authorize(res("list", "pods", ns="ns2", user=me)).reason == \
        'RBAC: allowed by RoleBinding "remote/ns2" of ClusterRole "pod-reader" to ServiceAccount "builder/ns1"'
    assert not idx.authorize(res("list", "pods", ns="ns3", user=me)).allowed
    assert not idx.authorize(res("list", "pods", user=me)).allowed


def test_group_of_all_service_accounts_in_a_namespace() -> None:
    me = UserInfo("system:serviceaccount:ns1:x", groups=("system:serviceaccounts", "system:serviceaccounts:ns1"))
    idx = RBACIndex([crole("r", READ_PODS), binding("b", "", "ClusterRole", "r", group("system:serviceaccounts:ns1"))])
    assert idx.authorize(res("list", "pods", ns="ns9", user=me)).allowed


def test_missing_role_becomes_the_reason() -> None:
    idx = RBACIndex([binding("rb", "ns1", "Role", "gone", user("alice")),
                     binding("crb", "", "ClusterRole", "absent", user("alice"))])
    d = idx.authorize(res("list", "pods", ns="ns1"))
    assert d.verdict is Verdict.NO_OPINION
    assert d.reason == ('RBAC: [clusterrole.rbac.authorization.k8s.io "absent" not found, '
                        'role.rbac.authorization.k8s.io "gone" not found]')
    assert idx.authorize(res("list", "pods")).reason == 'RBAC: clusterrole.rbac.authorization.k8s.io "absent" not found'


def test_changes_take_effect_at_once() -> None:
    idx = RBACIndex([crole("r", READ_PODS)])
    a = res("list", "pods", ns="ns1")
    assert not idx.authorize(a).allowed  # (and cached)
    idx.apply("ADDED", binding("rb", "ns1", "ClusterRole", "r", user("alice")))
    assert idx.authorize(a).allowed
    idx.apply("MODIFIED", binding("rb", "ns1", "ClusterRole", "r", user("bob")))
    assert not idx.authorize(a).allowed
    idx.apply("MODIFIED", binding("rb", "ns1", "ClusterRole", "r", user("alice")))
    idx.apply("MODIFIED", crole("r", {"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}))
    assert not idx.authorize(a).allowed  # the role lost list
    idx.apply("DELETED", {"kind": "ClusterRole", "metadata": {"name": "r"}})
    assert idx.authorize(a).reason == 'RBAC: clusterrole.rbac.authorization.k8s.io "r" not found'
    idx.apply("DELETED", {"kind": "RoleBinding", "metadata": {"name": "rb", "namespace": "ns1"}})
    assert idx.authorize(a).reason == ""


def test_malformed_objects_are_ignored_not_fatal() -> None:
    idx = RBACIndex()
    idx.apply("ADDED", {"kind": "RoleBinding", "metadata": {"name": "x", "namespace": "a"}, "roleRef": {"kind": "Pod"}})
    idx.apply("ADDED", {"kind": "ClusterRole", "metadata": {"name": "x"}, "rules": "all"})
    idx.apply("ADDED", {"kind": "ClusterRoleBinding", "metadata": {}})
    assert not idx.authorize(res("get", "pods")).allowed
    with pytest.raises(FieldError) as exc:
        idx.put({"kind": "ClusterRoleBinding", "metadata": {"name": "b"}, "roleRef": {"kind": "Role", "name": "r"}})
    assert exc.value.path == "roleRef.kind"
    with pytest.raises(FieldError) as exc:
        idx.put({"kind": "RoleBinding", "metadata": {"name": "b", "namespace": "n"},
                 "roleRef": {"kind": "Role", "name": "r"}, "subjects": [{"kind": "Robot", "name": "r2"}]})
    assert exc.value.path == "subjects[0].kind"


def test_aggregation_nested_and_live() -> None:
    idx = RBACIndex([
        crole("top", aggregate=[{"matchLabels": {"agg-top": "true"}}]),
        crole("middle", labels={"agg-top": "true"}, aggregate=[{"matchLabels": {"agg-mid": "true"}}]),
        crole("leaf", READ_PODS, labels={"agg-mid": "true"}),
        crole("unrelated", {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}),
        binding("b", "", "ClusterRole", "top", user("alice")),
    ])
    assert idx.authorize(res("list", "pods")).allowed
    assert not idx.authorize(res("list", "secrets")).allowed
    assert idx.aggregated_rules("top") == [{"verbs": ["get", "list", "watch"], "apiGroups": [""], "resources": ["pods"]}]
    assert idx.aggregated_rules("leaf") is None
    idx.apply("ADDED", crole("more", {"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"]},
                             labels={"agg-mid": "true"}))
    assert idx.authorize(res("get", "secrets")).allowed
    idx.apply("MODIFIED", crole("more", {"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"]}))
    assert not idx.authorize(res("get", "secrets")).allowed


def test_aggregation_with_match_expressions_and_cycles() -> None:
    idx = RBACIndex([
        crole("a", READ_PODS, labels={"tier": "x"},
              aggregate=[{"matchExpressions": [{"key": "tier", "operator": "In", "values": ["y"]}]}]),
        crole("b", {"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"]}, labels={"tier": "y"},
              aggregate=[{"matchExpressions": [{"key": "tier", "operator": "In", "values": ["x"]}]}]),
        crole("c", {"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"]}, labels={"tier": "y"}),
        crole("d", {"verbs": ["get"], "apiGroups": [""], "resources": ["events"]}, labels={"tier": "z"}),
    ])
    # a cycle terminates; aggregated roles' own rules never count, the plain role's do
    assert [r["resources"] for r in idx.aggregated_rules("a") or []] == [["configmaps"]]
    assert [r["resources"] for r in idx.aggregated_rules("b") or []] == [["configmaps"]]


# ---- the bootstrap policy ----


@pytest.fixture(scope="module")
def policy() -> RBACIndex:
    return RBACIndex(bootstrap.cluster_roles() + bootstrap.cluster_role_bindings())


def bound(role_name: str, idx: RBACIndex, name: str = "u") -> UserInfo:
    idx.put(binding(f"test-{role_name}-{name}", "team", "ClusterRole", role_name, user(name)))
    return UserInfo(name, groups=("system:authenticated",))


BOOTSTRAP_CASES = [
    # (role bound in namespace "team", attributes, allowed)
    ("view", res("list", "pods", ns="team"), True),
    ("view", res("get", "pods", "log", ns="team", name="p"), True),
    ("view", res("get", "secrets", ns="team", name="s"), False),  # view never reads secrets
    ("view", res("create", "pods", ns="team"), False),
    ("view", res("list", "deployments", group="apps", ns="team"), True),
    ("view", res("list", "pods", ns="other"), False),
    ("edit", res("create", "pods", ns="team"), True),
    ("edit", res("get", "secrets", ns="team", name="s"), True),
    ("edit", res("create", "pods", "exec", ns="team", name="p"), True),
    ("edit", res("patch", "deployments", "scale", group="apps", ns="team", name="d"), True),
    ("edit", res("create", "roles", group="rbac.authorization.k8s.io", ns="team"), False),
    ("edit", res("update", "resourcequotas", ns="team", name="q"), False),
    ("edit", res("list", "pods", ns="team"), True),  # edit aggregates view
    ("admin", res("create", "rolebindings", group="rbac.authorization.k8s.io", ns="team"), True),
    ("admin", res("delete", "pods", ns="team", name="p"), True),  # admin aggregates edit
    ("admin", res("create", "localsubjectaccessreviews", group="authorization.k8s.io", ns="team"), True),
    ("admin", res("update", "namespaces", ns="team", name="team"), False),
    ("admin", res("create", "leases", group="coordination.k8s.io", ns="team"), True),
]


@pytest.mark.parametrize(("role_name", "attrs", "allowed"), BOOTSTRAP_CASES)
def test_bootstrap_user_facing_roles(policy: RBACIndex, role_name: str, attrs: Attributes, allowed: bool) -> None:
    u = bound(role_name, policy, f"user-{role_name}")
    a = Attributes(**{**{f: getattr(attrs, f) for f in attrs.__slots__}, "user": u})  # type: ignore[attr-defined]
    assert policy.authorize(a).allowed is allowed


EVERYONE = UserInfo("carol", groups=("system:authenticated",))
NOBODY = UserInfo("system:anonymous", groups=("system:unauthenticated",))
MASTER = UserInfo("root", groups=("system:masters", "system:authenticated"))

DEFAULT_CASES = [
    (EVERYONE, url("get", "/apis"), True),  # system:discovery
    (EVERYONE, url("get", "/apis/apps/v1"), True),
    (EVERYONE, url("get", "/openapi/v3"), True),
    (EVERYONE, url("get", "/version"), True),
    (EVERYONE, url("get", "/metrics"), False),
    (EVERYONE, res("create", "selfsubjectaccessreviews", group="authorization.k8s.io"), True),  # basic-user
    (EVERYONE, res("create", "selfsubjectrulesreviews", group="authorization.k8s.io"), True),
    (EVERYONE, res("create", "selfsubjectreviews", group="authentication.k8s.io"), True),
    (EVERYONE, res("create", "subjectaccessreviews", group="authorization.k8s.io"), False),
    (EVERYONE, res("list", "pods", ns="default"), False),
    (NOBODY, url("get", "/healthz"), True),  # public-info-viewer
    (NOBODY, url("get", "/version"), True),
    (NOBODY, url("get", "/api"), False),  # discovery is for authenticated users only
    (NOBODY, res("create", "selfsubjectaccessreviews", group="authorization.k8s.io"), False),
    (MASTER, res("delete", "nodes", name="n1"), True),
    (MASTER, url("post", "/anything"), True),
    (UserInfo("system:kube-scheduler"), res("create", "pods", "binding", ns="a", name="p"), True),
    (UserInfo("system:kube-scheduler"), res("update", "leases", group="coordination.k8s.io", ns="kube-system",
                                            name="kube-scheduler"), True),
    (UserInfo("system:kube-scheduler"), res("update", "leases", group="coordination.k8s.io", ns="kube-system",
                                            name="other"), False),
    (UserInfo("m", groups=("system:monitoring",)), url("get", "/metrics"), True),
    (UserInfo("system:node:n1", groups=("system:nodes", "system:authenticated")), res("get", "nodes", name="n1"),
     False),  # the system:node binding has no subjects: agents go through the Node authorizer
]


@pytest.mark.parametrize(("who", "attrs", "allowed"), DEFAULT_CASES)
def test_bootstrap_bindings(policy: RBACIndex, who: UserInfo, attrs: Attributes, allowed: bool) -> None:
    a = Attributes(**{**{f: getattr(attrs, f) for f in attrs.__slots__}, "user": who})  # type: ignore[attr-defined]
    assert policy.authorize(a).allowed is allowed


def test_bootstrap_objects_have_upstream_shape() -> None:
    roles = {r["metadata"]["name"]: r for r in bootstrap.cluster_roles()}
    assert roles["cluster-admin"]["rules"] == [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]},
                                               {"verbs": ["*"], "nonResourceURLs": ["*"]}]
    assert roles["admin"]["aggregationRule"] == {"clusterRoleSelectors": [
        {"matchLabels": {"rbac.authorization.k8s.io/aggregate-to-admin": "true"}}]}
    assert roles["edit"]["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-admin"] == "true"
    for r in roles.values():
        assert r["metadata"]["labels"]["kubernetes.io/bootstrapping"] == "rbac-defaults"
        assert r["metadata"]["annotations"] == {"rbac.authorization.kubernetes.io/autoupdate": "true"}
    bindings = {b["metadata"]["name"]: b for b in bootstrap.cluster_role_bindings()}
    assert bindings["cluster-admin"]["subjects"] == [{"kind": "Group", "name": "system:masters",
                                                      "apiGroup": "rbac.authorization.k8s.io"}]
    assert "subjects" not in bindings["system:node"]
    assert set(roles) >= {b["roleRef"]["name"] for b in bindings.values()}
