"""Prometheus metrics: snapshot families, histograms and the HTTP middleware, parsed back."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from nodeagent.agent.api.app import create_app
from nodeagent.agent.api.metrics import (
    Metrics,
    NodeSnapshot,
    PodSample,
    SignalSample,
    ThresholdSample,
    pod_samples,
    quantity_numbers,
    signal_samples,
    threshold_samples,
)
from nodeagent.agent.config.settings import AuthenticationConfig, parse_config
from nodeagent.agent.eviction.observations import Observation
from nodeagent.core.quantity import parse_quantity
from nodeagent.daemonkit.auth import Authenticator

GI = 1 << 30


class Provider:
    def __init__(self) -> None:
        self.fail = False
        self.calls = 0

    def metrics_snapshot(self) -> NodeSnapshot:
        self.calls += 1
        if self.fail:
            raise RuntimeError("broken")
        return NodeSnapshot(
            capacity={"cpu": 2.0, "memory": 8 * GI, "pods": 110},
            allocatable={"cpu": 1.8, "memory": 7 * GI, "pods": 110},
            pods=[PodSample("default", "web", "Running", "Burstable", {"app": 3, "sidecar": 0}),
                  PodSample("default", "db", "Running", "Burstable", {"db": 1}),
                  PodSample("batch", "job", "Failed", "BestEffort", {"job": 0})],
            evictions={"memory.available": 4, "nodefs.available": 1},
            signals={"memory.available": SignalSample(512 << 20, 8 * GI),
                     "nodefs.inodesFree": SignalSample(1000, 50000)},
            thresholds=[ThresholdSample("memory.available", "hard", 100 << 20),
                        ThresholdSample("memory.available", "soft", 256 << 20),
                        ThresholdSample("nodefs.inodesFree", "hard", 2500)],
            conditions=("MemoryPressure",),
        )


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(parsed: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return parsed[(name, frozenset(labels.items()))]


def types(text: str) -> dict[str, str]:
    return {f.name: f.type for f in text_string_to_metric_families(text)}


def test_snapshot_families() -> None:
    text = Metrics(Provider()).render().decode()
    p = samples(text)
    assert value(p, "nodeagent_node_capacity", resource="cpu", unit="core") == 2.0
    assert value(p, "nodeagent_node_allocatable", resource="memory", unit="byte") == 7 * GI
    assert value(p, "nodeagent_node_capacity", resource="pods", unit="integer") == 110
    assert value(p, "nodeagent_pods", phase="Running", qos_class="Burstable") == 2
    assert value(p, "nodeagent_pods", phase="Failed", qos_class="BestEffort") == 1
    assert value(p, "nodeagent_container_restarts_total", namespace="default", pod="web", container="app") == 3
    assert value(p, "nodeagent_container_restarts_total", namespace="default", pod="db", container="db") == 1
    assert value(p, "kubelet_evictions", eviction_signal="memory.available") == 4
    assert value(p, "nodeagent_evictions_total", eviction_signal="nodefs.available") == 1
    assert value(p, "nodeagent_eviction_signal_available_bytes", signal="memory.available") == 512 << 20
    assert value(p, "nodeagent_eviction_signal_capacity_bytes", signal="memory.available") == 8 * GI
    assert value(p, "nodeagent_eviction_signal_available_inodes", signal="nodefs.inodesFree") == 1000
    assert value(p, "nodeagent_eviction_threshold_bytes", signal="memory.available", kind="soft") == 256 << 20
    assert value(p, "nodeagent_eviction_threshold_inodes", signal="nodefs.inodesFree", kind="hard") == 2500
    assert value(p, "nodeagent_node_condition", condition="MemoryPressure", status="true") == 1
    assert value(p, "nodeagent_node_condition", condition="MemoryPressure", status="false") == 0
    assert value(p, "nodeagent_node_condition", condition="DiskPressure", status="false") == 1
    t = types(text)
    assert t["nodeagent_evictions"] == "counter" and t["nodeagent_container_restarts"] == "counter"
    assert t["nodeagent_node_capacity"] == "gauge" and t["kubelet_evictions"] == "unknown"
    # the kubelet's series name, exactly: dashboards query kubelet_evictions, not ..._total
    assert '# TYPE kubelet_evictions untyped\nkubelet_evictions{eviction_signal="memory.available"} 4.0' in text


def test_snapshot_is_taken_per_scrape_not_at_registration() -> None:
    provider = Provider()
    metrics = Metrics(provider)
    assert provider.calls == 0
    metrics.render()
    metrics.render()
    assert provider.calls == 2


def test_broken_snapshot_still_serves_histograms() -> None:
    provider = Provider()
    provider.fail = True
    metrics = Metrics(provider)
    metrics.observe_eviction_reaction("memory.available", 0.3)
    p = samples(metrics.render().decode())
    assert value(p, "nodeagent_metrics_snapshot_error") == 1
    assert value(p, "nodeagent_eviction_reaction_seconds_count", signal="memory.available") == 1
    assert not any(name == "nodeagent_pods" for name, _ in p)


def test_eviction_reaction_histogram() -> None:
    metrics = Metrics()
    for seconds in (0.02, 0.2, 3.0, -1.0):  # a negative (clock skew) counts as 0
        metrics.observe_eviction_reaction("memory.available", seconds)
    p = samples(metrics.render().decode())
    h = "nodeagent_eviction_reaction_seconds"
    assert value(p, f"{h}_count", signal="memory.available") == 4
    assert value(p, f"{h}_sum", signal="memory.available") == pytest.approx(3.22)
    assert value(p, f"{h}_bucket", signal="memory.available", le="0.025") == 2
    assert value(p, f"{h}_bucket", signal="memory.available", le="0.25") == 3
    assert value(p, f"{h}_bucket", signal="memory.available", le="+Inf") == 4


# ---- helpers from the agent's values ----


def test_quantity_numbers() -> None:
    q = {"cpu": parse_quantity("1500m"), "memory": parse_quantity("1Gi"), "pods": parse_quantity("110")}
    assert quantity_numbers(q) == {"cpu": 1.5, "memory": float(GI), "pods": 110.0}


def test_pod_samples_from_kubernetes_dicts() -> None:
    pods: list[dict[str, Any]] = [
        {"metadata": {"namespace": "default", "name": "web"},
         "status": {"phase": "Running", "qosClass": "Guaranteed",
                    "containerStatuses": [{"name": "app", "restartCount": 2}, {"name": "side"}]}},
        {"metadata": {"name": "broken.yaml", "namespace": ""}, "status": {"phase": "Pending"}},
    ]
    assert pod_samples(pods) == [PodSample("default", "web", "Running", "Guaranteed", {"app": 2, "side": 0}),
                                 PodSample("", "broken.yaml", "Pending", "", {})]


def test_threshold_and_signal_samples_from_config() -> None:
    config = parse_config({"evictionHard": {"memory.available": "100Mi", "nodefs.available": "10%",
                                            "pid.available": "5%"},
                           "evictionSoft": {"memory.available": "1Gi"},
                           "evictionSoftGracePeriod": {"memory.available": "30s"}}, "x")
    obs = {"memory.available": Observation(2 * GI, 8 * GI), "nodefs.available": Observation(50 * GI, 100 * GI)}
    assert signal_samples(obs)["nodefs.available"] == SignalSample(50 * GI, 100 * GI)
    got = {(t.signal, t.kind): t.value for t in threshold_samples(config.thresholds, obs)}
    assert got[("memory.available", "hard")] == 100 << 20
    assert got[("memory.available", "soft")] == GI
    assert got[("nodefs.available", "hard")] == pytest.approx(10 * GI, rel=1e-6)  # float32 10%, as the kubelet
    assert ("pid.available", "hard") not in got  # a percentage with no observed capacity


# ---- over HTTP ----


async def test_metrics_endpoint_and_request_histogram() -> None:
    metrics = Metrics(Provider())

    class Backend:
        def get_pod(self, ns: str, name: str) -> None:
            return None

        def list_pods(self) -> list[dict[str, Any]]:
            return []

    auth = Authenticator(AuthenticationConfig(tokenFile="/unused"), b"tok", loopback_reads=True)
    app = create_app(Backend(), auth=auth, metrics=metrics)  # type: ignore[arg-type]
    async with TestClient(TestServer(app)) as c:
        for name in ("a", "b", "c"):
            assert (await c.get(f"/api/v1/namespaces/default/pods/{name}")).status == 404
        assert (await c.get("/api/v1/pods")).status == 200
        assert (await c.post("/api/v1/pods", json={})).status == 401  # denied requests are timed too
        assert (await c.get("/no/such/path")).status == 404
        r = await c.get("/metrics")
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain")
        text = await r.text()
    p = samples(text)
    h = "nodeagent_http_request_duration_seconds_count"
    # one series for three pod names: the route's canonical path, never the raw URL
    assert value(p, h, method="GET", route="/api/v1/namespaces/{ns}/pods/{name}", code="404") == 3
    assert value(p, h, method="GET", route="/api/v1/pods", code="200") == 1
    assert value(p, h, method="POST", route="/api/v1/pods", code="401") == 1
    assert value(p, h, method="GET", route="unmatched", code="404") == 1
    assert not any("/pods/a" in dict(labels).get("route", "") for _, labels in p)
    assert value(p, "nodeagent_pods", phase="Running", qos_class="Burstable") == 2
