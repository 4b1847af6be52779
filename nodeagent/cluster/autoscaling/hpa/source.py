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

Pods metrics (custom.metrics.k8s.io's pods/<metric>) are the agents' per-pod series in the same
window, under prometheus-adapter's names (POD_METRICS: a counter's rate without `_total`, a gauge as
it is); their series carry no labels beyond the pod's own, so a metric selector that needs a label
selects nothing. External metrics are read from `external`, what the loop fetched from Prometheus
for this sync (metrics.external; the loop is async, the reconcile is not). Object metrics are the
same series of one described object: a Pod of the HPA's namespace (POD_METRICS) or a Node
(NODE_METRICS); other kinds fail as upstream's do when the custom metrics API has no such metric.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from nodeagent.cluster.autoscaling.hpa.pods import MetricError, PodInfo, PodMetric
from nodeagent.cluster.autoscaling.metrics.external import ExternalMetricError, Sample, selector_from_dict
from nodeagent.cluster.autoscaling.metrics.window import SampleWindow, WindowUsage

NO_RESOURCE_METRICS = "no metrics returned from resource metrics API"
RESOURCES = ("cpu", "memory")
NO_CUSTOM_METRICS = "no metrics returned from custom metrics API"
NO_EXTERNAL_METRICS = "no metrics returned from external metrics API"
# prometheus-adapter's names of the agents' pod series (/metrics/resource) -> what the window holds
POD_METRICS = {"pod_cpu_usage_seconds": "cpu", "pod_memory_working_set_bytes": "memory"}
NODE_METRICS = {"node_cpu_usage_seconds": "cpu", "node_memory_working_set_bytes": "memory"}
ExternalValues = Mapping[str, "list[Sample] | ExternalMetricError"]  # external_key -> samples or why not


def external_key(name: str, selector: Mapping[str, Any] | None) -> str:
    """The key of one (metric, selector) in the fetched external values."""
    return f"{name}|{selector_from_dict(selector)}"


def container_key(namespace: str, pod: str, container: str) -> tuple[str, str, str, str]:
    """The window's key of a container's series (as metrics.scrape.MetricsStore writes it)."""
    return ("container", namespace, pod, container)


class WindowReader:
    """Resource metrics of `pods` (of `namespace`) from `window`, over (now - seconds, now]."""

    def __init__(self, window: SampleWindow | None, namespace: str, pods: Sequence[PodInfo], now: float,
                 seconds: float, max_age: float = 0.0, external: ExternalValues | None = None) -> None:
        self.window, self.namespace, self.pods, self.now, self.seconds = window, namespace, pods, now, seconds
        self.max_age, self.external = max_age, external

    def _usages(self, keys: Sequence[Hashable]) -> list[WindowUsage | None]:
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

    def series(self, resource: str, keys: Sequence[Hashable]) -> list[PodMetric | None]:
        """`resource` ("cpu": the rate in millicores; "memory": milli-bytes) of each series with a rate."""
        if self.window is None:
            return [None] * len(keys)
        out: list[PodMetric | None] = []
        for usage in self._usages(keys):
            if usage is None or usage.cpu_cores is None:
                out.append(None)
                continue
            value = round(usage.cpu_cores * 1000) if resource == "cpu" else usage.memory_bytes * 1000
            out.append(PodMetric(value, usage.timestamp, usage.window))
        return out

    def pod_series(self, name: str) -> dict[str, PodMetric]:
        """One of POD_METRICS for each pod that has a rate in the window (milli-units)."""
        resource = POD_METRICS.get(name)
        if resource is None:
            return {}
        values = self.series(resource, [("pod", self.namespace, p.name) for p in self.pods])
        return {p.name: v for p, v in zip(self.pods, values, strict=True) if v is not None}

    def pods_metric(self, name: str, metric_selector: Mapping[str, Any] | None) -> Mapping[str, PodMetric]:
        if name not in POD_METRICS:
            raise MetricError(f"unable to fetch metrics from custom metrics API: the server could not find "
                              f"the metric {name} for pods")
        try:
            selector = selector_from_dict(metric_selector)
        except ExternalMetricError as e:
            raise MetricError(f"unable to fetch metrics from custom metrics API: {e}") from e
        out = self.pod_series(name) if selector.matches({}) else {}  # the series have no labels of their own
        if not out:
            raise MetricError(NO_CUSTOM_METRICS)
        return out

    def object_metric(self, name: str, described_object: Mapping[str, Any],
                      metric_selector: Mapping[str, Any] | None) -> tuple[int, float]:
        kind, obj = str(described_object.get("kind") or ""), str(described_object.get("name") or "")
        core = str(described_object.get("apiVersion") or "v1") == "v1"
        names, key = ((POD_METRICS, ("pod", self.namespace, obj)) if kind == "Pod"
                      else (NODE_METRICS, ("node", obj)) if kind == "Node" else ({}, ()))
        resource = names.get(name) if core else None
        try:
            selector = selector_from_dict(metric_selector)
        except ExternalMetricError as e:
            raise MetricError(f"unable to fetch metrics from custom metrics API: {e}") from e
        value = self.series(resource, [key])[0] if resource is not None and selector.matches({}) else None
        if value is None:  # the adapter's NotFound, wrapped as upstream's GetObjectMetric wraps errors
            raise MetricError(f"unable to fetch metrics from custom metrics API: the server could not find "
                              f"the metric {name} for {kind.lower()}s {obj}")
        return value.value, value.timestamp

    def external_metric(self, name: str, metric_selector: Mapping[str, Any] | None) -> tuple[list[int], float]:
        try:
            got = (self.external or {}).get(external_key(name, metric_selector))
        except ExternalMetricError as e:
            got = e
        if got is None:
            raise MetricError(f"unable to fetch metrics from external metrics API: "
                              f"no external metrics API serves {name}")
        if isinstance(got, ExternalMetricError):
            raise MetricError(f"unable to fetch metrics from external metrics API: {got}")
        if not got:
            raise MetricError(NO_EXTERNAL_METRICS)
        return [s.milli_value for s in got], got[0].timestamp
