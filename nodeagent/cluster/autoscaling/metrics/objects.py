"""metrics.k8s.io/v1beta1 NodeMetrics and PodMetrics, in the shapes metrics-server serves.

`kubectl top nodes` lists /apis/metrics.k8s.io/v1beta1/nodes and reads items[].metadata.name,
.usage.cpu and .usage.memory; `kubectl top pods --containers` lists .../namespaces/<ns>/pods and reads
items[].metadata.{name,namespace} and .containers[].{name,usage}. Each object carries the end of its
measurement interval (`timestamp`) and the interval's length (`window`, a Go duration).

Quantities as metrics-server writes them: CPU in nanocores (resource.NewScaledQuantity(n, -9),
so "250m" or "12345678n" once canonical), memory in bytes with the BinarySI format ("1Gi", or plain
bytes when not a multiple of 1024).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nodeagent.core.duration import format_go_duration
from nodeagent.core.quantity import Quantity
from nodeagent.core.timefmt import rfc3339

API_VERSION = "metrics.k8s.io/v1beta1"


@dataclass(frozen=True, slots=True)
class Usage:
    """Usage of one node, pod or container over a window."""

    cpu_cores: float
    memory_bytes: int


def cpu_quantity(cores: float) -> Quantity:
    """Cores as nanocores, rounded to the nearest nanocore (never negative)."""
    return Quantity(max(0, round(cores * 1_000_000_000)))


def memory_quantity(memory_bytes: int) -> Quantity:
    return Quantity.from_value(max(0, int(memory_bytes)), "BinarySI")


def usage_list(usage: Usage) -> dict[str, str]:
    return {"cpu": str(cpu_quantity(usage.cpu_cores)), "memory": str(memory_quantity(usage.memory_bytes))}


def _metadata(name: str, namespace: str | None, created: float, labels: Mapping[str, str] | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    meta["creationTimestamp"] = rfc3339(created)
    if labels:
        meta["labels"] = dict(labels)
    return meta


def node_metrics(name: str, usage: Usage, timestamp: float, window: float, *, created: float | None = None,
                 labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """One NodeMetrics object; `created` defaults to `timestamp` (metrics-server uses "now")."""
    return {"kind": "NodeMetrics", "apiVersion": API_VERSION,
            "metadata": _metadata(name, None, timestamp if created is None else created, labels),
            "timestamp": rfc3339(timestamp), "window": format_go_duration(window),
            "usage": usage_list(usage)}


def pod_metrics(namespace: str, name: str, containers: Sequence[tuple[str, Usage]], timestamp: float,
                window: float, *, created: float | None = None,
                labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """One PodMetrics object with its containers in the order given."""
    return {"kind": "PodMetrics", "apiVersion": API_VERSION,
            "metadata": _metadata(name, namespace, timestamp if created is None else created, labels),
            "timestamp": rfc3339(timestamp), "window": format_go_duration(window),
            "containers": [{"name": c, "usage": usage_list(u)} for c, u in containers]}


def metrics_list(kind: str, items: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """NodeMetricsList / PodMetricsList around objects built above."""
    if kind not in ("NodeMetrics", "PodMetrics"):
        raise ValueError(f"kind must be NodeMetrics or PodMetrics, got {kind!r}")
    return {"kind": f"{kind}List", "apiVersion": API_VERSION, "metadata": {}, "items": list(items)}
