"""/metrics/resource text against the kubelet's: the cases of upstream's resource_metrics_test.go
(pkg/kubelet/metrics/collectors), written out in the order the Go client prints them."""

from __future__ import annotations

import textwrap

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nodeagent.agent.stats.prometheus import go_float, resource_metrics
from nodeagent.agent.stats.values import ContainerStats, CpuStats, MemoryStats, NodeStats, PodStats, Snapshot

STATIC_NS = 1624396278302091597  # upstream's static timestamp: 2021-06-23 05:11:18.302091597 +0800
T = STATIC_NS / 1e9
MIN = 60


def snap(node: NodeStats | None = None, pods: tuple[PodStats, ...] = ()) -> Snapshot:
    return Snapshot(time=T, monotonic=100.0, node=node or NodeStats("n", None), pods=pods)


def container(name: str, start_offset_s: int, cpu: bool = True, memory: bool = True) -> ContainerStats:
    # upstream builds start times as staticTimestamp.Add(-d): exact nanoseconds, then /1e9 as a float64
    return ContainerStats(name, (STATIC_NS - start_offset_s * 1_000_000_000) / 1e9,
                          CpuStats(T, 10_000_000_000) if cpu else None,
                          MemoryStats(T, 2000, 1000) if memory else None)


def text(s: str) -> str:
    return textwrap.dedent(s).lstrip("\n")


ERROR_ONLY = text("""
    # HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise
    # TYPE resource_scrape_error gauge
    resource_scrape_error 1
    """)
NO_ERROR = text("""
    # HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise
    # TYPE resource_scrape_error gauge
    resource_scrape_error 0
    """)


def test_error_getting_summary() -> None:
    assert resource_metrics(None) == ERROR_ONLY


def test_arbitrary_node_metrics() -> None:
    node = NodeStats("n", None, CpuStats(T, 10_000_000_000), MemoryStats(T, 2000, 1000))
    assert resource_metrics(snap(node)) == text("""
        # HELP node_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the node in core-seconds
        # TYPE node_cpu_usage_seconds_total counter
        node_cpu_usage_seconds_total 10 1624396278302
        # HELP node_memory_working_set_bytes [STABLE] Current working set of the node in bytes
        # TYPE node_memory_working_set_bytes gauge
        node_memory_working_set_bytes 1000 1624396278302
        """) + NO_ERROR


def test_node_metrics_with_different_timestamps() -> None:
    node = NodeStats("n", None, CpuStats(T, 10_000_000_000), MemoryStats(T + 10, 2000, 1000))
    out = resource_metrics(snap(node))
    assert "node_cpu_usage_seconds_total 10 1624396278302\n" in out
    assert "node_memory_working_set_bytes 1000 1624396288302\n" in out


def test_nil_node_metrics() -> None:
    assert resource_metrics(snap(NodeStats("n", None))) == NO_ERROR


def test_arbitrary_container_metrics_for_different_containers_pods_and_namespaces() -> None:
    pods = (
        PodStats("namespace_a", "pod_a", "uid-a", None, (container("container_a", 30), container("container_b", 2 * MIN))),
        PodStats("namespace_b", "pod_b", "uid-b", None, (container("container_a", 10 * MIN),)),
    )
    assert resource_metrics(snap(pods=pods)) == text("""
        # HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds
        # TYPE container_cpu_usage_seconds_total counter
        container_cpu_usage_seconds_total{container="container_a",namespace="namespace_a",pod="pod_a"} 10 1624396278302
        container_cpu_usage_seconds_total{container="container_a",namespace="namespace_b",pod="pod_b"} 10 1624396278302
        container_cpu_usage_seconds_total{container="container_b",namespace="namespace_a",pod="pod_a"} 10 1624396278302
        # HELP container_memory_working_set_bytes [STABLE] Current working set of the container in bytes
        # TYPE container_memory_working_set_bytes gauge
        container_memory_working_set_bytes{container="container_a",namespace="namespace_a",pod="pod_a"} 1000 1624396278302
        container_memory_working_set_bytes{container="container_a",namespace="namespace_b",pod="pod_b"} 1000 1624396278302
        container_memory_working_set_bytes{container="container_b",namespace="namespace_a",pod="pod_a"} 1000 1624396278302
        # HELP container_start_time_seconds [STABLE] Start time of the container since unix epoch in seconds
        # TYPE container_start_time_seconds gauge
        container_start_time_seconds{container="container_a",namespace="namespace_a",pod="pod_a"} 1.6243962483020916e+09
        container_start_time_seconds{container="container_a",namespace="namespace_b",pod="pod_b"} 1.6243956783020916e+09
        container_start_time_seconds{container="container_b",namespace="namespace_a",pod="pod_a"} 1.6243961583020916e+09
        """) + NO_ERROR


def test_container_without_a_start_time_has_no_start_series() -> None:
    """Upstream's "negative StartTime" case: StartTime.Unix() <= 0 is left out (here: never started)."""
    c = ContainerStats("container_a", None, CpuStats(T, 10_000_000_000), MemoryStats(T, 2000, 1000))
    out = resource_metrics(snap(pods=(PodStats("namespace_a", "pod_a", "u", None, (c,)),)))
    assert "container_start_time_seconds" not in out
    assert 'container_cpu_usage_seconds_total{container="container_a",namespace="namespace_a",pod="pod_a"} 10 ' in out
    negative = ContainerStats("container_a", -STATIC_NS / 1e9)
    assert "container_start_time_seconds" not in resource_metrics(
        snap(pods=(PodStats("namespace_a", "pod_a", "u", None, (negative,)),)))


