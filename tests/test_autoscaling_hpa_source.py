"""hpa.source.WindowReader: metrics-server's PodMetrics from the server's sample window, per pod."""

from __future__ import annotations

import pytest

from nodeagent.cluster.autoscaling.hpa.pods import ContainerInfo, MetricError, PodInfo, PodMetric
from nodeagent.cluster.autoscaling.hpa.source import WindowReader, container_key
from nodeagent.cluster.autoscaling.metrics.window import SampleWindow

T = 1_700_000_000.0
NS = 1_000_000_000


def pod(name: str, *containers: str) -> PodInfo:
    return PodInfo(name, containers=tuple(ContainerInfo(c, {"cpu": 500}) for c in containers))


@pytest.fixture
def window() -> SampleWindow:
    w = SampleWindow(capacity=8, max_gap=20.0)
    for key, cores, mem in ((container_key("d", "a", "app"), 0.2, 100), (container_key("d", "a", "side"), 0.05, 50),
                            (container_key("d", "b", "app"), 0.4, 300)):
        for t in (0.0, 15.0):  # two 15 s scrapes
            w.add(key, T + t, round(cores * t * NS), mem)
    w.add(container_key("d", "c", "app"), T + 15.0, 0, 10)  # a single sample: no rate yet
    return w


def test_pods_sum_their_containers_and_a_container_without_a_rate_drops_its_pod(window: SampleWindow) -> None:
    pods = [pod("a", "app", "side"), pod("b", "app"), pod("c", "app"), pod("gone", "app")]
    reader = WindowReader(window, "d", pods, T + 27.0, 17.0, max_age=17.0)  # a sync 12 s after the scrape
    assert reader.resource_metric("cpu", "") == {"a": PodMetric(250, T + 15.0, 15.0), "b": PodMetric(400, T + 15.0, 15.0)}
    assert reader.resource_metric("memory", "") == {"a": PodMetric(150_000, T + 15.0, 15.0),
                                                    "b": PodMetric(300_000, T + 15.0, 15.0)}
    assert reader.resource_metric("cpu", "side") == {"a": PodMetric(50, T + 15.0, 15.0)}
    stale = WindowReader(window, "d", pods, T + 33.0, 17.0, max_age=17.0)  # 18 s after the last scrape
    with pytest.raises(MetricError, match="no metrics returned from resource metrics API"):
        stale.resource_metric("cpu", "")
    from_now = WindowReader(window, "d", pods, T + 27.0, 17.0)  # the fast path's windows end at now
    with pytest.raises(MetricError):
        from_now.resource_metric("cpu", "")  # (10, 27] holds one sample of each: no rate


def test_no_window_and_other_metric_kinds_fail_as_upstreams_missing_apis() -> None:
    reader = WindowReader(None, "d", [pod("a", "app")], T, 17.0)
    with pytest.raises(MetricError, match="no metrics returned from resource metrics API"):
        reader.resource_metric("cpu", "")
    with pytest.raises(MetricError, match="custom metrics API"):
        reader.pods_metric("rps", None)
    with pytest.raises(MetricError, match="external metrics API"):
        reader.external_metric("queue", None)
