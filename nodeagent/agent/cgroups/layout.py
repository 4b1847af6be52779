"""The kubelet's cgroupfs layout under the agent root, and the cgroup values for each level (pure).

    kubepods/                       node allocatable (enforceNodeAllocatable: [pods])
    kubepods/pod<uid>/<container>   Guaranteed pods sit directly under kubepods
    kubepods/burstable/pod<uid>/<container>
    kubepods/besteffort/pod<uid>/<container>
    nodeagent-runtime/              the OCI runtime's monitors (`runc run`, one per image container):
                                    the kubelet's runtimeCgroups, outside kubepods and the pods' limits

Values follow the kubelet: pkg/kubelet/cm/helpers_linux.go (ResourceConfigForPod),
qos_container_manager_linux.go (setCPUCgroupConfig), node_container_manager_linux.go
(getCgroupConfig) and kuberuntime_container_linux.go (container resources).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from nodeagent.agent.cgroups.driver import CgroupSpec
from nodeagent.core.errors import FieldError
from nodeagent.core.model import Container
from nodeagent.core.names import validate_uid
from nodeagent.core.qos import BEST_EFFORT, BURSTABLE, GUARANTEED, QOSClass
from nodeagent.core.quantity import Quantity
from nodeagent.core.resources import (
    MIN_SHARES,
    QUOTA_PERIOD_US,
    PodResources,
    milli_cpu_to_quota,
    milli_cpu_to_shares,
)

KUBEPODS = "kubepods"
BURSTABLE_PATH = "kubepods/burstable"
BESTEFFORT_PATH = "kubepods/besteffort"
POD_PREFIX = "pod"
RUNTIME_PATH = "nodeagent-runtime"
QOS_PARENTS = (KUBEPODS, BURSTABLE_PATH, BESTEFFORT_PATH)  # where pod<uid> directories live
_QOS_PARENT: dict[str, str] = {
    GUARANTEED: KUBEPODS,
    BURSTABLE: BURSTABLE_PATH,
    BEST_EFFORT: BESTEFFORT_PATH,
}


# -- paths -----------------------------------------------------------------------------------


def qos_path(qos: QOSClass) -> str:
    """The parent of a pod of class `qos`: kubepods itself for Guaranteed."""
    try:
        return _QOS_PARENT[qos]
    except KeyError:
        raise FieldError("qos", f"must be one of {sorted(_QOS_PARENT)}, got {qos!r}") from None


def pod_dir_name(uid: str) -> str:
    try:
        validate_uid(uid)
    except ValueError as e:
        raise FieldError("metadata.uid", str(e)) from None
    return POD_PREFIX + uid


def pod_uid_from_dir(name: str) -> str | None:
    """The uid of a `pod<uid>` directory name (for re-adoption), None for anything else."""
    if not name.startswith(POD_PREFIX) or len(name) == len(POD_PREFIX):
        return None
    uid = name[len(POD_PREFIX) :]
    try:
        validate_uid(uid)
    except ValueError:
        return None
    return uid


def pod_path(qos: QOSClass, uid: str) -> str:
    return f"{qos_path(qos)}/{pod_dir_name(uid)}"


def container_path(qos: QOSClass, uid: str, name: str) -> str:
    if not name or "/" in name or name in (".", "..") or "\0" in name:
        raise FieldError("container.name", f"{name!r} cannot name a cgroup")
    return f"{pod_path(qos, uid)}/{name}"


# -- values ----------------------------------------------------------------------------------


def pod_cgroup_spec(
    qos: QOSClass, resources: PodResources, *, pids_max: int | None = None, cpu_period_us: int = QUOTA_PERIOD_US
) -> CgroupSpec:
    """ResourceConfigForPod: shares from the summed cpu requests (BestEffort: the minimum);
    cpu quota only when every container limits cpu, memory.max only when every container limits
    memory (a Guaranteed pod always does both). `pids_max` is the kubelet's podPidsLimit."""
    if qos == BEST_EFFORT:
        return CgroupSpec(cpu_shares=MIN_SHARES, cpu_period_us=cpu_period_us, pids_max=pids_max)
    limits = resources.limits
    shares = milli_cpu_to_shares(resources.cpu_request_milli)
    cpu_quota = None
    if "cpu" in resources.limited_everywhere:
        cpu_quota = milli_cpu_to_quota(limits["cpu"].milli_value(), cpu_period_us)
    memory_max = None
    if "memory" in resources.limited_everywhere:
        memory_max = limits["memory"].value()
    return CgroupSpec(
        cpu_shares=shares,
        cpu_quota_us=cpu_quota,
        cpu_period_us=cpu_period_us,
        memory_max=memory_max,
        pids_max=pids_max,
    )


