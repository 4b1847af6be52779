"""The HPA replica calculator, as upstream's pkg/controller/podautoscaler/replica_calculator.go.

Every function takes plain values (the pods, their metrics in milli-units, `now`) and returns the
proposed replica count with the usage it saw, or raises MetricError with upstream's message.

Resource Utilization: utilization = int(100 * SUM(usage) / SUM(requests)) over pods that have both
a metric and a request; ratio = utilization / target. Ready pods only at first; with no missing or
unready pods the answer is ceil(ratio * ready) unless the ratio is within tolerance. Otherwise
missing pods count as max(100%, target) of their request on a scale-down and 0 on a scale-up, and
unready pods as 0 on a scale-up; the ratio is recomputed, and the current count is kept if the new
ratio is within tolerance, flips the direction, or the new count (ceil(new ratio * pods counted))
would move against the direction.

AverageValue on a resource and Pods metrics: the same over plain averages, missing pods counting as
the target on a scale-down. Object and External: Value targets scale the ready pods by the ratio
(or give ceil(ratio) from zero replicas); AverageValue targets give ceil(total / target).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from nodeagent.cluster.autoscaling.hpa.pods import (
    MetricError,
    PodInfo,
    PodMetric,
    calculate_requests,
    group_pods,
)

MAX_INT32 = 2**31 - 1
MIN_INT32 = -(2**31)
MAX_INT64 = 2**63 - 1

DEFAULT_TOLERANCE = 0.1
DEFAULT_CPU_INITIALIZATION_PERIOD = 300.0  # --horizontal-pod-autoscaler-cpu-initialization-period
DEFAULT_INITIAL_READINESS_DELAY = 30.0  # --horizontal-pod-autoscaler-initial-readiness-delay


@dataclass(frozen=True, slots=True)
class Tolerances:
    """No change while 1 - scale_down <= ratio <= 1 + scale_up."""

    scale_down: float = DEFAULT_TOLERANCE
    scale_up: float = DEFAULT_TOLERANCE

    def within(self, ratio: float) -> bool:
        return (1.0 - self.scale_down) <= ratio <= (1.0 + self.scale_up)


@dataclass(frozen=True, slots=True)
class CalculatorConfig:
    cpu_initialization_period: float = DEFAULT_CPU_INITIALIZATION_PERIOD
    delay_of_initial_readiness_status: float = DEFAULT_INITIAL_READINESS_DELAY


@dataclass(frozen=True, slots=True)
class ResourceProposal:
    replicas: int
    utilization: int  # percent of requests
    raw_value: int  # average usage per pod, milli-units
    timestamp: float


@dataclass(frozen=True, slots=True)
class ValueProposal:
    replicas: int
    usage: int  # milli-units: the average (plain metrics) or the value reported
    timestamp: float


def _clamp32(x: float) -> int:
    if x > MAX_INT32:
        return MAX_INT32
    return int(x)


def _timestamp(metrics: Mapping[str, PodMetric]) -> float:
    return next(iter(metrics.values())).timestamp if metrics else 0.0


def utilization_ratio(
    metrics: Mapping[str, PodMetric], requests: Mapping[str, int], target_utilization: int
) -> tuple[float, int, int]:
    """GetResourceUtilizationRatio: (ratio, utilization %, raw average) over pods with a request."""
    metrics_total = requests_total = entries = 0
    for name, metric in metrics.items():
        request = requests.get(name)
        if request is None:
            continue  # a metric for a pod we do not know: extraneous
        metrics_total += metric.value
        requests_total += request
        entries += 1
    if requests_total == 0:
        raise MetricError("no metrics returned matched known pods")
    percentage = (metrics_total * 100) // requests_total  # non-negative: floor == Go's truncation
    utilization = max(MIN_INT32, min(MAX_INT32, percentage))
    return utilization / target_utilization, utilization, metrics_total // entries


def usage_ratio(metrics: Mapping[str, PodMetric], target_usage: int) -> tuple[float, int]:
    """GetMetricUsageRatio: (ratio, average usage) over every metric given."""
    total = sum(m.value for m in metrics.values())
    current = abs(total) // len(metrics)  # Go's integer division truncates toward zero
    current = -current if total < 0 else current
    return current / target_usage, current


def resource_replicas(
    current_replicas: int,
    target_utilization: int,
    resource: str,
    tolerances: Tolerances,
    pods: Sequence[PodInfo],
    metrics: Mapping[str, PodMetric],
    now: float,
    config: CalculatorConfig = CalculatorConfig(),
    container: str = "",
) -> ResourceProposal:
    """GetResourceReplicas: a Utilization target on a resource (pod or one container)."""
    if not metrics:
        raise MetricError(
            f"unable to get metrics for resource {resource}: no metrics returned from resource metrics API"
        )
    if not pods:
        raise MetricError("no pods returned by selector while calculating replica count")
    metrics = dict(metrics)
    timestamp = _timestamp(metrics)
    groups = group_pods(
        pods, metrics, resource, config.cpu_initialization_period, config.delay_of_initial_readiness_status, now
    )
    for name in groups.ignored | groups.unready:
        metrics.pop(name, None)
    if not metrics:
        raise MetricError("did not receive metrics for targeted pods (pods might be unready)")
    requests = calculate_requests(pods, container, resource)
    ratio, utilization, raw = utilization_ratio(metrics, requests, target_utilization)

    scale_up_with_unready = bool(groups.unready) and ratio > 1.0
    if not scale_up_with_unready and not groups.missing:
        if tolerances.within(ratio):
            return ResourceProposal(current_replicas, utilization, raw, timestamp)
        return ResourceProposal(math.ceil(ratio * groups.ready_count), utilization, raw, timestamp)

    if groups.missing:
        if ratio < 1.0:
            fallback = max(100, target_utilization)
            for name in groups.missing:
                metrics[name] = PodMetric(requests[name] * fallback // 100)
        elif ratio > 1.0:
            for name in groups.missing:
                metrics[name] = PodMetric(0)
    if scale_up_with_unready:
        for name in groups.unready:
            metrics[name] = PodMetric(0)

    new_ratio, _, _ = utilization_ratio(metrics, requests, target_utilization)
    if tolerances.within(new_ratio) or (ratio < 1.0 < new_ratio) or (ratio > 1.0 > new_ratio):
        return ResourceProposal(current_replicas, utilization, raw, timestamp)
    new_replicas = math.ceil(new_ratio * len(metrics))
    if (new_ratio < 1.0 and new_replicas > current_replicas) or (new_ratio > 1.0 and new_replicas < current_replicas):
        return ResourceProposal(current_replicas, utilization, raw, timestamp)
    return ResourceProposal(new_replicas, utilization, raw, timestamp)


def plain_metric_replicas(
    current_replicas: int,
    target_usage: int,
    tolerances: Tolerances,
    pods: Sequence[PodInfo],
    metrics: Mapping[str, PodMetric],
    now: float,
    config: CalculatorConfig = CalculatorConfig(),
    resource: str = "",
) -> ValueProposal:
    """calcPlainMetricReplicas: AverageValue on a resource (`resource` set) or a Pods metric."""
    if not pods:
        raise MetricError("no pods returned by selector while calculating replica count")
    metrics = dict(metrics)
    timestamp = _timestamp(metrics)
    groups = group_pods(
        pods, metrics, resource, config.cpu_initialization_period, config.delay_of_initial_readiness_status, now
    )
    for name in groups.ignored | groups.unready:
        metrics.pop(name, None)
    if not metrics:
        raise MetricError("did not receive metrics for targeted pods (pods might be unready)")
    ratio, usage = usage_ratio(metrics, target_usage)

    scale_up_with_unready = bool(groups.unready) and ratio > 1.0
    if not scale_up_with_unready and not groups.missing:
        if tolerances.within(ratio):
            return ValueProposal(current_replicas, usage, timestamp)
        return ValueProposal(math.ceil(ratio * groups.ready_count), usage, timestamp)

    if groups.missing:
        if ratio < 1.0:
            for name in groups.missing:
                metrics[name] = PodMetric(target_usage)
        elif ratio > 1.0:
            for name in groups.missing:
                metrics[name] = PodMetric(0)
    if scale_up_with_unready:
        for name in groups.unready:
            metrics[name] = PodMetric(0)

    new_ratio, _ = usage_ratio(metrics, target_usage)
    if tolerances.within(new_ratio) or (ratio < 1.0 < new_ratio) or (ratio > 1.0 > new_ratio):
        return ValueProposal(current_replicas, usage, timestamp)
    new_replicas = math.ceil(new_ratio * len(metrics))
    if (new_ratio < 1.0 and new_replicas > current_replicas) or (new_ratio > 1.0 and new_replicas < current_replicas):
        return ValueProposal(current_replicas, usage, timestamp)
    return ValueProposal(new_replicas, usage, timestamp)


def raw_resource_replicas(
    current_replicas: int,
    target_usage: int,
    resource: str,
    tolerances: Tolerances,
    pods: Sequence[PodInfo],
    metrics: Mapping[str, PodMetric],
    now: float,
    config: CalculatorConfig = CalculatorConfig(),
) -> ValueProposal:
    """GetRawResourceReplicas: an AverageValue target on a resource."""
    if not metrics:
        raise MetricError(
            f"unable to get metrics for resource {resource}: no metrics returned from resource metrics API"
        )
    return plain_metric_replicas(current_replicas, target_usage, tolerances, pods, metrics, now, config, resource)


def _ready_pods(pods: Sequence[PodInfo]) -> int:
    if not pods:
        raise MetricError(
            "unable to calculate ready pods: no pods returned by selector while calculating replica count"
        )
    return sum(1 for p in pods if p.running_and_ready)


def usage_ratio_replicas(current_replicas: int, ratio: float, tolerances: Tolerances, pods: Sequence[PodInfo]) -> int:
    """getUsageRatioReplicaCount: from zero replicas, ceil(ratio) without tolerance (scale from zero)."""
    if current_replicas != 0:
        if tolerances.within(ratio):
            return current_replicas
        return _clamp32(math.ceil(ratio * _ready_pods(pods)))
    return math.ceil(ratio)


def object_replicas(
    current_replicas: int,
    target_usage: int,
    usage: int,
    tolerances: Tolerances,
    pods: Sequence[PodInfo],
    timestamp: float = 0.0,
) -> ValueProposal:
    """GetObjectMetricReplicas: a Value target on an object's metric."""
    ratio = usage / target_usage
    return ValueProposal(usage_ratio_replicas(current_replicas, ratio, tolerances, pods), usage, timestamp)


