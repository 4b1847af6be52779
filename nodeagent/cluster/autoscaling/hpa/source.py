"""A MetricsReader over the server's sample window (metrics.window.SampleWindow), for one HPA's pods.

What upstream's HPA reads through metrics.k8s.io, read in process from the window the scrape fills
(metrics.scrape.MetricsStore keys its series ("container", namespace, pod, container)): a pod's
value is the sum over its containers of their usage over (now - seconds, now], as metrics-server's
PodMetrics and upstream's getPodMetrics have it, and a pod with a container lacking a rate is
missing (metrics-server leaves such a pod out). CPU in millicores, memory (the working set) in
milli-bytes, as upstream's MilliValue(). `seconds` is the scrape's rate window for upstream's
behaviour, or the fast path's quick and steady windows (hpa.fast).

Custom, object and external metrics are not served (no custom.metrics.k8s.io nor external
metrics API here yet): they fail as upstream's do when those APIs are missing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nodeagent.cluster.autoscaling.hpa.pods import MetricError, PodInfo, PodMetric
from nodeagent.cluster.autoscaling.metrics.window import SampleWindow

NO_RESOURCE_METRICS = "no metrics returned from resource metrics API"
RESOURCES = ("cpu", "memory")


def container_key(namespace: str, pod: str, container: str) -> tuple[str, str, str, str]:
    """The window's key of a container's series (as metrics.scrape.MetricsStore writes it)."""
    return ("container", namespace, pod, container)


class WindowReader:
    """Resource metrics of `pods` (of `namespace`) from `window`, over (now - seconds, now]."""

    def __init__(self, window: SampleWindow | None, namespace: str, pods: Sequence[PodInfo], now: float,
                 seconds: float) -> None:
        self.window, self.namespace, self.pods, self.now, self.seconds = window, namespace, pods, now, seconds

    def _pod_value(self, pod: PodInfo, resource: str, only: str) -> PodMetric | None:
        assert self.window is not None
        names = [c.name for c in pod.containers if not only or c.name == only]
        if not names:
            return None
        total, stamp, span = 0, 0.0, 0.0
        for name in names:
            usage = self.window.usage(container_key(self.namespace, pod.name, name), self.now, self.seconds)
            if usage is None or usage.cpu_cores is None:
                return None  # no rate for a container: the pod is missing
            total += round(usage.cpu_cores * 1000) if resource == "cpu" else usage.memory_bytes * 1000
            stamp, span = max(stamp, usage.timestamp), max(span, usage.window)
        return PodMetric(total, stamp, span)

    def resource_metric(self, resource: str, container: str) -> Mapping[str, PodMetric]:
        if self.window is None or resource not in RESOURCES:
            raise MetricError(NO_RESOURCE_METRICS)
        out = {p.name: m for p in self.pods if (m := self._pod_value(p, resource, container)) is not None}
        if not out:
            raise MetricError(NO_RESOURCE_METRICS)
        return out

    def pods_metric(self, name: str, metric_selector: Mapping[str, Any] | None) -> Mapping[str, PodMetric]:
        raise MetricError(f"unable to fetch metrics from custom metrics API: no custom metrics API serves {name}")

    def object_metric(self, name: str, described_object: Mapping[str, Any],
                      metric_selector: Mapping[str, Any] | None) -> tuple[int, float]:
        raise MetricError(f"unable to fetch metrics from custom metrics API: no custom metrics API serves {name}")

    def external_metric(self, name: str, metric_selector: Mapping[str, Any] | None) -> tuple[list[int], float]:
        raise MetricError(f"unable to fetch metrics from external metrics API: no external metrics API serves {name}")