def test_nil_container_metrics() -> None:
    pods = (
        PodStats("namespace_a", "pod_a", "u", None, (container("container_a", 30, cpu=False, memory=False),)),
        PodStats("namespace_b", "pod_b", "u", None, (container("container_a", 10 * MIN),)),
    )
    assert resource_metrics(snap(pods=pods)) == text("""
        # HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds
        # TYPE container_cpu_usage_seconds_total counter
        container_cpu_usage_seconds_total{container="container_a",namespace="namespace_b",pod="pod_b"} 10 1624396278302
        # HELP container_memory_working_set_bytes [STABLE] Current working set of the container in bytes
        # TYPE container_memory_working_set_bytes gauge
        container_memory_working_set_bytes{container="container_a",namespace="namespace_b",pod="pod_b"} 1000 1624396278302
        # HELP container_start_time_seconds [STABLE] Start time of the container since unix epoch in seconds
        # TYPE container_start_time_seconds gauge
        container_start_time_seconds{container="container_a",namespace="namespace_a",pod="pod_a"} 1.6243962483020916e+09
        container_start_time_seconds{container="container_a",namespace="namespace_b",pod="pod_b"} 1.6243956783020916e+09
        """) + NO_ERROR


def test_arbitrary_pod_metrics() -> None:
    pod = PodStats("namespace_a", "pod_a", "u", None, (), CpuStats(T, 10_000_000_000), MemoryStats(T, 2000, 1000))
    assert resource_metrics(snap(pods=(pod,))) == text("""
        # HELP pod_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the pod in core-seconds
        # TYPE pod_cpu_usage_seconds_total counter
        pod_cpu_usage_seconds_total{namespace="namespace_a",pod="pod_a"} 10 1624396278302
        # HELP pod_memory_working_set_bytes [STABLE] Current working set of the pod in bytes
        # TYPE pod_memory_working_set_bytes gauge
        pod_memory_working_set_bytes{namespace="namespace_a",pod="pod_a"} 1000 1624396278302
        """) + NO_ERROR


def test_nil_pod_metrics() -> None:
    assert resource_metrics(snap(pods=(PodStats("namespace_a", "pod_a", "u", None),))) == NO_ERROR


def test_everything_together_parses_back() -> None:
    """Families in name order, each series once, labels and millisecond timestamps as written."""
    node = NodeStats("n", None, CpuStats(T, 12_345_678_901), MemoryStats(T, 3 << 30, 123_456_789))
    pods = (PodStats("ns", "web", "u", None, (container("app", 5),), CpuStats(T + 0.5, 1_500_000_000),
                     MemoryStats(T + 0.5, 1, 2 << 20)),)
    out = resource_metrics(snap(node, pods))
    assert "node_memory_working_set_bytes 1.23456789e+08 1624396278302\n" in out
    assert "node_cpu_usage_seconds_total 12.345678901 1624396278302\n" in out
    assert 'pod_cpu_usage_seconds_total{namespace="ns",pod="web"} 1.5 1624396278802\n' in out
    assert 'pod_memory_working_set_bytes{namespace="ns",pod="web"} 2.097152e+06 1624396278802\n' in out
    names = [line.split()[2] for line in out.splitlines() if line.startswith("# TYPE")]
    assert names == sorted(names) == [
        "container_cpu_usage_seconds_total", "container_memory_working_set_bytes", "container_start_time_seconds",
        "node_cpu_usage_seconds_total", "node_memory_working_set_bytes", "pod_cpu_usage_seconds_total",
        "pod_memory_working_set_bytes", "resource_scrape_error"]
    samples = {(s.name, tuple(sorted(s.labels.items()))): (s.value, s.timestamp)
               for f in text_string_to_metric_families(out) for s in f.samples}
    assert samples[("container_cpu_usage_seconds_total", (("container", "app"), ("namespace", "ns"), ("pod", "web")))] \
        == (10.0, pytest.approx(1624396278.302))
    assert samples[("resource_scrape_error", ())] == (0.0, None)


def test_label_values_are_escaped() -> None:
    pod = PodStats('we"ird\\ns', "p\nq", "u", None, (), CpuStats(T, 0))
    out = resource_metrics(snap(pods=(pod,)))
    assert 'pod_cpu_usage_seconds_total{namespace="we\\"ird\\\\ns",pod="p\\nq"} 0 1624396278302\n' in out


@pytest.mark.parametrize("value, expected", [
    # strconv.FormatFloat(v, 'g', -1, 64), which Go's text writer uses
    (10.0, "10"), (1.0, "1"), (0.0, "0"), (-0.0, "0"), (-3.0, "-3"), (0.5, "0.5"), (1000.0, "1000"),
    (999999.0, "999999"), (1e6, "1e+06"), (123456789.0, "1.23456789e+08"), (123456.7, "123456.7"),
    (0.0001, "0.0001"), (0.00001, "1e-05"), (2.5e-05, "2.5e-05"), (1e21, "1e+21"), (1.5e300, "1.5e+300"),
    (0.1 + 0.2, "0.30000000000000004"), (1624396248302091597 / 1e9, "1.6243962483020916e+09"),
    (float("nan"), "NaN"), (float("inf"), "+Inf"), (float("-inf"), "-Inf"),
])
def test_go_float(value: float, expected: str) -> None:
    assert go_float(value) == expected