def _per_pod(status_replicas: int, target_per_pod: int, usage: int, tolerances: Tolerances) -> tuple[int, int]:
    replicas = status_replicas
    ratio = usage / (target_per_pod * status_replicas) if status_replicas else math.inf
    if not tolerances.within(ratio):
        replicas = _clamp32(math.ceil(usage / target_per_pod))
    if usage >= MAX_INT64:
        return replicas, MAX_INT64
    # Deviation: zero status replicas divide by zero upstream; the total is reported instead.
    per_pod = math.ceil(usage / status_replicas) if status_replicas else usage
    return replicas, per_pod


def object_per_pod_replicas(
    status_replicas: int, target_average: int, usage: int, tolerances: Tolerances, timestamp: float = 0.0
) -> ValueProposal:
    """GetObjectPerPodMetricReplicas: an AverageValue target on an object's metric."""
    replicas, per_pod = _per_pod(status_replicas, target_average, usage, tolerances)
    return ValueProposal(replicas, per_pod, timestamp)


def _sum_capped(values: Sequence[int]) -> int:
    total = 0
    for v in values:
        if v > 0 and total > MAX_INT64 - v:
            return MAX_INT64
        total += v
    return total


def external_replicas(
    current_replicas: int,
    target_usage: int,
    values: Sequence[int],
    tolerances: Tolerances,
    pods: Sequence[PodInfo],
    timestamp: float = 0.0,
) -> ValueProposal:
    """GetExternalMetricReplicas: a Value target on the sum of an external metric's series."""
    usage = _sum_capped(values)
    ratio = usage / target_usage
    return ValueProposal(usage_ratio_replicas(current_replicas, ratio, tolerances, pods), usage, timestamp)


def external_per_pod_replicas(
    status_replicas: int, target_per_pod: int, values: Sequence[int], tolerances: Tolerances, timestamp: float = 0.0
) -> ValueProposal:
    """GetExternalPerPodMetricReplicas: an AverageValue target on an external metric."""
    replicas, per_pod = _per_pod(status_replicas, target_per_pod, _sum_capped(values), tolerances)
    return ValueProposal(replicas, per_pod, timestamp)
