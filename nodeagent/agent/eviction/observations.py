"""Eviction signal observations: plain numbers in, `Observation`s out (pure, no I/O).

The observers (cgroup files, statvfs, /proc) read the machine; this module only turns their
numbers into what the kubelet's makeSignalObservations produces, so thresholds and ranking can
be table-tested. Sources: pkg/kubelet/eviction/helpers.go (makeSignalObservations),
helpers_linux.go (makeMemoryAvailableSignalObservation), pkg/kubelet/stats/pidlimit.

Facts carried over from the kubelet:
- memory.available = capacity - working set, working set = usage - inactive_file (>= 0); the
  observation's capacity is available + working set (= capacity). allocatableMemory.available is
  the same formula over the pods cgroup (kubepods), whose capacity is its memory limit.
- nodefs/imagefs bytes: available = f_bavail * f_frsize, capacity = f_blocks * f_frsize; inodes:
  free = f_favail, capacity = f_files (cadvisor reads f_ffree; on Linux filesystems that keep no
  root-reserved inodes the two are equal).
- imagefs on a node without a dedicated image filesystem: the runtime reports the filesystem that
  holds the images, which is the root filesystem, so the imagefs.* signals observe exactly the
  nodefs numbers. Both sets of thresholds then apply to the same disk (with the defaults,
  imagefs.available<15% fires before nodefs.available<10%). We do the same: `fs_observations`
  copies nodefs into imagefs unless a separate filesystem (another device) is given.
- pid.available = min(kernel.pid_max, kernel.threads-max) - number of tasks (the kubelet counts
  tasks from /proc/loadavg), capacity = that minimum.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from nodeagent.agent.config.thresholds import (
    ALLOCATABLE_MEMORY_AVAILABLE,
    IMAGEFS_AVAILABLE,
    IMAGEFS_INODES_FREE,
    MEMORY_AVAILABLE,
    NODEFS_AVAILABLE,
    NODEFS_INODES_FREE,
    PID_AVAILABLE,
)
from nodeagent.core.model import Pod
from nodeagent.core.qos import QOSClass
from nodeagent.core.quantity import Quantity


class PodFacts(Protocol):
    """What the eviction side knows of a pod: the facts admission derived once (pods/plan.py's
    PodPlan carries them and is what the agent passes), never re-derived from the manifest."""

    @property
    def pod(self) -> Pod: ...

    @property
    def critical(self) -> bool:
        """Never evicted, admitted under any pressure (static, mirror, system priority)."""
        ...

    @property
    def qos(self) -> QOSClass: ...

    @property
    def requests(self) -> Mapping[str, Quantity]:
        """The pod's requests per resource (core.resources.pod_requests, computed at admission)."""
        ...


@dataclass(frozen=True)
class Observation:
    """One signal: how much is available, out of what capacity, observed when.

    `time` is the clock time of the stats (seconds); 0.0 means "unknown", which the kubelet
    treats as always fresh (thresholdsUpdatedStats).
    """

    available: int
    capacity: int
    time: float = 0.0


