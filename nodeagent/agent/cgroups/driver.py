"""The cgroup driver interface: what the agent needs from cgroupfs, whichever version.

Paths given to a driver are relative to the agent's cgroup root (e.g.
"kubepods/burstable/pod<uid>/app"); a driver never touches anything outside that root.
tests/cgroup_conformance.py holds what every driver must do; it runs against the fake in
tests/fakes.py and, on real kernels, against the v1 and the v2 driver.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Protocol

from nodeagent.agent.cgroups.usage import UsageFiles


@dataclass(frozen=True)
class CgroupSpec:
    """Settings for one cgroup. None means "no limit" (or "leave the kernel default")."""

    cpu_shares: int | None = None  # v1 cpu.shares; v2 cpu.weight via the quadratic map
    cpu_quota_us: int | None = None  # None = unlimited ("max")
    cpu_period_us: int = 100000
    memory_max: int | None = None  # bytes
    memory_high: int | None = None  # bytes; v2 only (v1 ignores it)
    pids_max: int | None = None


@dataclass(frozen=True)
class CgroupStats:
    """A snapshot of one cgroup's usage; counters are cumulative since creation."""

    memory_usage: int = 0  # memory.current / memory.usage_in_bytes
    memory_inactive_file: int = 0
    memory_anon: int = 0
    memory_file: int = 0
    oom_events: int = 0  # v2 memory.events oom; v1 under_oom transitions are not counted
    oom_kills: int = 0  # v2 memory.events oom_kill; v1 memory.oom_control oom_kill (kernel >= 4.13)
    cpu_usage_usec: int = 0
    cpu_nr_throttled: int = 0
    cpu_throttled_usec: int = 0
    pids_current: int = 0
    extra: dict[str, int] = field(default_factory=dict)

    @property
    def working_set(self) -> int:
        """usage - inactive_file, floored at 0: what the kubelet calls the working set."""
        return max(0, self.memory_usage - self.memory_inactive_file)


def weight_alone_moved(previous: CgroupSpec, spec: CgroupSpec) -> bool:
    """Whether `spec` differs from `previous` in the cpu weight only (or not at all): the one
    write a QoS tier needs when a pod comes or goes (CgroupDriver.update's `previous`)."""
    return replace(previous, cpu_shares=spec.cpu_shares) == spec


class CgroupDriver(Protocol):
    version: int  # 1 or 2
    root: str  # the agent's cgroup root, relative to the hierarchy mount, e.g. "/" or "/nodeagent-test"

    def create(self, path: str, spec: CgroupSpec) -> None:
        """Create (parents too) and apply spec; idempotent."""
        ...

    def update(self, path: str, spec: CgroupSpec, previous: CgroupSpec | None = None) -> None:
        """Apply spec to an existing cgroup. `previous`: the spec the caller applied last, when it
        knows it; only what differs is written then (a QoS tier's weight changes with every pod
        admitted, and a full rewrite costs a dozen file operations on the create path)."""
        ...

    def exists(self, path: str) -> bool: ...

    def remove(self, path: str) -> None:
        """Remove the cgroup and its children (bottom-up); they must hold no processes."""
        ...

    def procs_files(self, path: str) -> list[str]:
        """Absolute cgroup.procs files a process must be written into to join this cgroup.

        One on v2; one per mounted controller hierarchy on v1. The process runtime writes the
        child's PID there before exec, from the child itself.
        """
        ...

    def add_process(self, path: str, pid: int) -> None: ...

    def pids(self, path: str) -> list[int]:
        """PIDs in this cgroup and its descendants."""
        ...

    def stats(self, path: str) -> CgroupStats: ...

    def memory_usage(self, path: str) -> tuple[int, int]:
        """(usage, inactive file) bytes: what memory eviction needs, in two file reads (stats()
        reads every controller, and on v1 walks the whole subtree for oom_kill). Like stats() and
        oom_kill_count(), an OSError when the cgroup does not exist."""
        ...

    def oom_kill_count(self, path: str) -> int:
        """The cgroup's cumulative oom_kill counter, subtree included (0 where the kernel does not count)."""
        ...

    def usage_files(self, path: str) -> UsageFiles:
        """Where the kernel keeps the cgroup's CPU and memory usage (absolute paths, no I/O): the
        resource-metrics sampler keeps these files open and re-reads them every interval."""
        ...

    def memory_dir(self, path: str) -> str:
        """Absolute directory of the cgroup in the memory hierarchy (for kernel notifications)."""
        ...

    def hierarchy(self, controller: str) -> str | None:
        """Absolute mount of the hierarchy `controller` lives in (v2: the unified mount, for every
        controller the kernel offers there; v1: that controller's mount), None where the kernel
        does not offer it. What a caller reading kernel files next to the driver's needs."""
        ...

    def kill(self, path: str) -> None:
        """SIGKILL every process in the cgroup and its descendants."""
        ...

    def children(self, path: str) -> list[str]:
        """Names of the direct child cgroups."""
        ...
