"""A pod's resources (pure): its summed requests and limits, the cgroup cpu values for
millicores, and the admission fit, where a pod's requests are weighed against the node.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

from nodeagent.core.quantity import Quantity

if TYPE_CHECKING:
    from nodeagent.core.model import Container, Pod

MIN_SHARES = 2
MAX_SHARES = 262144
SHARES_PER_CPU = 1024
MILLI_CPU_TO_CPU = 1000
QUOTA_PERIOD_US = 100000
MIN_QUOTA_PERIOD_US = 1000
MIN_CPU_WEIGHT = 1
MAX_CPU_WEIGHT = 10000


def milli_cpu_to_shares(milli_cpu: int) -> int:
    """cpu.shares for a cpu request in millicores: 0 -> 2, else m*1024//1000 clamped to [2, 262144]."""
    if milli_cpu <= 0:
        return MIN_SHARES
    shares = milli_cpu * SHARES_PER_CPU // MILLI_CPU_TO_CPU
    return max(MIN_SHARES, min(MAX_SHARES, shares))


def milli_cpu_to_quota(milli_cpu: int | None, period_us: int = QUOTA_PERIOD_US) -> int | None:
    """CFS quota in microseconds for a cpu limit; None when there is no limit; at least 1000 us."""
    if milli_cpu is None or milli_cpu <= 0:
        return None
    quota = milli_cpu * period_us // MILLI_CPU_TO_CPU
    return max(MIN_QUOTA_PERIOD_US, quota)


def shares_to_cpu_weight(shares: int) -> int:
    """cgroup v2 cpu.weight from cpu.shares with the quadratic map of runc >= 1.3.2 / crun >= 1.23.

    1024 shares (one CPU of requests) -> 100, the weight of a default systemd service; the kubelet's
    linear map gives 39 there and lets system.slice starve pods under contention.
    """
    if shares <= MIN_SHARES:
        return MIN_CPU_WEIGHT
    if shares >= MAX_SHARES:
        return MAX_CPU_WEIGHT
    log = math.log2(shares)
    exponent = (log * log + 125 * log) / 612.0 - 7.0 / 34.0
    weight = math.ceil(10**exponent)
    return max(MIN_CPU_WEIGHT, min(MAX_CPU_WEIGHT, weight))


# ---- requests, limits and admission fit (kubelet lifecycle predicate / scheduler noderesources.Fits)

OUT_OF_PREFIX = "OutOf"
_FIRST_CHECKED = ("cpu", "memory", "ephemeral-storage")


@dataclass(frozen=True)
class FitResult:
    """Admission verdict: `reason` is the kubelet's (OutOfcpu, OutOfpods, ...), None when ok."""

    ok: bool
    reason: str | None = None
    message: str = ""


def _sum_per_resource(lists: Iterable[Mapping[str, Quantity]]) -> dict[str, Quantity]:
    total: dict[str, Quantity] = {}
    for items in lists:
        for name, q in items.items():
            total[name] = total[name] + q if name in total else q
    return total


def _with_init_containers(pod: Pod, of: str) -> dict[str, Quantity]:
    return combine_containers(pod, lambda c: getattr(c.resources, of))


def combine_containers(pod: Pod, amounts_of: Callable[[Container], Mapping[str, Quantity]]) -> dict[str, Quantity]:
    """resourcehelper.PodRequests / PodLimits over what `amounts_of` says each container needs: the
    app containers and the sidecars run together; each regular init container runs alone beside
    the sidecars started before it; the pod needs the larger of the two, per resource."""
    total = _sum_per_resource(amounts_of(c) for c in pod.spec.containers)
    sidecars: dict[str, Quantity] = {}
    peak: dict[str, Quantity] = {}
    for c in pod.spec.init_containers:
        amounts: Mapping[str, Quantity] = amounts_of(c)
        if c.is_sidecar:
            total = _sum_per_resource([total, amounts])
            sidecars = _sum_per_resource([sidecars, amounts])
            running = sidecars
        else:
            running = _sum_per_resource([amounts, sidecars])
        for name, q in running.items():
            if name not in peak or q > peak[name]:
                peak[name] = q
    for name, q in peak.items():
        if name not in total or q > total[name]:
            total[name] = q
    return total


