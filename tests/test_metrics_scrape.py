"""The server's scrape of /metrics/resource (cluster/autoscaling/metrics/scrape.py): the agent's own
text (agent/stats/prometheus.py) parsed back, rates and points from two scrapes, the node URL rule,
failures keeping the last good point, and the metrics-server formatting of the served objects."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from nodeagent.agent.stats.prometheus import resource_metrics
from nodeagent.agent.stats.values import ContainerStats, CpuStats, MemoryStats, NodeStats, PodStats, Snapshot
from nodeagent.cluster.autoscaling.metrics.objects import Usage, node_metrics, pod_metrics
from nodeagent.cluster.autoscaling.metrics.scrape import (
    MetricsStore,
    ParseError,
    ScrapeFailed,
    Scraper,
    agent_url,
    parse_resource_metrics,
)
from nodeagent.core.clock import FakeClock

T0 = 1_700_000_000.0
GiB = 1024**3


def snapshot(t: float, node_cpu_s: float, burn_cpu_s: float, *, mem: int = 100 * 1024 * 1024,
             start: float = T0 - 100, pods: bool = True) -> Snapshot:
    """What an agent samples at `t`: a node, and a pod `burn` whose container `c` used `burn_cpu_s`."""
    ns = int(burn_cpu_s * 1e9)
    container = ContainerStats("c", start, CpuStats(t, ns), MemoryStats(t, mem + 4096, mem))
    pod = PodStats("default", "burn", "uid-1", start, (container,), CpuStats(t, ns + 1000),
                   MemoryStats(t, mem + 8192, mem + 4096))
    node = NodeStats("n1", T0 - 1000, CpuStats(t, int(node_cpu_s * 1e9)), MemoryStats(t, 2 * GiB, GiB))
    return Snapshot(time=t, monotonic=t - T0, node=node, pods=(pod,) if pods else ())


def test_the_agents_own_text_parses_back() -> None:
    text = resource_metrics(snapshot(T0, 500.25, 12.5))
    scrape = parse_resource_metrics(text, default_time=0.0)
    assert not scrape.scrape_error
    assert scrape.node is not None and scrape.node.cpu_ns == 500_250_000_000 and scrape.node.memory_bytes == GiB
    assert scrape.node.timestamp == pytest.approx(T0, abs=0.001)  # milliseconds in the text
    assert scrape.containers[("default", "burn", "c")].cpu_ns == 12_500_000_000
    assert scrape.containers[("default", "burn", "c")].start_time == T0 - 100
    assert scrape.pods[("default", "burn")].memory_bytes == 100 * 1024 * 1024 + 4096


def test_an_agent_error_and_escaped_labels() -> None:
    assert parse_resource_metrics(resource_metrics(None), 0.0).scrape_error
    text = ('container_cpu_usage_seconds_total{container="a\\"b",namespace="n\\\\s",pod="p"} 1.5 1000\n'
            'container_memory_working_set_bytes{container="a\\"b",namespace="n\\\\s",pod="p"} 4096 1000\n')
    scrape = parse_resource_metrics(text, 0.0)
    assert scrape.containers == {("n\\s", "p", 'a"b'): scrape.containers[("n\\s", "p", 'a"b')]}
    assert scrape.containers[("n\\s", "p", 'a"b')].cpu_ns == 1_500_000_000
    with pytest.raises(ParseError, match="line 1"):
        parse_resource_metrics("this is not prometheus\n", 0.0)


def test_two_scrapes_give_the_rate_and_the_latest_working_set() -> None:
    store = MetricsStore(resolution=15.0)
    store.record("n1", parse_resource_metrics(resource_metrics(snapshot(T0, 100.0, 10.0)), 0.0))
    assert store.nodes == {} and store.pods == {}  # one sample: no rate yet (metrics-server serves nothing)
    store.record("n1", parse_resource_metrics(resource_metrics(snapshot(T0 + 15, 106.0, 13.0, mem=200 * 2**20)),
                                              0.0))
    node = store.nodes["n1"]
    assert node.cpu_cores == pytest.approx(0.4) and node.memory_bytes == GiB
    assert node.timestamp == pytest.approx(T0 + 15, abs=0.001) and node.window == pytest.approx(15, abs=0.01)
    pod = store.pods[("default", "burn")]
    assert pod.node == "n1" and [c for c, _ in pod.containers] == ["c"]
    assert pod.containers[0][1].cpu_cores == pytest.approx(0.2)
    assert pod.containers[0][1].memory_bytes == 200 * 2**20


def test_a_restart_a_gone_pod_and_a_gone_node() -> None:
    store = MetricsStore(resolution=1.0)
    for i in range(2):
        store.record("n1", parse_resource_metrics(resource_metrics(snapshot(T0 + i, 100.0 + i, 10.0 + i)), 0.0))
    assert ("default", "burn") in store.pods
    # restarted: a new start time and a counter from zero: no rate across it, the old point stays out
    store.record("n1", parse_resource_metrics(resource_metrics(snapshot(T0 + 2, 102.0, 0.1, start=T0 + 1.5)), 0.0))
    assert store.pods[("default", "burn")].containers[0][1].cpu_cores == pytest.approx(1.0)  # the earlier pair
    store.record("n1", parse_resource_metrics(resource_metrics(snapshot(T0 + 3, 103.0, 0.6, start=T0 + 1.5)), 0.0))
    assert store.pods[("default", "burn")].containers[0][1].cpu_cores == pytest.approx(0.5, rel=0.01)
    # the agent stops reporting the pod: its point and its series go
    store.record("n1", parse_resource_metrics(resource_metrics(snapshot(T0 + 4, 104.0, 0.0, pods=False)), 0.0))
    assert store.pods == {} and ("container", "default", "burn", "c") not in store.window
    store.forget_node("n1")
    assert store.nodes == {} and len(store.window) == 0


def ready_node(name: str, url: str | None = None, *, ready: str = "True", port: int = 10250,
               address: str = "10.0.0.7") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if url:
        meta["annotations"] = {"nodeagent.io/api-url": url}
    return {"metadata": meta, "status": {"conditions": [{"type": "Ready", "status": ready}],
                                         "addresses": [{"type": "Hostname", "address": name},
                                                       {"type": "InternalIP", "address": address}],
                                         "daemonEndpoints": {"kubeletEndpoint": {"Port": port}}}}


@pytest.mark.parametrize(("node", "url"), [
    (ready_node("a", "http://127.0.0.1:8080/"), "http://127.0.0.1:8080"),
    (ready_node("a"), "https://10.0.0.7:10250"),
    (ready_node("a", address="fd00::7"), "https://[fd00::7]:10250"),
    (ready_node("a", port=0), None),
    ({"metadata": {"name": "a"}, "status": {}}, None),
])
def test_agent_url(node: Mapping[str, Any], url: str | None) -> None:
    assert agent_url(node) == url


async def test_the_loop_scrapes_ready_nodes_and_keeps_the_last_good_point() -> None:
    clock = FakeClock()
    t = {"now": T0}
    bodies = {"http://a:1": lambda: resource_metrics(snapshot(t["now"], t["now"] - T0, (t["now"] - T0) / 4)),
              "http://b:1": lambda: resource_metrics(snapshot(t["now"], t["now"] - T0, 0.0))}
    broken: set[str] = set()
    asked: list[str] = []

    async def fetch(url: str) -> str:
        asked.append(url)
        if url in broken:
            raise ScrapeFailed("HTTP 401")
        if url == "http://slow:1":
            await asyncio.sleep(5)
        return bodies[url]()

    nodes = [ready_node("a", "http://a:1"), ready_node("b", "http://b:1"), ready_node("c", "http://c:1", ready="False"),
             ready_node("slow", "http://slow:1")]

    async def list_nodes() -> list[dict[str, Any]]:
        return nodes

    store = MetricsStore(resolution=1.0)
    scraper = Scraper(list_nodes, fetch, store, timeout=0.05, clock=clock)
    assert await scraper.scrape_once() == 2
    assert "http://c:1" not in asked and "slow" in scraper.failures
    t["now"] += 1
    await scraper.scrape_once()
    assert store.nodes["a"].cpu_cores == pytest.approx(1.0) and store.pods[("default", "burn")].node in ("a", "b")
    good = store.nodes["a"]
    broken.add("http://a:1")
    t["now"] += 1
    assert await scraper.scrape_once() == 1
    assert store.nodes["a"] == good and "401" in scraper.failures["a"]  # the last good point stays
    nodes.pop(0)  # node a deleted: its points go
    await scraper.scrape_once()
    assert "a" not in store.nodes and "a" not in scraper.failures


def test_objects_are_formatted_as_metrics_server_does() -> None:
    node = node_metrics("n1", Usage(0.2000001, 1536 * 1024 * 1024 + 4096), T0, 15.0, created=T0 + 1)
    assert node["usage"] == {"cpu": "200000100n", "memory": "1572868Ki"}
    assert node["window"] == "15s" and node["timestamp"] == "2023-11-14T22:13:20Z"
    pod = pod_metrics("default", "burn", [("c", Usage(0.25, 4096))], T0, 1.5)
    assert pod["containers"] == [{"name": "c", "usage": {"cpu": "250m", "memory": "4Ki"}}]
    assert pod["window"] == "1.5s" and pod["metadata"]["namespace"] == "default"
