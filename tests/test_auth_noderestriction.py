"""NodeRestriction's pure rule: what an agent may write, case by case from upstream's
plugin/pkg/admission/noderestriction admission_test.go (messages as upstream words them)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeagent.cluster.auth.noderestriction import NodeRequest, forbidden_labels, is_kubelet_label, node_restriction
from nodeagent.cluster.auth.user import UserInfo

N1 = UserInfo("system:node:n1", groups=("system:nodes", "system:authenticated"))
ALICE = UserInfo("alice", groups=("system:authenticated",))
MIRROR = {"kubernetes.io/config.mirror": "hash"}
OWNER = {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "node-uid", "controller": True}


def pod(node: str = "n1", *, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
        owners: list[dict[str, Any]] | None = None, claims: list[dict[str, Any]] | None = None,
        **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "namespace": "ns", "labels": labels or {"app": "a"}}
    if annotations is not None:
        meta["annotations"] = annotations
    if owners is not None:
        meta["ownerReferences"] = owners
    return {"metadata": meta, "spec": {"nodeName": node, "containers": [{"name": "c"}], **spec},
            "status": {"resourceClaimStatuses": claims or []}}


def mirror(**kw: Any) -> dict[str, Any]:
    kw.setdefault("annotations", MIRROR)
    kw.setdefault("owners", [OWNER])
    return pod(**kw)


def node(name: str = "n1", *, labels: dict[str, str] | None = None, taints: list[dict[str, str]] | None = None,
         config_source: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if taints is not None:
        spec["taints"] = taints
    if config_source is not None:
        spec["configSource"] = config_source
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": spec}


def create(resource: str, obj: dict[str, Any], *, group: str = "", ns: str = "ns", sub: str = "",
           node_uid: str | None = "node-uid") -> NodeRequest:
    return NodeRequest("CREATE", group, resource, sub, ns, "", obj, None, node_uid)


def update(resource: str, new: dict[str, Any], old: dict[str, Any], *, sub: str = "", name: str = "n1",
           group: str = "", ns: str = "") -> NodeRequest:
    return NodeRequest("UPDATE", group, resource, sub, ns, name, new, old)


def delete(resource: str, obj: dict[str, Any] | None, *, name: str = "p", group: str = "", ns: str = "ns") -> NodeRequest:
    return NodeRequest("DELETE", group, resource, "", ns, name, obj, obj)


def token(ref: dict[str, Any] | None, bound: dict[str, Any] | None) -> NodeRequest:
    if bound is not None:
        bound = {**bound, "metadata": {**bound["metadata"], "uid": "pod-uid"}}
    return NodeRequest("CREATE", "", "serviceaccounts", "token", "ns", "sa",
                       {"spec": {"boundObjectRef": ref} if ref else {}}, bound)


TAINT = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
SECRET_ENV = [{"name": "c", "env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}]
CM_ENV_FROM = [{"name": "c", "envFrom": [{"configMapRef": {"name": "cm"}}]}]

CASES: list[tuple[str, NodeRequest, str | None]] = [
    # ---- mirror pods (admitPodCreate)
    ("mirror pod bound to itself", create("pods", mirror()), None),
    ("not a mirror pod", create("pods", pod()),
     'pod does not have "kubernetes.io/config.mirror" annotation, node "n1" can only create mirror pods'),
    ("mirror pod for another node", create("pods", mirror(node="n2")),
     'node "n1" can only create pods with spec.nodeName set to itself'),
    ("mirror pod without owner", create("pods", mirror(owners=[])),
     'node "n1" can only create pods with an owner reference set to itself'),
    ("mirror pod with two owners", create("pods", mirror(owners=[OWNER, OWNER])),
     'node "n1" can only create pods with a single owner reference set to itself'),
    ("owner is another node", create("pods", mirror(owners=[{**OWNER, "name": "n2"}])),
     'node "n1" can only create pods with an owner reference set to itself'),
    ("owner of another kind", create("pods", mirror(owners=[{**OWNER, "kind": "Pod"}])),
     'node "n1" can only create pods with an owner reference set to itself'),
    ("owner of another apiVersion", create("pods", mirror(owners=[{**OWNER, "apiVersion": "v2"}])),
     'node "n1" can only create pods with an owner reference set to itself'),
    ("owner not controller", create("pods", mirror(owners=[{**OWNER, "controller": False}])),
     'node "n1" can only create pods with a controller owner reference set to itself'),
    ("owner controller unset", create("pods", mirror(owners=[{k: v for k, v in OWNER.items() if k != "controller"}])),
     'node "n1" can only create pods with a controller owner reference set to itself'),
    ("blockOwnerDeletion", create("pods", mirror(owners=[{**OWNER, "blockOwnerDeletion": True}])),
     'node "n1" must not set blockOwnerDeletion on an owner reference'),
    ("owner uid is not the node's", create("pods", mirror(owners=[{**OWNER, "uid": "other"}])),
     "node n1 UID mismatch: expected other got node-uid"),
    ("node not registered", create("pods", mirror(), node_uid=None), 'nodes "n1" not found'),
    ("mirror pod with a service account", create("pods", mirror(serviceAccountName="sa")),
     'node "n1" can not create pods that reference a service account'),
    ("mirror pod with a secret env", create("pods", mirror(containers=SECRET_ENV)),
     'node "n1" can not create pods that reference secrets'),
    ("mirror pod with an image pull secret", create("pods", mirror(imagePullSecrets=[{"name": "pull"}])),
     'node "n1" can not create pods that reference secrets'),
    ("mirror pod with a secret volume", create("pods", mirror(volumes=[{"name": "v", "secret": {"secretName": "s"}}])),
     'node "n1" can not create pods that reference secrets'),
    ("mirror pod with a csi secret", create("pods", mirror(volumes=[
        {"name": "v", "csi": {"driver": "d", "nodePublishSecretRef": {"name": "s"}}}])),
     'node "n1" can not create pods that reference secrets'),
    ("mirror pod with a configmap envFrom", create("pods", mirror(containers=CM_ENV_FROM)),
     'node "n1" can not create pods that reference configmaps'),
    ("mirror pod with a projected configmap", create("pods", mirror(volumes=[
        {"name": "v", "projected": {"sources": [{"configMap": {"name": "cm"}}]}}])),
     'node "n1" can not create pods that reference configmaps'),
    ("mirror pod with a cluster trust bundle", create("pods", mirror(volumes=[
        {"name": "v", "projected": {"sources": [{"clusterTrustBundle": {"name": "b", "path": "p"}}]}}])),
     'node "n1" can not create pods that reference clustertrustbundles'),
    ("mirror pod with a claim", create("pods", mirror(volumes=[
        {"name": "v", "persistentVolumeClaim": {"claimName": "data"}}])),
     'node "n1" can not create pods that reference persistentvolumeclaims'),
    ("mirror pod with an emptyDir", create("pods", mirror(volumes=[{"name": "v", "emptyDir": {}}])), None),
    # ---- pods: delete, update, other subresources (admitPod)
    ("delete its own pod", delete("pods", pod()), None),
    ("delete another node's pod", delete("pods", pod("n2")),
     'node "n1" can only delete pods with spec.nodeName set to itself'),
    ("delete an unbound pod", delete("pods", pod("")),
     'node "n1" can only delete pods with spec.nodeName set to itself'),
    ("update a pod", update("pods", pod(), pod(), name="p", ns="ns"),
     'unexpected operation "UPDATE", node "n1" can only create and delete mirror pods'),
    ("pods/binding", NodeRequest("CREATE", "", "pods", "binding", "ns", "p", {}),
     "unexpected pod subresource \"binding\", only 'status' and 'eviction' are allowed"),
    # ---- pods/status (admitPodStatus)
    ("status of its own pod", update("pods", pod(), pod(), sub="status", name="p", ns="ns"), None),
    ("status of another node's pod", update("pods", pod("n2"), pod("n2"), sub="status", name="p", ns="ns"),
     'node "n1" can only update pod status for pods with spec.nodeName set to itself'),
    ("status of a pod moved to it", update("pods", pod("n1"), pod("n2"), sub="status", name="p", ns="ns"),
     'node "n1" can only update pod status for pods with spec.nodeName set to itself'),
    ("labels through pod status", update("pods", pod(labels={"app": "b"}), pod(), sub="status", name="p", ns="ns"),
     'node "n1" cannot update labels through pod status'),
    ("claim statuses through pod status", update("pods", pod(claims=[{"name": "c", "resourceClaimName": "x"}]),
                                                 pod(), sub="status", name="p", ns="ns"),
     'node "n1" cannot update resource claim statues'),
    # ---- pods/eviction (admitPodEviction)
    ("evict its own pod", NodeRequest("CREATE", "", "pods", "eviction", "ns", "p", {}, pod()), None),
    ("evict another node's pod", NodeRequest("CREATE", "", "pods", "eviction", "ns", "p", {}, pod("n2")),
     "node n1 can only evict pods with spec.nodeName set to itself"),
    # ---- its Node (admitNode)
    ("create its own node", create("nodes", node(labels={"kubernetes.io/hostname": "n1"}), ns=""), None),
    ("create another node", create("nodes", node("n2"), ns=""), 'node "n1" is not allowed to modify node "n2"'),
    ("update another node", update("nodes", node("n2"), node("n2"), name="n2"),
     'node "n1" is not allowed to modify node "n2"'),
    ("create with configSource", create("nodes", node(config_source={"configMap": {}}), ns=""),
     'node "n1" is not allowed to create pods with a non-nil configSource'),
    ("create with a node-restriction label", create("nodes", node(labels={
        "node-restriction.kubernetes.io/tier": "gold", "foo.node-restriction.kubernetes.io/a": "b",
        "example.com/free": "x"}), ns=""),
     'node "n1" is not allowed to set the following labels: foo.node-restriction.kubernetes.io/a, '
     "node-restriction.kubernetes.io/tier"),
    ("create with a node-role label", create("nodes", node(labels={"node-role.kubernetes.io/master": ""}), ns=""),
     'node "n1" is not allowed to set the following labels: node-role.kubernetes.io/master'),
    ("create with kubelet labels", create("nodes", node(labels={
        "kubernetes.io/os": "linux", "topology.kubernetes.io/zone": "z", "node.kubernetes.io/instance-type": "m",
        "kubelet.kubernetes.io/x": "y", "sub.node.kubernetes.io/y": "z", "nodeagent.io/pool": "a"}), ns=""), None),
    ("update taints", update("nodes", node(taints=[]), node(taints=[TAINT])),
     'node "n1" is not allowed to modify taints'),
    ("add a taint", update("nodes", node(taints=[TAINT]), node()), 'node "n1" is not allowed to modify taints'),
    ("taints unchanged", update("nodes", node(taints=[TAINT], labels={"a": "b"}), node(taints=[TAINT])), None),
    ("set configSource", update("nodes", node(config_source={"configMap": {}}), node()),
     'node "n1" is not allowed to update configSource to a new non-nil configSource'),
    ("drop configSource", update("nodes", node(), node(config_source={"configMap": {}})), None),
    ("change a node-restriction label", update("nodes", node(labels={"node-restriction.kubernetes.io/t": "b"}),
                                               node(labels={"node-restriction.kubernetes.io/t": "a"})),
     "is not allowed to modify labels: node-restriction.kubernetes.io/t"),
    ("remove a node-restriction label", update("nodes", node(), node(labels={"node-restriction.kubernetes.io/t": "a"})),
     "is not allowed to modify labels: node-restriction.kubernetes.io/t"),
    ("keep a node-restriction label", update("nodes", node(labels={"node-restriction.kubernetes.io/t": "a", "x": "1"}),
                                             node(labels={"node-restriction.kubernetes.io/t": "a"})), None),
    ("change a k8s.io label", update("nodes", node(labels={"example.k8s.io/a": "1"}), node()),
     "is not allowed to modify labels: example.k8s.io/a"),
    ("change its hostname label", update("nodes", node(labels={"kubernetes.io/hostname": "x"}), node()), None),
    ("node status", update("nodes", node(), node(), sub="status"), None),
    ("delete itself", delete("nodes", node(), name="n1", ns=""), None),
    ("delete another node", delete("nodes", node("n2"), name="n2", ns=""),
     'node "n1" is not allowed to modify node "n2"'),
    # ---- leases and CSINodes
    ("create its lease", create("leases", {"metadata": {"name": "n1"}}, group="coordination.k8s.io",
                                ns="kube-node-lease"), None),
    ("create another lease", create("leases", {"metadata": {"name": "n2"}}, group="coordination.k8s.io",
                                    ns="kube-node-lease"),
     "can only access node lease with the same name as the requesting node"),
    ("renew another lease", update("leases", {}, {}, group="coordination.k8s.io", ns="kube-node-lease", name="n2"),
     "can only access node lease with the same name as the requesting node"),
    ("renew its lease", update("leases", {}, {}, group="coordination.k8s.io", ns="kube-node-lease"), None),
    ("a lease elsewhere", create("leases", {"metadata": {"name": "n1"}}, group="coordination.k8s.io", ns="default"),
     'can only access leases in the "kube-node-lease" system namespace'),
    ("create another csinode", create("csinodes", {"metadata": {"name": "n2"}}, group="storage.k8s.io", ns=""),
     "can only access CSINode with the same name as the requesting node"),
    # ---- service-account tokens (admitServiceAccount)
    ("token bound to its pod", token({"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "pod-uid"}, pod()), None),
    ("token not bound", token(None, pod()), "node requested token not bound to a pod"),
    ("token bound to a secret", token({"apiVersion": "v1", "kind": "Secret", "name": "s", "uid": "x"}, pod()),
     "node requested token not bound to a pod"),
    ("token bound without a uid", token({"apiVersion": "v1", "kind": "Pod", "name": "p"}, pod()),
     "node requested token with a pod binding without a uid"),
    ("token bound to a recreated pod", token({"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "old"}, pod()),
     "the UID in the bound object reference (old) does not match the UID in record. The object might have been "
     "deleted and then recreated"),
    ("token bound to another node's pod", token({"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "pod-uid"},
                                                pod("n2")),
     "node requested token bound to a pod scheduled on a different node"),
    ("token bound to a missing pod", token({"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "pod-uid"}, None),
     'pods "p" not found'),
    # ---- everything else is the authorizer's
    ("an event", create("events", {"metadata": {"name": "e"}}), None),
]


@pytest.mark.parametrize(("req", "message"), [pytest.param(r, m, id=i) for i, r, m in CASES])
def test_node_restriction(req: NodeRequest, message: str | None) -> None:
    refusal = node_restriction(N1, req)
    assert (refusal.message if refusal else None) == message
    assert node_restriction(ALICE, req) is None  # only nodes are restricted


def test_not_found_is_marked() -> None:
    refusal = node_restriction(N1, create("pods", mirror(), node_uid=None))
    assert refusal is not None and refusal.not_found


def test_a_node_without_a_name_is_refused_everything() -> None:
    nameless = UserInfo("system:node:", groups=("system:nodes",))
    refusal = node_restriction(nameless, create("events", {}))
    assert refusal is not None and refusal.message == 'could not determine node from user "system:node:"'


@pytest.mark.parametrize(("label", "kubelet"), [
    ("kubernetes.io/hostname", True), ("beta.kubernetes.io/arch", True), ("node.kubernetes.io/exclude", True),
    ("x.kubelet.kubernetes.io/y", True), ("kubernetes.io/role", False), ("node-role.kubernetes.io/worker", False),
    ("example.com/a", False), ("plain", False)])
def test_kubelet_labels(label: str, kubelet: bool) -> None:
    assert is_kubelet_label(label) is kubelet


def test_forbidden_labels_are_added_changed_or_removed() -> None:
    old = {"node-restriction.kubernetes.io/keep": "1", "node-restriction.kubernetes.io/gone": "1",
           "node-restriction.kubernetes.io/changed": "1"}
    new = {"node-restriction.kubernetes.io/keep": "1", "node-restriction.kubernetes.io/changed": "2",
           "node-restriction.kubernetes.io/new": "1"}
    assert forbidden_labels(new, old) == ["node-restriction.kubernetes.io/changed",
                                          "node-restriction.kubernetes.io/gone", "node-restriction.kubernetes.io/new"]


JSONISH = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                       lambda kids: st.lists(kids, max_size=3) | st.dictionaries(
                           st.sampled_from(["metadata", "spec", "status", "labels", "annotations", "ownerReferences",
                                            "nodeName", "taints", "volumes", "containers", "env", "projected",
                                            "sources", "kubernetes.io/config.mirror", "name"]), kids, max_size=4),
                       max_leaves=20)


@settings(max_examples=200, deadline=None)
@given(JSONISH, JSONISH, st.sampled_from(["CREATE", "UPDATE", "DELETE"]), st.sampled_from(["pods", "nodes", "leases"]),
       st.sampled_from(["", "status", "eviction"]))
def test_malformed_bodies_give_an_answer(new: Any, old: Any, op: str, resource: str, sub: str) -> None:
    """Whatever the bodies, the rule answers (a refusal or None) and never raises."""
    req = NodeRequest(op, "coordination.k8s.io" if resource == "leases" else "", resource, sub, "ns", "n1",
                      new if isinstance(new, dict) else {"spec": new}, old if isinstance(old, dict) else None)
    node_restriction(N1, req)