def pod_requests(pod: Pod) -> dict[str, Quantity]:
    """The pod's requests per resource (after defaulting, so limits count too): the containers'
    sum, or more when an init container (with the sidecars before it) asks for more."""
    return _with_init_containers(pod, "requests")


def pod_limits(pod: Pod) -> dict[str, Quantity]:
    """The pod's limits per resource, computed as pod_requests (a resource only some containers
    limit is still summed; callers deciding pod-level cgroup limits must check every container
    has one)."""
    return _with_init_containers(pod, "limits")


@dataclass(frozen=True)
class PodResources:
    """A pod's effective requests and limits, summed over its containers once (what admission,
    the QoS tiers' weights and the pod cgroup's values read)."""

    requests: Mapping[str, Quantity]
    limits: Mapping[str, Quantity]
    limited_everywhere: frozenset[str]  # resources every container declares a non-zero limit for

    @property
    def cpu_request_milli(self) -> int:
        cpu = self.requests.get("cpu")
        return cpu.milli_value() if cpu is not None else 0


def pod_resources(pod: Pod) -> PodResources:
    containers = pod.spec.containers
    limited = {name for c in containers for name in c.resources.limits}
    everywhere = frozenset(
        name for name in limited
        if all((q := c.resources.limits.get(name)) is not None and not q.is_zero() for c in containers)
    )
    return PodResources(MappingProxyType(pod_requests(pod)), MappingProxyType(pod_limits(pod)), everywhere)


def _amount(name: str, q: Quantity) -> int:
    """The integers the kubelet's messages use: millicores for cpu, whole units otherwise."""
    return q.milli_value() if name == "cpu" else q.value()


def fits(
    pod: Pod, allocatable: dict[str, Quantity], admitted: Iterable[Pod], max_pods: int,
    *, requests_of: Callable[[Pod], Mapping[str, Quantity]] | None = None,
) -> FitResult:
    """Whether `pod` fits next to `admitted` pods: pod count first, then cpu, memory,
    ephemeral-storage and the other resources by name; the first shortfall is reported as the
    kubelet does ("OutOfmemory", "Node didn't have enough resource: memory, requested: ...").

    Zero requests always fit. A resource the pod requests but the node does not have fails as
    OutOf<name>; unlike the kubelet we do not drop unknown extended resources from the check,
    since here no cluster-level component can satisfy them. A pod already in `admitted` (same uid)
    is not counted twice. `requests_of` may return each pod's `pod_requests` summed once before
(the caller's, for `pod` too).
    """
    requests_of = requests_of or pod_requests
    others = [p for p in admitted if p.metadata.uid != pod.metadata.uid]
    if len(others) + 1 > max_pods:
        return _insufficient("pods", 1, len(others), max_pods)
    requested = requests_of(pod)
    used = _sum_per_resource(requests_of(p) for p in others)
    zero = Quantity.from_value(0)
    rest = sorted(n for n in requested if n not in _FIRST_CHECKED)
    for name in [*(n for n in _FIRST_CHECKED if n in requested), *rest]:
        want = requested[name]
        if want.sign() <= 0:
            continue
        capacity = allocatable.get(name, zero)
        in_use = used.get(name, zero)
        if want > capacity - in_use:
            return _insufficient(
                name, _amount(name, want), _amount(name, in_use), _amount(name, capacity)
            )
    return FitResult(ok=True)


def _insufficient(name: str, requested: int, used: int, capacity: int) -> FitResult:
    return FitResult(
        ok=False,
        reason=f"{OUT_OF_PREFIX}{name}",
        message=(
            f"Node didn't have enough resource: {name}, requested: {requested}, "
            f"used: {used}, capacity: {capacity}"
        ),
    )
