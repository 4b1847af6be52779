"""The pods an HPA scales, as the replica calculator sees them, and upstream's pod grouping.

PodInfo carries what replica_calculator.go reads of a pod: phase, deletion, the Ready condition
(status and lastTransitionTime), status.startTime and the requests of its containers (regular
containers, then restartable init containers: sidecars count) and the pod-level requests
(KEP-2837). `pod_info` builds one from the API's JSON. Requests are integers in milli-units, as
upstream's MilliValue().

`group_pods` is upstream's groupPods: ignored (being deleted or Failed), unready (Pending; and, for
CPU only, a pod without a Ready condition or start time, a pod still in its CPU initialization
period that is unready or whose sample predates readiness plus one metric window, or a pod past it
that is unready and never was ready), missing (no metric), else ready.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nodeagent.core.duration import parse_go_duration
from nodeagent.core.quantity import coerce_quantity
from nodeagent.core.timefmt import parse_rfc3339


class MetricError(Exception):
    """A metric could not be computed; the message is upstream's wording."""


@dataclass(frozen=True, slots=True)
class PodMetric:
    """One pod's value of a metric: milli-units, the end of its window and the window's length."""

    value: int
    timestamp: float = 0.0
    window: float = 0.0


@dataclass(frozen=True, slots=True)
class ContainerInfo:
    name: str
    requests: Mapping[str, int] = field(default_factory=dict)  # resource -> milli-units


@dataclass(frozen=True, slots=True)
class PodInfo:
    name: str
    phase: str = "Running"
    deleting: bool = False
    ready: str | None = "True"  # the Ready condition's status ("True", "False", "Unknown"); None: no condition
    ready_transition: float | None = None  # the Ready condition's lastTransitionTime
    start_time: float | None = None
    containers: tuple[ContainerInfo, ...] = ()
    pod_requests: Mapping[str, int] | None = None  # spec.resources.requests (pod-level resources)

    @property
    def running_and_ready(self) -> bool:
        """podutil.IsPodReady on a Running pod: what getReadyPodsCount counts."""
        return self.phase == "Running" and self.ready == "True"


def _milli_map(raw: object) -> dict[str, int]:
    if not isinstance(raw, Mapping):
        return {}
    out: dict[str, int] = {}
    for name, value in raw.items():
        try:
            out[str(name)] = coerce_quantity(value).milli_value()
        except (TypeError, ValueError):
            continue  # the API validated requests; an unreadable one is not a request
    return out


def _requests(container: object) -> dict[str, int]:
    if not isinstance(container, Mapping):
        return {}
    resources = container.get("resources")
    return _milli_map(resources.get("requests") if isinstance(resources, Mapping) else None)


def pod_info(pod: Mapping[str, Any]) -> PodInfo:
    """A PodInfo from a Pod object (JSON as the API serves it)."""
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), Mapping) else {}
    spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    status = pod.get("status") if isinstance(pod.get("status"), Mapping) else {}
    assert isinstance(meta, Mapping) and isinstance(spec, Mapping) and isinstance(status, Mapping)
    containers = [
        ContainerInfo(str(c.get("name", "")), _requests(c))
        for c in spec.get("containers") or []
        if isinstance(c, Mapping)
    ]
    containers += [
        ContainerInfo(str(c.get("name", "")), _requests(c))
        for c in spec.get("initContainers") or []
        if isinstance(c, Mapping) and c.get("restartPolicy") == "Always"
    ]
    ready = transition = None
    for cond in status.get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == "Ready":
            ready = str(cond.get("status", ""))
            transition = parse_rfc3339(cond.get("lastTransitionTime"))
            break
    pod_level = spec.get("resources")
    pod_requests = _milli_map(pod_level.get("requests")) if isinstance(pod_level, Mapping) else {}
    return PodInfo(
        name=str(meta.get("name", "")),
        phase=str(status.get("phase") or "Pending"),
        deleting=meta.get("deletionTimestamp") is not None,
        ready=ready,
        ready_transition=transition,
        start_time=parse_rfc3339(status.get("startTime")),
        containers=tuple(containers),
        pod_requests=pod_requests or None,
    )


@dataclass(frozen=True, slots=True)
class PodGroups:
    ready_count: int
    unready: frozenset[str]
    missing: frozenset[str]
    ignored: frozenset[str]


