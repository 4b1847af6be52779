"""The Node authorizer: an agent reaches its own node, its pods and what they reference; nothing
of other nodes (table from upstream's node authorizer tests, selectors on)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeagent.cluster.auth.attributes import Attributes, Verdict, forbidden_message
from nodeagent.cluster.auth.authorizer import build_authorizer
from nodeagent.cluster.auth.node import NodeAuthorizer, NodeGraph, pod_references
from nodeagent.cluster.auth.rbac import bootstrap
from nodeagent.cluster.auth.rbac.index import RBACIndex
from nodeagent.cluster.auth.user import UserInfo

N1 = UserInfo("system:node:n1", groups=("system:nodes", "system:authenticated"))


def pod(name: str, node: str, ns: str = "ns", **spec: Any) -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}"},
            "spec": {"nodeName": node, "containers": [{"name": "c"}], **spec}}


POD_SPEC = {
    "serviceAccountName": "runner",
    "imagePullSecrets": [{"name": "pull"}],
    "containers": [{"name": "c", "env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "env-secret", "key": "k"}}},
                                         {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "env-cm", "key": "k"}}}],
                    "envFrom": [{"secretRef": {"name": "from-secret"}}, {"configMapRef": {"name": "from-cm"}}]}],
    "initContainers": [{"name": "i", "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "init-secret"}}}]}],
    "volumes": [{"name": "v1", "secret": {"secretName": "vol-secret"}},
                {"name": "v2", "configMap": {"name": "vol-cm"}},
                {"name": "v3", "projected": {"sources": [{"secret": {"name": "proj-secret"}},
                                                         {"configMap": {"name": "proj-cm"}}]}},
                {"name": "v4", "persistentVolumeClaim": {"claimName": "data"}},
                {"name": "v5", "csi": {"driver": "d", "nodePublishSecretRef": {"name": "csi-secret"}}}],
}


@pytest.fixture
def graph() -> NodeGraph:
    g = NodeGraph()
    g.put_pod(pod("mine", "n1", **POD_SPEC))
    g.put_pod(pod("theirs", "n2", volumes=[{"name": "v", "secret": {"secretName": "their-secret"}}]))
    g.put_pod(pod("pending", "", volumes=[{"name": "v", "secret": {"secretName": "pending-secret"}}]))
    g.put_claim({"kind": "PersistentVolumeClaim", "metadata": {"name": "data", "namespace": "ns"},
                 "spec": {"volumeName": "pv-1"}})
    return g


def res(verb: str, resource: str, sub: str = "", group: str = "", ns: str = "", name: str = "",
        fs: str = "", user: UserInfo = N1) -> Attributes:
    return Attributes(user=user, verb=verb, api_group=group, resource=resource, subresource=sub, namespace=ns,
                      name=name, field_selector=fs)


CASES = [
    # nodes
    (res("create", "nodes"), True, ""),
    (res("get", "nodes", name="n1"), True, ""),
    (res("get", "nodes", name="n2"), False, "node 'n1' cannot read 'n2', only its own Node object"),
    (res("list", "nodes"), False, "node 'n1' cannot read all nodes, only its own Node object"),
    (res("watch", "nodes", name="n1"), True, ""),  # pinned by fieldSelector metadata.name=n1
    (res("update", "nodes", name="n1"), True, ""),
    (res("patch", "nodes", name="n2"), False, 'node "n1" is not allowed to modify node "n2"'),
    (res("patch", "nodes", "status", name="n1"), True, ""),
    (res("update", "nodes", "status", name="n2"), False, 'node "n1" is not allowed to modify node "n2"'),
    (res("delete", "nodes", name="n1"), False, ""),
    # pods
    (res("get", "pods", ns="ns", name="mine"), True, ""),
    (res("get", "pods", ns="ns", name="theirs"), False, "no relationship found between node 'n1' and this object"),
    (res("get", "pods", ns="ns", name="pending"), False, "no relationship found between node 'n1' and this object"),
    (res("list", "pods", fs="spec.nodeName=n1"), True, ""),
    (res("watch", "pods", fs="status.phase!=Failed,spec.nodeName==n1"), True, ""),
    (res("list", "pods", fs="spec.nodeName=n2"), False, "can only list/watch pods with spec.nodeName field selector"),
    (res("list", "pods", fs="spec.nodeName!=n1"), False, "can only list/watch pods with spec.nodeName field selector"),
    (res("list", "pods", ns="ns"), False, "can only list/watch pods with spec.nodeName field selector"),
    (res("watch", "pods", ns="ns", name="mine"), True, ""),
    (res("patch", "pods", "status", ns="ns", name="mine"), True, ""),
    (res("update", "pods", "status", ns="ns", name="theirs"), False,
     'node "n1" can only update pod status for pods with spec.nodeName set to itself'),
    (res("create", "pods", "eviction", ns="ns", name="mine"), True, ""),
    (res("create", "pods", "eviction", ns="ns", name="theirs"), False,
     'node "n1" can only evict pods with spec.nodeName set to itself'),
    (res("delete", "pods", ns="ns", name="mine"), True, ""),
    (res("delete", "pods", ns="ns", name="theirs"), False,
     'node "n1" can only delete pods with spec.nodeName set to itself'),
    (res("create", "pods", ns="ns"), True, ""),  # mirror pods: the body is checked by NodeRestriction
    (res("update", "pods", ns="ns", name="mine"), False, ""),
    (res("get", "pods", "log", ns="ns", name="mine"), False, ""),
    # what its pods reference
    *[(res("get", "secrets", ns="ns", name=s), True, "") for s in
      ("pull", "env-secret", "from-secret", "init-secret", "vol-secret", "proj-secret", "csi-secret")],
    *[(res("get", "configmaps", ns="ns", name=c), True, "") for c in ("env-cm", "from-cm", "vol-cm", "proj-cm")],
    (res("watch", "secrets", ns="ns", name="vol-secret"), True, ""),
    (res("get", "secrets", ns="ns", name="their-secret"), False, "no relationship found between node 'n1' and this object"),
    (res("get", "secrets", ns="ns", name="pending-secret"), False, "no relationship found between node 'n1' and this object"),
    (res("get", "secrets", ns="other", name="vol-secret"), False, "no relationship found between node 'n1' and this object"),
    (res("list", "secrets", ns="ns"), False, "No Object name found"),
    (res("update", "secrets", ns="ns", name="vol-secret"), False, "can only read resources of this type"),
    (res("get", "configmaps", name="vol-cm"), False, "can only read namespaced object of this type"),
    (res("get", "persistentvolumeclaims", ns="ns", name="data"), True, ""),
    (res("list", "persistentvolumeclaims", ns="ns"), False, "can only get individual resources of this type"),
    (res("patch", "persistentvolumeclaims", "status", ns="ns", name="data"), True, ""),
    (res("get", "persistentvolumes", name="pv-1"), True, ""),
    (res("get", "persistentvolumes", name="pv-2"), False, "no relationship found between node 'n1' and this object"),
    (res("create", "serviceaccounts", "token", ns="ns", name="runner"), True, ""),
    (res("create", "serviceaccounts", "token", ns="ns", name="default"), False,
     "no relationship found between node 'n1' and this object"),
    (res("get", "serviceaccounts", ns="ns", name="runner"), False, "can only create tokens for individual service accounts"),
    # leases
    (res("get", "leases", group="coordination.k8s.io", ns="kube-node-lease", name="n1"), True, ""),
    (res("update", "leases", group="coordination.k8s.io", ns="kube-node-lease", name="n1"), True, ""),
    (res("create", "leases", group="coordination.k8s.io", ns="kube-node-lease"), True, ""),
    (res("update", "leases", group="coordination.k8s.io", ns="kube-node-lease", name="n2"), False,
     "can only access node lease with the same name as the requesting node"),
    (res("get", "leases", group="coordination.k8s.io", ns="kube-system", name="n1"), False,
     'can only access leases in the "kube-node-lease" system namespace'),
    (res("list", "leases", group="coordination.k8s.io", ns="kube-node-lease"), False,
     "can only get, create, update, patch, or delete a node lease"),
    # the static rules
    (res("create", "events", ns="ns"), True, ""),
    (res("patch", "events", ns="default", name="e"), True, ""),
    (res("list", "services"), True, ""),
    (res("create", "certificatesigningrequests", group="certificates.k8s.io"), True, ""),
    (res("delete", "namespaces", name="ns"), False, ""),
    (res("list", "deployments", group="apps", ns="ns"), False, ""),
]


@pytest.mark.parametrize(("attrs", "allowed", "reason"), CASES)
def test_node_authorizer(graph: NodeGraph, attrs: Attributes, allowed: bool, reason: str) -> None:
    if attrs.verb == "watch" and attrs.resource == "nodes":
        attrs = res("watch", "nodes", name="n1")  # requestinfo pins the name from metadata.name=n1
    d = NodeAuthorizer(graph).authorize(attrs)
    assert d.allowed is allowed
    assert d.verdict in (Verdict.ALLOW, Verdict.NO_OPINION)  # never Deny: RBAC gets its turn
    assert d.reason == reason


def test_not_a_node_has_no_opinion(graph: NodeGraph) -> None:
    a = NodeAuthorizer(graph)
    for user in (UserInfo("system:node:n1"),  # the name without the group
                 UserInfo("n1", groups=("system:nodes",)),  # the group without the name
                 UserInfo("alice", groups=("system:authenticated",))):
        d = a.authorize(res("get", "nodes", name="n1", user=user))
        assert (d.verdict, d.reason) == (Verdict.NO_OPINION, "")
    d = a.authorize(res("get", "nodes", name="n1", user=UserInfo("system:node:", groups=("system:nodes",))))
    assert d.reason == 'unknown node for user "system:node:"'


def test_graph_follows_pod_changes(graph: NodeGraph) -> None:
    a = NodeAuthorizer(graph)
    secret = res("get", "secrets", ns="ns", name="vol-secret")
    assert a.authorize(secret).allowed
    graph.apply("MODIFIED", pod("mine", "n1"))  # the pod no longer mounts it
    assert not a.authorize(secret).allowed
    graph.apply("ADDED", pod("second", "n1", volumes=[{"name": "v", "secret": {"secretName": "vol-secret"}}]))
    graph.apply("ADDED", pod("third", "n1", volumes=[{"name": "v", "secret": {"secretName": "vol-secret"}}]))
    graph.apply("DELETED", pod("second", "n1"))
    assert a.authorize(secret).allowed  # still referenced by "third"
    graph.apply("DELETED", pod("third", "n1"))
    assert not a.authorize(secret).allowed
    graph.apply("MODIFIED", pod("pending", "n1", volumes=[{"name": "v", "secret": {"secretName": "pending-secret"}}]))
    assert a.authorize(res("get", "secrets", ns="ns", name="pending-secret")).allowed  # bound to n1 now


def test_pod_references_default_service_account_and_ephemeral_claims() -> None:
    refs = pod_references(pod("p", "n1", volumes=[{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {}}}]))
    assert ("serviceaccount", "ns", "default") in refs
    assert ("persistentvolumeclaim", "ns", "p-scratch") in refs


def test_chain_node_then_rbac(graph: NodeGraph) -> None:
    rbac = RBACIndex(bootstrap.cluster_roles() + bootstrap.cluster_role_bindings())
    chain = build_authorizer(["Node", "RBAC"], rbac, graph)
    a = res("get", "nodes", name="n2")
    d = chain.authorize(a)
    assert not d.allowed
    assert forbidden_message(a, d.reason) == ('nodes "n2" is forbidden: User "system:node:n1" cannot get resource '
                                              '"nodes" in API group "" at the cluster scope: node \'n1\' cannot '
                                              "read 'n2', only its own Node object")
    assert chain.authorize(res("get", "nodes", name="n1")).allowed
    assert chain.authorize(Attributes(user=N1, verb="get", resource_request=False, path="/api")).allowed  # RBAC
    # an operator can still grant an agent more through RBAC
    rbac.put({"kind": "ClusterRoleBinding", "metadata": {"name": "x"},
              "roleRef": {"kind": "ClusterRole", "name": "view"}, "subjects": [{"kind": "Group", "name": "system:nodes"}]})
    assert chain.authorize(res("list", "pods", ns="ns")).allowed


POD_KEYS = st.sampled_from(["metadata", "spec", "status", "name", "namespace", "nodeName", "volumes", "containers",
                            "env", "envFrom", "valueFrom", "secretKeyRef", "secret", "secretName", "projected",
                            "sources", "imagePullSecrets", "serviceAccountName", "ephemeral", "annotations"])
POD_LIKE = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=6),
                        lambda kids: st.lists(kids, max_size=3) | st.dictionaries(POD_KEYS, kids, max_size=5),
                        max_leaves=25)


@settings(max_examples=300, deadline=None)
@given(POD_LIKE, st.sampled_from(["ADDED", "MODIFIED", "DELETED"]))
def test_malformed_pods_never_break_the_graph(obj: Any, event: str) -> None:
    graph = NodeGraph()
    body = {**obj, "kind": "Pod"} if isinstance(obj, dict) else {"kind": "Pod", "spec": obj}
    graph.apply(event, body)
    graph.apply("DELETED", body)
    assert NodeAuthorizer(graph).authorize(res("get", "nodes", name="n1")).allowed
