"""NodeRestriction on a real secure server, driven by the real kubectl with a node's client
certificate (`system:node:n1` in `system:nodes`, as an agent authenticates): the agent may
register and label itself within the kubelet's set, renew its own lease, confirm deletes and
write status of its own pods; it may not touch node-restriction labels, its taints, another
node, another node's pods or lease, nor create pods that are not its mirror pods. Every refusal
is a 403 Forbidden naming why, and nothing changes."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from kube.secure_server import SecureServer, module_server, needs_kubectl

pytestmark = needs_kubectl
server = module_server("noderestriction")


def write(server: SecureServer, name: str, obj: dict[str, Any]) -> str:
    path = server.tmp / f"{name}.json"
    path.write_text(json.dumps(obj))
    return str(path)


def as_node(server: SecureServer, *args: str) -> Any:
    kubeconfig = server.tmp / "system_node_n1.kubeconfig"
    if not kubeconfig.exists():
        kubeconfig = server.node_kubeconfig("n1")
    return server.kubectl(*args, kubeconfig=kubeconfig, check=False)


def forbidden(res: Any, why: str) -> None:
    assert res.returncode != 0, res.stdout
    assert "(Forbidden)" in res.stderr and why in res.stderr, res.stderr


def node(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}, "spec": {}}


def ensure_n1(server: SecureServer) -> None:
    """Node n1 as the admin makes it, unless the first test (which has n1 register itself) did."""
    if server.get_json("node", "n1") is None:
        server.kubectl("create", "-f", write(server, "n1-admin", node("n1", {})))


def pod(name: str, node_name: str, **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", **meta},
            "spec": {"nodeName": node_name, "containers": [{"name": "c", "image": "busybox"}]}}


def test_a_node_registers_and_labels_itself_only_within_the_kubelet_set(server: SecureServer) -> None:
    bad = write(server, "n1-bad", node("n1", {"kubernetes.io/hostname": "n1", "node-restriction.kubernetes.io/tier": "gold"}))
    forbidden(as_node(server, "create", "-f", bad),
              'node "n1" is not allowed to set the following labels: node-restriction.kubernetes.io/tier')
    assert server.get_json("node", "n1") is None
    other = write(server, "n2", node("n2", {}))
    forbidden(as_node(server, "create", "-f", other), 'node "n1" is not allowed to modify node "n2"')
    good = write(server, "n1", node("n1", {"kubernetes.io/hostname": "n1", "kubernetes.io/os": "linux"}))
    as_node(server, "create", "-f", good).check_returncode()
    server.kubectl("create", "-f", other)  # the admin may

    forbidden(as_node(server, "label", "node", "n1", "node-restriction.kubernetes.io/tier=gold"),
              "is not allowed to modify labels: node-restriction.kubernetes.io/tier")
    forbidden(as_node(server, "label", "node", "n1", "node-role.kubernetes.io/control-plane="),
              "is not allowed to modify labels: node-role.kubernetes.io/control-plane")
    as_node(server, "label", "node", "n1", "example.com/pool=a", "node.kubernetes.io/exclude-from-lb=true",
            ).check_returncode()
    server.kubectl("label", "node", "n1", "node-restriction.kubernetes.io/tier=gold")  # the admin may
    forbidden(as_node(server, "label", "node", "n1", "node-restriction.kubernetes.io/tier-"),
              "is not allowed to modify labels: node-restriction.kubernetes.io/tier")
    forbidden(as_node(server, "patch", "node", "n2", "--type=merge", "-p", '{"metadata": {"labels": {"a": "b"}}}'),
              "node 'n1' cannot read 'n2', only its own Node object")  # kubectl reads it first
    labels = server.get_json("node", "n1")["metadata"]["labels"]
    assert labels == {"kubernetes.io/hostname": "n1", "kubernetes.io/os": "linux", "example.com/pool": "a",
                      "node.kubernetes.io/exclude-from-lb": "true", "node-restriction.kubernetes.io/tier": "gold"}
    assert "example.com/pool" not in (server.get_json("node", "n2")["metadata"].get("labels") or {})


def test_a_node_cannot_change_its_taints(server: SecureServer) -> None:
    ensure_n1(server)
    server.kubectl("taint", "nodes", "n1", "dedicated=gpu:NoSchedule")
    forbidden(as_node(server, "taint", "nodes", "n1", "dedicated-"), 'node "n1" is not allowed to modify taints')
    forbidden(as_node(server, "taint", "nodes", "n1", "mine=yes:NoExecute"), 'node "n1" is not allowed to modify taints')
    taints = server.get_json("node", "n1")["spec"]["taints"]
    assert [(t["key"], t["effect"]) for t in taints] == [("dedicated", "NoSchedule")]


def test_a_node_touches_only_its_own_pods(server: SecureServer) -> None:
    """pods/status and deletes as the agent sends them (no read first, unlike kubectl patch),
    through the official Python client with the node's certificate."""
    kubernetes = pytest.importorskip("kubernetes")
    ensure_n1(server)
    as_node(server, "version")  # writes the node's kubeconfig
    api = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(
        str(server.tmp / "system_node_n1.kubeconfig")))
    ApiException = kubernetes.client.exceptions.ApiException

    def refused(call: Any, why: str) -> None:
        with pytest.raises(ApiException) as e:
            call()
        assert e.value.status == 403, e.value.body
        status = json.loads(e.value.body)
        assert status["reason"] == "Forbidden" and why in status["message"], status

    server.kubectl("create", "-f", write(server, "mine", pod("mine", "n1", labels={"app": "web"})))
    server.kubectl("create", "-f", write(server, "theirs", pod("theirs", "n2")))
    refused(lambda: api.patch_namespaced_pod_status("theirs", "default", {"status": {"phase": "Running"}}),
            'node "n1" can only update pod status for pods with spec.nodeName set to itself')
    refused(lambda: api.patch_namespaced_pod_status("mine", "default", {"metadata": {"labels": {"app": "evil"}}}),
            'node "n1" cannot update labels through pod status')
    api.patch_namespaced_pod_status("mine", "default", {"status": {"phase": "Running"}})
    assert server.get_json("pod", "mine")["status"]["phase"] == "Running"
    assert server.get_json("pod", "mine")["metadata"]["labels"] == {"app": "web"}
    assert server.get_json("pod", "theirs")["status"].get("phase") != "Running"
    refused(lambda: api.patch_namespaced_pod("mine", "default", {"metadata": {"labels": {"app": "evil"}}}),
            'cannot patch resource "pods"')  # a pod itself: RBAC's system:node gives no update
    refused(lambda: api.delete_namespaced_pod("theirs", "default", grace_period_seconds=0),
            'node "n1" can only delete pods with spec.nodeName set to itself')
    refused(lambda: api.create_namespaced_pod("default", pod("plain", "n1")),
            'pod does not have "kubernetes.io/config.mirror" annotation, node "n1" can only create mirror pods')
    ownerless = pod("static-n1", "n1", annotations={"kubernetes.io/config.mirror": "abc"})
    refused(lambda: api.create_namespaced_pod("default", ownerless),
            'node "n1" can only create pods with an owner reference set to itself')
    n1_uid = server.get_json("node", "n1")["metadata"]["uid"]
    owner = {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": n1_uid, "controller": True}
    refused(lambda: api.create_namespaced_pod("default", {**ownerless, "metadata": {
        **ownerless["metadata"], "ownerReferences": [{**owner, "uid": "not-n1"}]}}), "node n1 UID mismatch")
    api.create_namespaced_pod("default", {**ownerless, "metadata": {**ownerless["metadata"], "ownerReferences": [owner]}})
    assert server.get_json("pod", "static-n1")["metadata"]["ownerReferences"][0]["uid"] == n1_uid
    for name in ("mine", "static-n1"):  # the agent's delete confirmation
        api.delete_namespaced_pod(name, "default", grace_period_seconds=0)
    assert server.get_json("pod", "mine") is None and server.get_json("pod", "static-n1") is None
    assert server.get_json("pod", "theirs") is not None and server.get_json("pod", "plain") is None
    server.kubectl("delete", "pod", "theirs", "--grace-period=0", "--force")


def test_a_node_renews_only_its_own_lease(server: SecureServer) -> None:
    def lease(name: str) -> str:
        return write(server, f"lease-{name}", {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                              "metadata": {"name": name, "namespace": "kube-node-lease"},
                                              "spec": {"holderIdentity": name, "leaseDurationSeconds": 40}})
    forbidden(as_node(server, "create", "-f", lease("n2")),
              "can only access node lease with the same name as the requesting node")
    as_node(server, "create", "-f", lease("n1")).check_returncode()
    as_node(server, "patch", "lease", "-n", "kube-node-lease", "n1", "--type=merge", "-p",
            '{"spec": {"leaseDurationSeconds": 10}}').check_returncode()
    assert server.get_json("lease", "-n", "kube-node-lease", "n2") is None


def test_a_node_gets_tokens_only_bound_to_its_own_pods(server: SecureServer) -> None:
    """The kubelet's projected service-account tokens: a TokenRequest bound to a pod on the node."""
    kubernetes = pytest.importorskip("kubernetes")
    ensure_n1(server)
    as_node(server, "version")  # writes the node's kubeconfig
    api = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(
        str(server.tmp / "system_node_n1.kubeconfig")))
    server.kubectl("create", "serviceaccount", "runner")
    for name, node_name in (("withsa", "n1"), ("elsewhere", "n2")):
        body = pod(name, node_name)
        body["spec"]["serviceAccountName"] = "runner"
        server.kubectl("create", "-f", write(server, name, body))
    uids = {n: server.get_json("pod", n)["metadata"]["uid"] for n in ("withsa", "elsewhere")}

    def request(name: str | None) -> Any:
        spec: dict[str, Any] = {"expirationSeconds": 3600}
        if name:
            spec["boundObjectRef"] = {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uids[name]}
        return api.create_namespaced_service_account_token("runner", "default", {"spec": spec})

    def refused(name: str | None, why: str) -> None:
        deadline = time.monotonic() + 10
        while True:  # the Node authorizer's graph learns of the pods through a watch
            with pytest.raises(kubernetes.client.exceptions.ApiException) as e:
                request(name)
            if "no relationship found" not in e.value.body or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert e.value.status == 403 and why in json.loads(e.value.body)["message"], e.value.body

    refused(None, "node requested token not bound to a pod")
    refused("elsewhere", "node requested token bound to a pod scheduled on a different node")
    token = request("withsa").status.token
    res = server.kubectl("--token", token, "get", "secrets", check=False)
    assert res.returncode != 0 and 'User "system:serviceaccount:default:runner" cannot' in res.stderr, res.stderr
    for name in ("withsa", "elsewhere"):
        server.kubectl("delete", "pod", name, "--grace-period=0", "--force")
