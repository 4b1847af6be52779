"""Prometheus metrics at GET /metrics: node, pods, eviction state, and API latency.

Scrape-time values come from one `NodeSnapshot` per scrape (a `SnapshotProvider`), so every
family in a scrape describes the same moment and nothing is kept twice. Two histograms are
observed as things happen: eviction reaction time (`observe_eviction_reaction`, called by the
eviction manager) and HTTP request duration (`middleware`, labelled by the route's canonical
path, never the raw URL: pod names in label values would grow the series without bound).

Names: `kubelet_evictions{eviction_signal}` is the kubelet's series, exposed untyped because
prometheus_client would print a counter's TYPE line as `kubelet_evictions_total`, which the
kubelet's dashboards do not query; `nodeagent_evictions_total` is the same number as a counter.
Everything else is `nodeagent_*`. No process-global state. The text is written by
`exposition.py`, not prometheus_client (~1 MiB of the agent's RSS; see there).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog
from aiohttp import web

from nodeagent.agent.api.exposition import CONTENT_TYPE_LATEST, Family, Histogram, counter, gauge, render
from nodeagent.core.wellknown import PRESSURE_CONDITIONS

log = structlog.get_logger(__name__)

CONDITIONS = PRESSURE_CONDITIONS
SIGNAL_UNIT = {
    "memory.available": "bytes", "allocatableMemory.available": "bytes",
    "nodefs.available": "bytes", "imagefs.available": "bytes",
    "nodefs.inodesFree": "inodes", "imagefs.inodesFree": "inodes", "pid.available": "pids",
}
REACTION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
HTTP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
UNMATCHED_ROUTE = "unmatched"


# ---- the snapshot: plain values, filled by the agent ----


@dataclass(frozen=True)
class PodSample:
    namespace: str
    name: str
    phase: str
    qos_class: str
    restarts: Mapping[str, int] = field(default_factory=dict)  # container name -> restartCount


@dataclass(frozen=True)
class SignalSample:
    available: int
    capacity: int


@dataclass(frozen=True)
class ThresholdSample:
    signal: str
    kind: str  # "hard" or "soft"
    value: int  # in the signal's unit (percentages resolved against the observed capacity)


@dataclass(frozen=True)
class NodeSnapshot:
    capacity: Mapping[str, float] = field(default_factory=dict)  # cpu in cores, memory in bytes
    allocatable: Mapping[str, float] = field(default_factory=dict)
    pods: Sequence[PodSample] = ()
    evictions: Mapping[str, int] = field(default_factory=dict)  # signal -> evictions so far
    signals: Mapping[str, SignalSample] = field(default_factory=dict)
    thresholds: Sequence[ThresholdSample] = ()
    conditions: Iterable[str] = ()  # the pressure conditions that are true now
    checkpoint_problems: int = 0  # checkpoints found unreadable (and moved aside) at the last start
    journal_commits: int = 0  # pod records made durable
    journal_batches: int = 0  # ... in this many group commits (fdatasyncs)


class SnapshotProvider(Protocol):
    def metrics_snapshot(self) -> NodeSnapshot:
        """The current state; called on every scrape, from the event loop: no I/O."""
        ...


# ---- helpers that turn the agent's values into a snapshot (pure) ----


def quantity_numbers(quantities: Mapping[str, Any]) -> dict[str, float]:
    """{"cpu": Quantity("1500m"), "memory": Quantity("1Gi")} -> {"cpu": 1.5, "memory": 1073741824}."""
    return {k: (q.milli_value() / 1000 if k == "cpu" else float(q.value())) for k, q in quantities.items()}


def pod_samples(pods: Iterable[Mapping[str, Any]]) -> list[PodSample]:
    """From Kubernetes-shaped Pod dicts (the API's pod list)."""
    out = []
    for p in pods:
        meta, status = p.get("metadata") or {}, p.get("status") or {}
        restarts = {str(c.get("name", "")): int(c.get("restartCount") or 0)
                    for c in status.get("containerStatuses") or ()}
        out.append(PodSample(str(meta.get("namespace", "")), str(meta.get("name", "")),
                             str(status.get("phase") or "Unknown"), str(status.get("qosClass") or ""), restarts))
    return out


def signal_samples(observations: Mapping[str, Any]) -> dict[str, SignalSample]:
    """From eviction Observations (anything with .available and .capacity)."""
    return {s: SignalSample(int(o.available), int(o.capacity)) for s, o in observations.items()}


def threshold_samples(thresholds: Iterable[Any], observations: Mapping[str, Any]) -> list[ThresholdSample]:
    """Absolute threshold values; a percentage without an observed capacity is left out. When a
    signal has several thresholds of one kind, the highest (the first to fire) is kept."""
    best: dict[tuple[str, str], int] = {}
    for t in thresholds:
        obs = observations.get(t.signal)
        if t.quantity is None and obs is None:
            continue
        kind = "hard" if t.grace_period == 0 else "soft"
        value = int(t.value_for(obs.capacity if obs is not None else 0))
        key = (t.signal, kind)
        best[key] = max(value, best.get(key, value))
    return [ThresholdSample(s, k, v) for (s, k), v in sorted(best.items())]


def _unit(resource: str) -> str:
    if resource == "cpu":
        return "core"
    if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
        return "byte"
    return "integer"


# ---- the collector ----


class SnapshotCollector:
    """The scrape-time families, from one snapshot per scrape."""

    def __init__(self, provider: SnapshotProvider) -> None:
        self.provider = provider

    def collect(self) -> Iterator[Family]:
        try:
            snap = self.provider.metrics_snapshot()
        except Exception:
            log.exception("metrics_snapshot_failed")
            failed = gauge("nodeagent_metrics_snapshot_error", "1 if the last scrape's snapshot failed.")
            failed.add_metric([], 1)
            yield failed
            return
        yield from self._node(snap)
        yield from self._pods(snap)
        yield from self._eviction(snap)
        yield from self._checkpoints(snap)

    def _checkpoints(self, snap: NodeSnapshot) -> Iterator[Family]:
        g = gauge("nodeagent_checkpoint_problems",
                  "Pod checkpoints found unreadable at the last start (moved aside, see the node's "
                  "nodeagent.io/checkpoint-problems annotation).")
        g.add_metric([], snap.checkpoint_problems)
        yield g
        yield counter("nodeagent_checkpoint_records", "Pod records made durable.", value=snap.journal_commits)
        yield counter("nodeagent_checkpoint_group_commits",
                      "Group commits (one fdatasync each) that made them durable.", value=snap.journal_batches)

    def _node(self, snap: NodeSnapshot) -> Iterator[Family]:
        for name, values in (("capacity", snap.capacity), ("allocatable", snap.allocatable)):
            g = gauge(f"nodeagent_node_{name}", f"Node {name} by resource (cpu in cores, bytes, counts).",
                      labels=["resource", "unit"])
            for resource, value in sorted(values.items()):
                g.add_metric([resource, _unit(resource)], value)
            yield g
        cond = gauge("nodeagent_node_condition", "Node pressure conditions: 1 for the current status.",
                     labels=["condition", "status"])
        true = set(snap.conditions)
        for c in CONDITIONS:
            cond.add_metric([c, "true"], 1 if c in true else 0)
            cond.add_metric([c, "false"], 0 if c in true else 1)
        yield cond

    def _pods(self, snap: NodeSnapshot) -> Iterator[Family]:
        counts: dict[tuple[str, str], int] = {}
        for p in snap.pods:
            counts[(p.phase, p.qos_class)] = counts.get((p.phase, p.qos_class), 0) + 1
        g = gauge("nodeagent_pods", "Pods on the node by phase and QoS class.", labels=["phase", "qos_class"])
        for (phase, qos), n in sorted(counts.items()):
            g.add_metric([phase, qos], n)
        yield g
        r = counter("nodeagent_container_restarts", "Container restarts (restartCount) per container.",
                    labels=["namespace", "pod", "container"])
        for p in snap.pods:
            for container, n in sorted(p.restarts.items()):
                r.add_metric([p.namespace, p.name, container], n)
        yield r

    def _eviction(self, snap: NodeSnapshot) -> Iterator[Family]:
        kubelet = Family("kubelet_evictions", "Evictions by eviction signal (the kubelet's series).", "unknown")
        total = counter("nodeagent_evictions", "Evictions by eviction signal.", labels=["eviction_signal"])
        for signal, n in sorted(snap.evictions.items()):
            kubelet.add_sample("kubelet_evictions", {"eviction_signal": signal}, n)
            total.add_metric([signal], n)
        yield kubelet
        yield total
        families: dict[str, Family] = {}

        def family(name: str, unit: str, doc: str, labels: list[str]) -> Family:
            full = f"nodeagent_eviction_{name}_{unit}"
            if full not in families:
                families[full] = gauge(full, doc, labels=labels)
            return families[full]

        for signal, s in sorted(snap.signals.items()):
            unit = SIGNAL_UNIT.get(signal, "units")
            family("signal_available", unit, "Last observed available amount per eviction signal.",
                   ["signal"]).add_metric([signal], s.available)
            family("signal_capacity", unit, "Last observed capacity per eviction signal.",
                   ["signal"]).add_metric([signal], s.capacity)
        for t in snap.thresholds:
            family("threshold", SIGNAL_UNIT.get(t.signal, "units"), "Eviction threshold (met below this value).",
                   ["signal", "kind"]).add_metric([t.signal, t.kind], t.value)
        yield from families.values()


# ---- the metrics object: registry, histograms, handler, middleware ----


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Metrics:
    """Owns the collector and the histograms; give `handle` to GET /metrics and `middleware` to the app."""

    def __init__(self, provider: SnapshotProvider | None = None) -> None:
        self.collector = SnapshotCollector(provider) if provider is not None else None
        self.eviction_reaction = Histogram(
            "nodeagent_eviction_reaction_seconds",
            "From the observation that met an eviction threshold to the victims' processes gone.",
            ["signal"], buckets=REACTION_BUCKETS)
        self.http_duration = Histogram(
            "nodeagent_http_request_duration_seconds", "API request duration by method, route and status code.",
            ["method", "route", "code"], buckets=HTTP_BUCKETS)

    def observe_eviction_reaction(self, signal: str, seconds: float) -> None:
        self.eviction_reaction.labels(signal=signal).observe(max(0.0, seconds))

    def families(self) -> Iterator[Family]:
        """The snapshot's families, then the histograms (the order prometheus_client's registry kept)."""
        if self.collector is not None:
            yield from self.collector.collect()
        yield from self.eviction_reaction.families()
        yield from self.http_duration.families()

    def render(self) -> bytes:
        return render(self.families())

    async def handle(self, request: web.Request) -> web.Response:
        body = self.render()  # in-memory values only: cheap enough for the loop
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        start = time.perf_counter()
        code = 500
        try:
            response = await handler(request)
            code = response.status
            return response
        except web.HTTPException as e:
            code = e.status
            raise
        except asyncio.CancelledError:
            code = 499  # the client went away (nginx's convention)
            raise
        finally:
            resource = request.match_info.route.resource
            route = resource.canonical if resource is not None else UNMATCHED_ROUTE
            method = request.method if request.method in _METHODS else "OTHER"
            self.http_duration.labels(method=method, route=route, code=str(code)).observe(
                time.perf_counter() - start)


_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

__all__ = ["Metrics", "NodeSnapshot", "PodSample", "SignalSample", "SnapshotCollector", "SnapshotProvider",
           "ThresholdSample", "pod_samples", "quantity_numbers", "signal_samples", "threshold_samples"]
