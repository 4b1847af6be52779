"""Node allocatable: what pods may request, and what the pods cgroup is limited to.

Mirrors the kubelet's container manager (pkg/kubelet/cm/node_container_manager_linux.go and
helpers.go: GetNodeAllocatableReservation, hardEvictionReservation, getNodeAllocatableAbsolute,
validateNodeAllocatable) and the node status setter that floors allocatable at zero. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from nodeagent.agent.config.thresholds import MEMORY_AVAILABLE, NODEFS_AVAILABLE, OP_LESS_THAN, Threshold
from nodeagent.core.quantity import Quantity

ResourceList = Mapping[str, Quantity]

# Which hard threshold reserves which capacity resource (the only two the kubelet subtracts).
_EVICTION_RESERVES = {MEMORY_AVAILABLE: "memory", NODEFS_AVAILABLE: "ephemeral-storage"}


def _zero() -> Quantity:
    return Quantity.from_value(0, "DecimalSI")


def _floor_zero(value: Quantity) -> Quantity:
    return _zero() if value.milli_value() < 0 else value


def hard_eviction_reservation(hard_thresholds: Iterable[Threshold], capacity: ResourceList) -> dict[str, Quantity]:
    """memory.available -> memory, nodefs.available -> ephemeral-storage; percentages of capacity."""
    out: dict[str, Quantity] = {}
    for threshold in hard_thresholds:
        resource = _EVICTION_RESERVES.get(threshold.signal)
        if resource is None or not threshold.hard or threshold.operator != OP_LESS_THAN:
            continue
        if threshold.quantity is not None:
            out[resource] = threshold.quantity
        else:
            cap = capacity[resource].value() if resource in capacity else 0
            out[resource] = Quantity.from_value(threshold.value_for(cap), "BinarySI")
    return out


def node_allocatable_reservation(
    capacity: ResourceList,
    kube_reserved: ResourceList,
    system_reserved: ResourceList,
    hard_thresholds: Iterable[Threshold],
) -> dict[str, Quantity]:
    """Per capacity resource: systemReserved + kubeReserved + hard eviction; zeros left out."""
    eviction = hard_eviction_reservation(hard_thresholds, capacity)
    out: dict[str, Quantity] = {}
    for name in capacity:
        total: Quantity | None = None
        for part in (system_reserved, kube_reserved, eviction):
            if name in part:
                total = part[name] if total is None else total + part[name]
        if total is not None and total.milli_value() != 0:
            out[name] = total
    return out


def node_allocatable(
    capacity: ResourceList,
    kube_reserved: ResourceList,
    system_reserved: ResourceList,
    hard_thresholds: Iterable[Threshold],
) -> dict[str, Quantity]:
    """status.allocatable: capacity - kubeReserved - systemReserved - hard eviction, floored at 0.

    Only hard thresholds count, and only memory.available and nodefs.available.
    """
    reservation = node_allocatable_reservation(capacity, kube_reserved, system_reserved, hard_thresholds)
    return {
        name: _floor_zero(cap - reservation[name]) if name in reservation else cap
        for name, cap in capacity.items()
    }


def enforced_pods_allocatable(
    capacity: ResourceList, kube_reserved: ResourceList, system_reserved: ResourceList
) -> dict[str, Quantity]:
    """The pods cgroup's limits with enforceNodeAllocatable "pods": capacity - reserved, floored.

    The hard eviction threshold is NOT subtracted: eviction must fire before the cgroup limit.
    Pass the internal capacity (with `pid`) to get the pids limit as well.
    """
    out: dict[str, Quantity] = {}
    for name, cap in capacity.items():
        value = cap
        for part in (system_reserved, kube_reserved):
            if name in part:
                value = value - part[name]
        out[name] = _floor_zero(value)
    return out


def over_reserved(
    capacity: ResourceList,
    kube_reserved: ResourceList,
    system_reserved: ResourceList,
    hard_thresholds: Iterable[Threshold],
) -> list[str]:
    """One message per resource whose reservation exceeds capacity (the kubelet refuses to start)."""
    reservation = node_allocatable_reservation(capacity, kube_reserved, system_reserved, hard_thresholds)
    problems = []
    for name, reserved in reservation.items():
        if (capacity[name] - reserved).milli_value() < 0:
            problems.append(
                f"{name}: kubeReserved + systemReserved + hard eviction threshold ({reserved}) "
                f"exceed capacity ({capacity[name]})"
            )
    return problems
