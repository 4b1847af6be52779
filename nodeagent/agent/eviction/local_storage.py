"""Local-storage limits of one pod, as the kubelet's localStorageEviction checks them every pass
(pkg/kubelet/eviction/eviction_manager.go). Pure.

In the kubelet's order, the first that fails decides, and the pod is evicted at once (grace 0),
whatever the node's thresholds, with the kubelet's message:
1. emptyDirLimitEviction: a disk-backed emptyDir with a positive `sizeLimit` whose usage exceeds
   it (a memory-backed one needs no check: its tmpfs is sized by the limit and refuses writes
   past it);
2. podEphemeralStorageLimitEviction: when the pod has an ephemeral-storage limit at all (PodLimits:
   any container declares one; app containers and sidecars summed, a bigger init container's
   taken instead), the pod's ephemeral usage over it;
3. containerEphemeralStorageLimitEviction: an app container with a non-zero limit whose writable
   layer and logs exceed it.
Each has its own metrics label (signalEmptyDirFsLimit, signalEphemeralPodFsLimit,
signalEphemeralContainerFsLimit).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from nodeagent.core.quantity import Quantity

EMPTY_DIR_MESSAGE = 'Usage of EmptyDir volume "{volume}" exceeds the limit "{limit}". '
POD_MESSAGE = "Pod ephemeral local storage usage exceeds the total limit of containers {limit}. "
CONTAINER_MESSAGE = 'Container {name} exceeded its local ephemeral storage limit "{limit}". '
EMPTY_DIR_SIGNAL = "emptydirfs.limit"
POD_SIGNAL = "ephemeralpodfs.limit"
CONTAINER_SIGNAL = "ephemeralcontainerfs.limit"
EPHEMERAL_STORAGE = "ephemeral-storage"


@dataclass(frozen=True)
class EmptyDirUsage:
    volume: str
    size_limit: Quantity | None
    used: int  # bytes on disk (du)


def empty_dir_violation(volumes: Sequence[EmptyDirUsage]) -> str | None:
    """The eviction message for the first emptyDir over its sizeLimit, or None."""
    for v in volumes:
        limit = v.size_limit
        if limit is not None and limit.value() > 0 and v.used > limit.value():
            return EMPTY_DIR_MESSAGE.format(volume=v.volume, limit=str(limit))
    return None


@dataclass(frozen=True)
class ContainerStorageUsage:
    name: str
    limit: Quantity | None  # the app container's limits.ephemeral-storage (init containers: None)
    used: int  # bytes: its writable layer and its logs


@dataclass(frozen=True)
class PodStorageUsage:
    """What the pod uses of local storage, as measured for the three checks."""

    empty_dirs: Sequence[EmptyDirUsage]  # the disk-backed emptyDirs (every one counts in `used`)
    containers: Sequence[ContainerStorageUsage]
    used: int  # the pod's ephemeral usage: the containers' and the disk-backed emptyDirs'


@dataclass(frozen=True)
class Violation:
    signal: str  # the evictions counter's label
    message: str


def pod_ephemeral_violation(pod_limits: Mapping[str, Quantity], used: int) -> str | None:
    """The kubelet's podEphemeralStorageLimitEviction: no limit in PodLimits, no check (a limit
    only some containers declare still counts, summed as PodLimits does)."""
    limit = pod_limits.get(EPHEMERAL_STORAGE)
    if limit is None or used <= limit.value():
        return None
    return POD_MESSAGE.format(limit=str(limit))


def container_ephemeral_violation(containers: Sequence[ContainerStorageUsage]) -> str | None:
    """The kubelet's containerEphemeralStorageLimitEviction: the first container over its own
    non-zero limit."""
    for c in containers:
        if c.limit is not None and not c.limit.is_zero() and c.used > c.limit.value():
            return CONTAINER_MESSAGE.format(name=c.name, limit=str(c.limit))
    return None


def local_storage_violation(pod_limits: Mapping[str, Quantity], usage: PodStorageUsage) -> Violation | None:
    """The kubelet's localStorageEviction for one pod: emptyDir, then pod, then container."""
    if (message := empty_dir_violation(usage.empty_dirs)) is not None:
        return Violation(EMPTY_DIR_SIGNAL, message)
    if (message := pod_ephemeral_violation(pod_limits, usage.used)) is not None:
        return Violation(POD_SIGNAL, message)
    if (message := container_ephemeral_violation(usage.containers)) is not None:
        return Violation(CONTAINER_SIGNAL, message)
    return None