def _non_negative(name: str, value: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{name}: expected an integer, got {value!r}")
    if value < 0:
        raise ValueError(f"{name}: must not be negative, got {value}")
    return value


def working_set(usage: int, inactive_file: int) -> int:
    """usage - inactive_file, floored at 0: page cache the kernel can drop is not "used"."""
    _non_negative("usage", usage)
    _non_negative("inactive_file", inactive_file)
    return max(0, usage - inactive_file)


def memory_available(capacity_bytes: int, usage: int, inactive_file: int, time: float = 0.0) -> Observation:
    """memory.available (root cgroup + machine capacity) or allocatableMemory.available (pods
    cgroup + its limit). Available is floored at 0: a working set above capacity (a limit lowered
    under a running cgroup) still means "nothing left", not a negative amount."""
    _non_negative("capacity_bytes", capacity_bytes)
    ws = working_set(usage, inactive_file)
    return Observation(available=max(0, capacity_bytes - ws), capacity=capacity_bytes, time=time)


@dataclass(frozen=True)
class FsStats:
    """The statvfs(2) fields the signals need; `device` (st_dev) tells filesystems apart."""

    f_frsize: int
    f_blocks: int
    f_bavail: int
    f_files: int
    f_favail: int
    device: int | None = None

    def __post_init__(self) -> None:
        for name in ("f_frsize", "f_blocks", "f_bavail", "f_files", "f_favail"):
            _non_negative(name, getattr(self, name))

    @classmethod
    def from_statvfs(cls, st: os.statvfs_result, device: int | None = None) -> FsStats:
        return cls(st.f_frsize, st.f_blocks, st.f_bavail, st.f_files, st.f_favail, device)


def _fs_pair(fs: FsStats, time: float) -> tuple[Observation, Observation]:
    return (
        Observation(fs.f_bavail * fs.f_frsize, fs.f_blocks * fs.f_frsize, time),
        Observation(fs.f_favail, fs.f_files, time),
    )


def fs_observations(nodefs: FsStats, imagefs: FsStats | None = None, time: float = 0.0) -> dict[str, Observation]:
    """nodefs.* and imagefs.* observations; imagefs is folded into nodefs (same numbers) when it
    is not given or sits on the same device, as on a kubelet node without a dedicated imagefs."""
    node_bytes, node_inodes = _fs_pair(nodefs, time)
    out = {NODEFS_AVAILABLE: node_bytes, NODEFS_INODES_FREE: node_inodes}
    if imagefs is None or not has_dedicated_imagefs(nodefs, imagefs):
        out[IMAGEFS_AVAILABLE], out[IMAGEFS_INODES_FREE] = node_bytes, node_inodes
    else:
        out[IMAGEFS_AVAILABLE], out[IMAGEFS_INODES_FREE] = _fs_pair(imagefs, time)
    return out


def has_dedicated_imagefs(nodefs: FsStats, imagefs: FsStats | None) -> bool:
    """The kubelet's HasDedicatedImageFs: the image filesystem is another device."""
    return imagefs is not None and not (imagefs.device is not None and imagefs.device == nodefs.device)


def pid_available(pid_max: int, processes: int, threads_max: int | None = None, time: float = 0.0) -> Observation:
    """pid.available: the system task limit is the smaller of pid_max and threads-max."""
    _non_negative("pid_max", pid_max)
    _non_negative("processes", processes)
    limit = pid_max if threads_max is None else min(pid_max, _non_negative("threads_max", threads_max))
    return Observation(available=limit - processes, capacity=limit, time=time)


def make_observations(
    *,
    memory: Observation | None = None,
    allocatable_memory: Observation | None = None,
    fs: Mapping[str, Observation] | None = None,
    pid: Observation | None = None,
) -> dict[str, Observation]:
    """All signals in one map; a missing input leaves its signals out (thresholds on a signal
    with no observation are never met, as in the kubelet)."""
    out: dict[str, Observation] = {}
    if memory is not None:
        out[MEMORY_AVAILABLE] = memory
    if allocatable_memory is not None:
        out[ALLOCATABLE_MEMORY_AVAILABLE] = allocatable_memory
    out.update(fs or {})
    if pid is not None:
        out[PID_AVAILABLE] = pid
    return out


@dataclass(frozen=True)
class ContainerUsage:
    """Per-container usage, for the eviction message (memory working set; rootfs + logs bytes)."""

    name: str
    memory_working_set: int | None = None
    ephemeral_storage: int | None = None


@dataclass(frozen=True)
class PodUsage:
    """What a pod uses, keyed by its uid: the ranking inputs and each victim's expected yield."""

    uid: str
    memory_working_set: int = 0
    ephemeral_storage: int = 0
    inodes: int = 0
    processes: int = 0
    containers: tuple[ContainerUsage, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        for name in ("memory_working_set", "ephemeral_storage", "inodes", "processes"):
            _non_negative(name, getattr(self, name))

    def amount(self, resource: str) -> int:
        """Usage of one eviction resource: memory, ephemeral-storage, inodes or pids."""
        try:
            attr = _RESOURCE_FIELD[resource]
        except KeyError:
            raise ValueError(f"resource: unknown eviction resource {resource!r}") from None
        return int(getattr(self, attr))


_RESOURCE_FIELD = {
    "memory": "memory_working_set",
    "ephemeral-storage": "ephemeral_storage",
    "inodes": "inodes",
    "pids": "processes",
}
