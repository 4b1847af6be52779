"""A MetricsReader over the server's sample window (metrics.window.SampleWindow), for one HPA's pods.

What upstream's HPA reads through metrics.k8s.io, read in process from the window the scrape fills
(metrics.scrape.MetricsStore keys its series ("container", namespace, pod, container)): a pod's
value is the sum over its containers of their usage over (now - seconds, now], as metrics-server's
PodMetrics and upstream's getPodMetrics have it, and a pod with a container lacking a rate is
missing (metrics-server leaves such a pod out). CPU in millicores, memory (the working set) in
milli-bytes, as upstream's MilliValue(). `seconds` is the fast path's quick and steady windows
(hpa.fast), read back from `now`; or, with `max_age`, the scrape's rate window read back from each
series' latest sample no older than `max_age`: metrics-server's last point (the rate between its
last two scrapes), whenever between two scrapes the HPA syncs.

Custom, object and external metrics are not served (no custom.metrics.k8s.io nor external
metrics API here yet): they fail as upstream's do when those APIs are missing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nodeagent.cluster.autoscaling.hpa.pods import MetricError, PodInfo, PodMetric
from nodeagent.cluster.autoscaling.metrics.window import SampleWindow, WindowUsage

NO_RESOURCE_METRICS = "no metrics returned from resource metrics API"
RESOURCES = ("cpu", "memory")


def container_key(namespace: str, pod: str, container: str) -> tuple[str, str, str, str]:
    """The window's key of a container's series (as metrics.scrape.MetricsStore writes it)."""
    return ("container", namespace, pod, container)


class WindowReader:
    """Resource metrics of `pods` (of `namespace`) from `window`, over (now - seconds, now]."""

    def __init__(self, window: SampleWindow | None, namespace: str, pods: Sequence[PodInfo], now: float,
                 seconds: float, max_age: float = 0.0) -> None:
        self.window, self.namespace, self.pods, self.now, self.seconds = window, namespace, pods, now, seconds
        self.max_age = max_age

    def _usages(self, keys: list[tuple[str, str, str, str]]) -> list[WindowUsage | None]:
        """Every series' usage in a few vectorised passes (one per distinct latest-sample time)."""
        assert self.window is not None
        if self.max_age <= 0:
            return self.window.usage_many(keys, self.now, self.seconds)
        latest = self.window.usage_many(keys, self.now, self.max_age)
        by_anchor: dict[float, list[int]] = {}
        for i, u in enumerate(latest):
            if u is not None:
                by_anchor.setdefault(u.timestamp, []).append(i)
        out: list[WindowUsage | None] = [None] * len(keys)
        for anchor, indexes in by_anchor.items():
            for i, u in zip(indexes, self.window.usage_many([keys[i] for i in indexes], anchor, self.seconds),
                            strict=True):
                out[i] = u
        return out

    def _values(self, resource: str, only: str) -> dict[str, PodMetric]:
        """metrics-server's per-pod sums: a pod with a container lacking a rate is left out."""
        per_pod = [(p.name, [c.name for c in p.containers if not only or c.name == only]) for p in self.pods]
        keys = [container_key(self.namespace, pod, c) for pod, names in per_pod for c in names]
        usages = iter(self._usages(keys))
        out: dict[str, PodMetric] = {}
        for pod, names in per_pod:
            total, stamp, span, complete = 0, 0.0, 0.0, bool(names)
            for _ in names:
                usage = next(usages)
                if usage is None or usage.cpu_cores is None:
                    complete = False
                    continue
                total += round(usage.cpu_cores * 1000) if resource == "cpu" else usage.memory_bytes * 1000
                stamp, span = max(stamp, usage.timestamp), max(span, usage.window)
            if complete:
                out[pod] = PodMetric(total, stamp, span)
        return out

    def resource_metric(self, resource: str, container: str) -> Mapping[str, PodMetric]:
        if self.window is None or resource not in RESOURCES:
            raise MetricError(NO_RESOURCE_METRICS)
        out = self._values(resource, container)
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
