"""Node allocatable: what pods may request, and what the pods cgroup is limited to.

Mirrors the kubelet's container manager (pkg/kubelet/cm/node_container_manager_linux.go and
helpers.go: GetNodeAllocatableReservation, hardEvictionReservation, getNodeAllocatableAbsolute,
validateNodeAllocatable) and the node status setter that floors allocatable at zero. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from nodeagent.agent.config.thresholds import MEMORY_AVAILABLE, NODEFS_AVAILABLE, OP_LESS_THAN, Threshold
from nodeagent.core.quantity import Quantity

ResourceList = Mapping[str, Quantity]
R = TypeVar("R", bound=str)  # the config's reservation keys ("cpu", "memory", ...)

if TYPE_CHECKING:
    from nodeagent.agent.config.settings import Config
    from nodeagent.agent.node.capacity import Capacity

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


@dataclass(frozen=True)
class NodeAllocatable:
    """Everything that follows from capacity and the reservations: derived once per config."""

    allocatable: dict[str, Quantity]  # status.allocatable
    pods_limits: dict[str, Quantity]  # capacity - reserved, with pid: the kubepods cgroup's limits
    enforced: bool  # enforceNodeAllocatable has "pods": kubepods is limited to pods_limits
    problems: tuple[str, ...]  # reservations over capacity: the agent refuses such a config

    @property
    def enforced_limits(self) -> dict[str, Quantity] | None:
        return self.pods_limits if self.enforced else None

    @property
    def enforced_memory(self) -> int | None:
        """The kubepods memory limit in bytes when it is enforced (allocatableMemory.available)."""
        limits = self.enforced_limits
        return limits["memory"].value() if limits and "memory" in limits else None


def derive(
    capacity: ResourceList,
    internal_capacity: ResourceList,
    kube_reserved: Mapping[R, Quantity],
    system_reserved: Mapping[R, Quantity],
    hard_thresholds: Iterable[Threshold],
    *,
    enforce_pods: bool,
) -> NodeAllocatable:
    """The one place allocatable, the pods cgroup limits and the over-reservation check are made."""
    kube = {str(k): v for k, v in kube_reserved.items()}
    system = {str(k): v for k, v in system_reserved.items()}
    hard = list(hard_thresholds)
    return NodeAllocatable(
        allocatable=node_allocatable(capacity, kube, system, hard),
        pods_limits=enforced_pods_allocatable(internal_capacity, kube, system),
        enforced=enforce_pods,
        problems=tuple(over_reserved(capacity, kube, system, hard)),
    )


def allocatable_for(capacity: Capacity, config: Config) -> NodeAllocatable:
    """derive() for this machine's capacity and a config (the agent and check-config)."""
    return derive(capacity.as_quantities(), capacity.internal_quantities(), config.kube_reserved,
                  config.system_reserved, config.hard_thresholds,
                  enforce_pods="pods" in config.enforce_node_allocatable)
