"""GET /metrics/resource and GET|POST /stats/summary on the agent's application."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from fakes import FakeCgroupDriver
from prometheus_client.parser import text_string_to_metric_families

import nodeagent.agent.api.stats as api_stats
from nodeagent.agent.api.app import create_app
from nodeagent.agent.api.stats import add_stats_routes
from nodeagent.agent.stats.prometheus import resource_metrics
from nodeagent.agent.stats.sampler import Sampler
from nodeagent.agent.stats.targets import ContainerTarget, PodTarget
from nodeagent.agent.stats.values import ContainerStats, CpuStats, FsStats, MemoryStats, NodeStats, PodStats, Snapshot
from nodeagent.core.clock import FakeClock

T = 1_700_000_000.0


class Backend:
    def list_pods(self) -> list[dict[str, Any]]:
        return []


class Fixed:
    def __init__(self, snap: Snapshot | None) -> None:
        self.snap = snap

    def current(self) -> Snapshot | None:
        return self.snap


def snapshot() -> Snapshot:
    app = ContainerStats("app", T - 5, CpuStats(T, 2_000_000_000, 500_000_000), MemoryStats(T, 3000, 2000),
                         logs=FsStats(T, 4096, 1))
    pod = PodStats("default", "web", "uid-1", T - 6, (app,), CpuStats(T, 2_000_000_000, 500_000_000),
                   MemoryStats(T, 3000, 2000))
    node = NodeStats("node-1", T - 100, CpuStats(T, 9_000_000_000, 1_000_000_000), MemoryStats(T, 5000, 4000))
    return Snapshot(time=T, monotonic=1.0, node=node, pods=(pod,))


def client(source: Any) -> TestClient:
    app = create_app(Backend())  # type: ignore[arg-type]
    add_stats_routes(app, source)
    return TestClient(TestServer(app))


async def test_resource_metrics() -> None:
    async with client(Fixed(snapshot())) as c:
        r = await c.get("/metrics/resource")
        assert r.status == 200
        assert r.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        text = await r.text()
    assert 'container_cpu_usage_seconds_total{container="app",namespace="default",pod="web"} 2 1700000000000\n' in text
    assert text.endswith("resource_scrape_error 0\n")
    assert {f.name for f in text_string_to_metric_families(text)} >= {"container_cpu_usage_seconds", "pod_memory_working_set_bytes"}


async def test_resource_metrics_without_a_snapshot_is_a_scrape_error() -> None:
    async with client(Fixed(None)) as c:
        r = await c.get("/metrics/resource")
        assert r.status == 200
        assert (await r.text()).endswith("resource_scrape_error 1\n")


async def test_summary_and_only_cpu_and_memory() -> None:
    async with client(Fixed(snapshot())) as c:
        full = await (await c.get("/stats/summary")).json()
        assert full["node"]["nodeName"] == "node-1"
        assert full["pods"][0]["cpu"]["usageNanoCores"] == 500_000_000
        assert full["pods"][0]["containers"][0]["memory"]["workingSetBytes"] == 2000
        posted = await c.post("/stats/summary")
        assert posted.status == 200 and await posted.json() == full
        # the kubelet's test: exactly one value, exactly "true"
        assert "logs" in full["pods"][0]["containers"][0]
        for query, only in (("true", True), ("True", False), ("1", False), ("false", False),
                            ("true&only_cpu_and_memory=true", False)):
            out = await (await c.get(f"/stats/summary?only_cpu_and_memory={query}")).json()
            assert ("logs" not in out["pods"][0]["containers"][0]) is only, query


async def test_a_snapshot_is_rendered_once_for_many_scrapes(monkeypatch: pytest.MonkeyPatch) -> None:
    source = Fixed(snapshot())
    renders = {"n": 0}

    def counting(snap: Snapshot | None) -> str:
        renders["n"] += 1
        return resource_metrics(snap)

    monkeypatch.setattr(api_stats, "resource_metrics", counting)
    async with client(source) as c:
        bodies = [await (await c.get("/metrics/resource")).text() for _ in range(3)]
        assert renders["n"] == 1 and len(set(bodies)) == 1
        source.snap = snapshot()  # the next pass: a new snapshot
        await c.get("/metrics/resource")
        assert renders["n"] == 2
        r = await c.get("/stats/summary")
        assert r.headers["Content-Type"].startswith("application/json")


async def test_summary_without_a_snapshot_is_503_with_a_status() -> None:
    async with client(Fixed(None)) as c:
        r = await c.get("/stats/summary")
        assert r.status == 503
        body = await r.json()
    assert body["kind"] == "Status" and body["reason"] == "ServiceUnavailable"
    assert "not available yet" in body["message"]


async def test_sampler_to_http(tmp_path: Path) -> None:
    """The sampler over a fake tree, served: two passes, then the rate is in the summary."""
    driver = FakeCgroupDriver(usage_tree=str(tmp_path / "cg"))
    clock = FakeClock()
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "stat").write_text("cpu  10 0 0 100 0 0 0 0 0 0\n")
    (proc / "meminfo").write_text("MemTotal: 1000 kB\nMemFree: 500 kB\n")
    targets = [PodTarget("default", "web", "u1", "kubepods/podu1", (ContainerTarget("app", "kubepods/podu1/app"),))]
    driver.set_usage("kubepods/podu1", cpu_usec=0, memory=4096)
    driver.set_usage("kubepods/podu1/app", cpu_usec=0, memory=4096)
    sampler = Sampler(driver, lambda: targets, clock, node_name="n", nodefs_path=str(tmp_path), proc=str(proc),
                      boot=lambda: 0.0)
    sampler.sample(targets)
    clock.advance(1.0)
    driver.set_usage("kubepods/podu1", cpu_usec=100_000, memory=4096)
    driver.set_usage("kubepods/podu1/app", cpu_usec=100_000, memory=4096)
    sampler.sample(targets)
    async with client(sampler) as c:
        out = await (await c.get("/stats/summary?only_cpu_and_memory=true")).json()
        text = await (await c.get("/metrics/resource")).text()
    sampler.close()
    assert out["pods"][0]["containers"][0]["cpu"]["usageNanoCores"] == 100_000_000
    assert 'pod_cpu_usage_seconds_total{namespace="default",pod="web"} 0.1 ' in text