def group_pods(
    pods: Sequence[PodInfo],
    metrics: Mapping[str, PodMetric],
    resource: str,
    cpu_initialization_period: float,
    delay_of_initial_readiness_status: float,
    now: float,
) -> PodGroups:
    ready_count = 0
    unready: set[str] = set()
    missing: set[str] = set()
    ignored: set[str] = set()
    for pod in pods:
        if pod.deleting or pod.phase == "Failed":
            ignored.add(pod.name)
            continue
        if pod.phase == "Pending":
            unready.add(pod.name)
            continue
        metric = metrics.get(pod.name)
        if metric is None:
            missing.add(pod.name)
            continue
        if resource == "cpu":
            if pod.ready is None or pod.start_time is None:
                is_unready = True
            else:
                transition = pod.ready_transition if pod.ready_transition is not None else 0.0
                if pod.start_time + cpu_initialization_period > now:
                    # still initializing: the sample must be ready and one window past readiness
                    is_unready = pod.ready == "False" or metric.timestamp < transition + metric.window
                else:
                    # never been ready since it started
                    is_unready = (
                        pod.ready == "False" and pod.start_time + delay_of_initial_readiness_status > transition
                    )
            if is_unready:
                unready.add(pod.name)
                continue
        ready_count += 1
    return PodGroups(ready_count, frozenset(unready), frozenset(missing), frozenset(ignored))


def _container_requests(pod: PodInfo, container: str, resource: str) -> int:
    total = 0
    for c in pod.containers:
        if not container or c.name == container:
            value = c.requests.get(resource)
            if value is None:
                raise MetricError(f"missing request for {resource} in container {c.name} of Pod {pod.name}")
            total += value
        if container and c.name == container:
            return total
    if container:
        raise MetricError(f"container {container} not found in Pod {pod.name}")
    return total


def calculate_requests(pods: Sequence[PodInfo], container: str, resource: str) -> dict[str, int]:
    """Per pod, the request the utilization is a percentage of (upstream's calculateRequests).

    Pod-level requests win when set and no container is targeted. Deviation: upstream's
    PodRequests would, for a resource the pod level does not set, aggregate containers with the
    init-container maximum rule; here the containers (and sidecars) are summed.
    """
    out: dict[str, int] = {}
    for pod in pods:
        if pod.pod_requests and not container:
            if resource in pod.pod_requests:
                out[pod.name] = pod.pod_requests[resource]
                continue
            present = [c.requests[resource] for c in pod.containers if resource in c.requests]
            if not present:
                raise MetricError(f"missing pod-level request for {resource} in Pod {pod.name}")
            out[pod.name] = sum(present)
            continue
        out[pod.name] = _container_requests(pod, container, resource)
    return out


def pod_metrics_for_resource(
    items: Sequence[Mapping[str, Any]], resource: str, container: str = ""
) -> dict[str, PodMetric]:
    """The resource metrics client's view of PodMetrics objects: one value per pod, in milli-units.

    As upstream's getPodMetrics/getContainerMetrics: a pod reports the sum over its containers, and
    is left out (a missing metric) when any container lacks the resource; with `container`, only that
    container counts and a pod without it is left out.
    """
    out: dict[str, PodMetric] = {}
    for item in items:
        meta = item.get("metadata")
        name = meta.get("name") if isinstance(meta, Mapping) else None
        containers = item.get("containers")
        if not isinstance(name, str) or not isinstance(containers, list):
            continue
        total = 0
        complete = True
        found = False
        for c in containers:
            if not isinstance(c, Mapping):
                complete = False
                break
            if container and c.get("name") != container:
                continue
            usage = c.get("usage")
            value = usage.get(resource) if isinstance(usage, Mapping) else None
            if value is None:
                complete = False
                break
            try:
                total += coerce_quantity(value).milli_value()
            except (TypeError, ValueError):
                complete = False
                break
            found = True
        if not complete or (container and not found):
            continue
        timestamp = parse_rfc3339(item.get("timestamp")) or 0.0
        window = item.get("window")
        out[name] = PodMetric(total, timestamp, _window_seconds(window))
    return out


def _window_seconds(window: object) -> float:
    if not isinstance(window, str):
        return 0.0
    try:
        return parse_go_duration(window)
    except ValueError:
        return 0.0
