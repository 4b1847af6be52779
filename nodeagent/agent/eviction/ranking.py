"""Which pods to evict, in what order, how many, with what message and grace period (pure).

Ranking follows the kubelet's rank functions (pkg/kubelet/eviction/helpers.go):
- memory (rankMemoryPressure): pods whose working set exceeds their memory request first, then
  lower priority first, then larger (working set - request) first;
- disk (rankDiskPressureFunc): the same with the disk resource's usage; for ephemeral-storage the
  request is the pod's ephemeral-storage request. For inodes the kubelet compares usage with an
  "inodes" request (never set, so any pod using inodes exceeds it) and then orders by
  (inodes - ephemeral-storage request); we keep that quirk so the order matches the kubelet;
- pids (rankPIDPressure): lower priority first, then more processes first;
- a pod with no usage stats ranks before every pod that has them (the kubelet's "prioritize
  evicting the pod for which no stats were found"), ordered among its kind by priority.
The kubelet sorts with Go's unstable sort; ours is stable (ties keep the input order).
Critical pods (static, mirror, or priority >= 2000000000) are never evicted, so they are left out
of every ranking. Pods come in as their admission facts (observations.PodFacts: the pod plan's
criticality and requests), never re-derived here; a ranking returns the values it was given.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TypeVar

from nodeagent.agent.config.thresholds import SIGNAL_RESOURCE, Threshold
from nodeagent.agent.eviction.evaluate import is_hard
from nodeagent.agent.eviction.observations import Observation, PodFacts, PodUsage
from nodeagent.core.model import Pod
from nodeagent.core.quantity import Quantity

# The kubelet's immediateEvictionGracePeriodSeconds: hard evictions (and its pod workers treat a
# 0 override as "use the pod's own grace period", so 0 would not be immediate; kubernetes#115819).
HARD_EVICTION_GRACE_PERIOD_SECONDS = 1
# The pod workers never terminate with less than this (calculateEffectiveGracePeriod).
MINIMUM_GRACE_PERIOD_SECONDS = 1

UsageMap = Mapping[str, PodUsage]
_RESOURCES = frozenset(SIGNAL_RESOURCE.values())
P = TypeVar("P", bound=PodFacts)


def evictable(pods: Iterable[P]) -> list[P]:
    """Pods the eviction manager may evict: all but critical ones."""
    return [p for p in pods if not p.critical]


def _request(facts: PodFacts, resource: str) -> int:
    q = facts.requests.get(resource)
    return q.value() if q is not None else 0


def rank_memory(pods: Iterable[P], usage: UsageMap) -> list[P]:
    """rankMemoryPressure: exceeds request, then priority, then working set above request."""

    def key(facts: P) -> tuple[int, int, int, int]:
        pod = facts.pod
        stats = usage.get(pod.metadata.uid)
        if stats is None:
            return (0, 0, pod.spec.priority, 0)
        over = stats.memory_working_set - _request(facts, "memory")
        return (1, 0 if over > 0 else 1, pod.spec.priority, -over)

    return sorted(evictable(pods), key=key)


def rank_disk(pods: Iterable[P], usage: UsageMap, resource: str = "ephemeral-storage") -> list[P]:
    """rankDiskPressureFunc for `resource` (ephemeral-storage or inodes)."""
    if resource not in ("ephemeral-storage", "inodes"):
        raise ValueError(f"resource: disk ranking needs ephemeral-storage or inodes, got {resource!r}")

    def key(facts: P) -> tuple[int, int, int, int]:
        pod = facts.pod
        stats = usage.get(pod.metadata.uid)
        if stats is None:
            return (0, 0, pod.spec.priority, 0)
        used = stats.amount(resource)
        exceeds = used > _request(facts, resource)  # inodes: there is never an inodes request
        relative = used - _request(facts, "ephemeral-storage")  # the kubelet subtracts this for both
        return (1, 0 if exceeds else 1, pod.spec.priority, -relative)

    return sorted(evictable(pods), key=key)


def rank_pids(pods: Iterable[P], usage: UsageMap) -> list[P]:
    """rankPIDPressure: priority, then process count (largest first)."""

    def key(facts: P) -> tuple[int, int, int]:
        pod = facts.pod
        stats = usage.get(pod.metadata.uid)
        if stats is None:
            return (0, pod.spec.priority, 0)
        return (1, pod.spec.priority, -stats.processes)

    return sorted(evictable(pods), key=key)


def rank_for_resource(resource: str, pods: Iterable[P], usage: UsageMap) -> list[P]:
    """The ranking for an eviction resource (Decision.resource)."""
    if resource == "memory":
        return rank_memory(pods, usage)
    if resource in ("ephemeral-storage", "inodes"):
        return rank_disk(pods, usage, resource)
    if resource == "pids":
        return rank_pids(pods, usage)
    raise ValueError(f"resource: unknown eviction resource {resource!r}")


def rank_for_signal(signal: str, pods: Iterable[P], usage: UsageMap) -> list[P]:
    """The ranking for a starved signal (memory.available, nodefs.inodesFree, ...)."""
    try:
        resource = SIGNAL_RESOURCE[signal]
    except KeyError:
        raise ValueError(f"signal: unknown eviction signal {signal!r}") from None
    return rank_for_resource(resource, pods, usage)


def select_victims(ranked_pods: Sequence[P], usage: UsageMap, amount_needed: int, resource: str) -> list[P]:
    """Pods to evict now, in rank order, until their usage of `resource` covers the amount.

    Each victim is expected to give back what it uses (working set, disk bytes, inodes or
    processes); a pod with no stats is counted as giving nothing, so it is taken (it ranks first
    anyway) and selection goes on. At least one pod is chosen whenever anything is needed; when
    even all pods do not cover it, all are chosen. Critical pods are never chosen.
    """
    if amount_needed <= 0:
        return []
    victims: list[P] = []
    freed = 0
    for facts in ranked_pods:
        if facts.critical:
            continue
        victims.append(facts)
        stats = usage.get(facts.pod.metadata.uid)
        freed += stats.amount(resource) if stats is not None else 0
        if freed >= amount_needed:
            break
    return victims


def _quantity(resource: str, amount: int) -> str:
    """How the kubelet prints an amount: bytes in BinarySI, counts in DecimalSI."""
    if resource in ("memory", "ephemeral-storage"):
        return str(Quantity.from_value(amount, "BinarySI"))
    return str(Quantity.from_value(amount, "DecimalSI"))


def _threshold_quantity(threshold: Threshold, observed: Observation) -> str:
    """GetThresholdQuantity as printed: the configured quantity, or capacity*percentage bytes."""
    if threshold.quantity is not None:
        return str(threshold.quantity)
    return str(Quantity.from_value(threshold.value_for(observed.capacity), "BinarySI"))


def eviction_message(
    resource: str, threshold: Threshold | None, observed: Observation | None, pod: Pod, usage: PodUsage | None
) -> str:
    """The kubelet's evictionMessage, word for word (Go format strings, trailing spaces kept).

    `resource` is the starved resource (memory, ephemeral-storage, inodes, pids) or a signal
    naming it (memory.available ...); `threshold`/`observed` give the "Threshold quantity" part.

    "The node was low on resource: memory. Threshold quantity: 100Mi, available: 91244Ki.
    Container app was using 300Mi, request is 100Mi, has larger consumption of memory. "

    One "Container ..." sentence per container whose usage exceeds its own request (memory
    working set, or rootfs + logs for ephemeral-storage); none for inodes or pids.
    """
    resource = SIGNAL_RESOURCE.get(resource, resource)
    if resource not in _RESOURCES:
        raise ValueError(f"resource: unknown eviction resource {resource!r}")
    message = f"The node was low on resource: {resource}. "
    if threshold is not None and observed is not None:
        available = _quantity(resource, observed.available)
        message += f"Threshold quantity: {_threshold_quantity(threshold, observed)}, available: {available}. "
    if usage is None or resource not in ("memory", "ephemeral-storage"):
        return message
    containers = {c.name: c for c in pod.spec.containers}
    for stats in usage.containers:
        container = containers.get(stats.name)
        if container is None:
            continue
        used = stats.memory_working_set if resource == "memory" else stats.ephemeral_storage
        request = container.resources.requests.get(resource)
        request_value = request.value() if request is not None else 0
        if used is not None and used > request_value:
            message += (
                f"Container {stats.name} was using {_quantity(resource, used)}, "
                f"request is {request if request is not None else '0'}, has larger consumption of {resource}. "
            )
    return message


def grace_period_override(threshold: Threshold, pod: Pod, max_pod_grace_period: int) -> int:
    """The grace period the kubelet asks for when evicting `pod` for `threshold`.

    Hard threshold (grace 0): 1 second (immediateEvictionGracePeriodSeconds). Soft threshold:
    min(evictionMaxPodGracePeriod, the pod's terminationGracePeriodSeconds): since Kubernetes
    1.32 (kubernetes#122890, fixing #64530) the setting caps the pod's own grace period instead
    of replacing it; the old override survives only behind the AllowOverwriteTermination
    GracePeriodSeconds gate, locked off in 1.35. Note evictionMaxPodGracePeriod defaults to 0,
    so by default soft evictions are immediate too.
    """
    if is_hard(threshold):
        return HARD_EVICTION_GRACE_PERIOD_SECONDS
    return min(max_pod_grace_period, pod.spec.termination_grace_period_seconds)


def eviction_grace_period(threshold: Threshold, pod: Pod, max_pod_grace_period: int) -> int:
    """The seconds the pod really gets between SIGTERM and SIGKILL: the override, but never
    below 1 (the kubelet's pod workers floor it at 1)."""
    return max(MINIMUM_GRACE_PERIOD_SECONDS, grace_period_override(threshold, pod, max_pod_grace_period))