def container_cgroup_spec(container: Container, *, cpu_period_us: int = QUOTA_PERIOD_US) -> CgroupSpec:
    """The container's own limits: shares from its cpu request (minimum 2 without one), quota from
    its cpu limit, memory.max from its memory limit."""
    requests = container.resources.requests
    limits = container.resources.limits
    cpu_request = requests.get("cpu")
    if cpu_request is None:  # defaulting normally did this already; the kubelet repeats it
        cpu_request = limits.get("cpu")
    shares = milli_cpu_to_shares(cpu_request.milli_value() if cpu_request is not None else 0)
    cpu_limit = limits.get("cpu")
    memory_limit = limits.get("memory")
    return CgroupSpec(
        cpu_shares=shares,
        cpu_quota_us=milli_cpu_to_quota(cpu_limit.milli_value(), cpu_period_us) if cpu_limit is not None else None,
        cpu_period_us=cpu_period_us,
        memory_max=memory_limit.value() if memory_limit is not None and not memory_limit.is_zero() else None,
    )


def qos_cgroup_specs(pods: Iterable[tuple[QOSClass, int]]) -> dict[str, CgroupSpec]:
    """setCPUCgroupConfig, from each admitted pod's (QoS class, cpu request in millicores):
    besteffort always the minimum shares; burstable the shares of the sum of the Burstable pods'
    cpu requests (so the tier weighs what its pods asked for)."""
    burstable_milli = sum(milli for qos, milli in pods if qos == BURSTABLE)
    return {
        BESTEFFORT_PATH: CgroupSpec(cpu_shares=MIN_SHARES),
        BURSTABLE_PATH: CgroupSpec(cpu_shares=milli_cpu_to_shares(burstable_milli)),
    }


def kubepods_spec(
    enforced_allocatable: Mapping[str, Quantity], *, memory_high: int | None = None
) -> CgroupSpec:
    """getCgroupConfig for the pods cgroup: memory.max, cpu shares and pids.max from the enforced
    allocatable (capacity - kubeReserved - systemReserved; the eviction threshold is not
    subtracted). `memory_high` lets the agent add its early-throttle line (v2 only)."""
    memory = enforced_allocatable.get("memory")
    cpu = enforced_allocatable.get("cpu")
    # the kubelet's internal resource is "pid" (Capacity.internal_quantities); "pids" kept as an alias
    pids = enforced_allocatable.get("pid", enforced_allocatable.get("pids"))
    memory_max = memory.value() if memory is not None else None
    if memory_max is not None and memory_max <= 0:
        raise FieldError("allocatable.memory", f"{memory} leaves nothing for pods")
    if memory_high is not None and memory_max is not None and memory_high > memory_max:
        raise FieldError("memory_high", f"{memory_high} is above memory.max {memory_max}")
    return CgroupSpec(
        cpu_shares=milli_cpu_to_shares(cpu.milli_value()) if cpu is not None else None,
        memory_max=memory_max,
        memory_high=memory_high,
        pids_max=pids.value() if pids is not None and pids.value() > 0 else None,
    )
