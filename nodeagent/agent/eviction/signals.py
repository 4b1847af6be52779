"""Observers: read the machine and return eviction observations (I/O only, no policy).

memory.available uses /proc/meminfo on every kernel: working set = MemTotal - MemFree -
Inactive(file), which is what cAdvisor reports for the root cgroup on cgroup v2 (where the root
has no memory.current) and close to the root memory cgroup on v1, without touching any cgroup
the agent did not create. allocatableMemory.available reads the agent's own kubepods cgroup.
Filesystems come from statvfs; pid.available from /proc/loadavg (kernel scheduling entities)
against min(pid_max, threads-max).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from nodeagent.agent.cgroups import layout
from nodeagent.agent.cgroups.driver import CgroupDriver
from nodeagent.agent.config.settings import Config
from nodeagent.agent.eviction.observations import (
    ContainerUsage,
    FsStats,
    Observation,
    PodUsage,
    fs_observations,
    has_dedicated_imagefs,
    make_observations,
    memory_available,
    pid_available,
)
from nodeagent.agent.node.allocatable import NodeAllocatable
from nodeagent.agent.node.disk_usage import dir_usage
from nodeagent.agent.node.machine import meminfo_working_set
from nodeagent.agent.node.procfs import PROC_PID_MAX, MeminfoReader


def parse_loadavg_tasks(text: str) -> int:
    """The total of scheduling entities (threads) from /proc/loadavg's 4th field 'running/total'."""
    return int(text.split()[3].split("/")[1])


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def kubepods_memory(driver: CgroupDriver) -> tuple[int, int]:
    """(usage, inactive file) of the pods cgroup; the drivers' two-file read where they have it
    (stats() reads every controller, and on v1 walks every pod's cgroup for oom_kill)."""
    return driver.memory_usage(layout.KUBEPODS)


@dataclass
class NodeObserver:
    """Reads every node signal; cheap enough to call on every wake-up (a few file reads)."""

    driver: CgroupDriver
    nodefs_path: str
    imagefs_path: str
    allocatable_memory: int | None  # the pods cgroup's enforced memory (allocatableMemory.available)
    now: Callable[[], float]
    # imagefsPath on a device of its own, as the last observation found (the reclaim order depends on it)
    dedicated_imagefs: bool = False
    meminfo: MeminfoReader = field(default_factory=MeminfoReader)

    def reconfigure(self, config: Config, allocatable: NodeAllocatable) -> None:
        """A reload: allocatableMemory.available is measured against the new enforced memory."""
        self.allocatable_memory = allocatable.enforced_memory

    def memory(self) -> Observation:
        capacity, ws = meminfo_working_set(self.meminfo.read())
        return Observation(available=max(0, capacity - ws), capacity=capacity, time=self.now())

    def allocatable(self) -> Observation | None:
        if not self.allocatable_memory:
            return None
        try:
            usage, inactive_file = kubepods_memory(self.driver)
        except OSError:
            return None
        return memory_available(self.allocatable_memory, usage, inactive_file, self.now())

    def filesystems(self) -> dict[str, Observation]:
        def fs(path: str) -> FsStats:
            return FsStats.from_statvfs(os.statvfs(path), os.stat(path).st_dev)

        nodefs = fs(self.nodefs_path)
        imagefs = fs(self.imagefs_path) if self.imagefs_path != self.nodefs_path else None
        self.dedicated_imagefs = has_dedicated_imagefs(nodefs, imagefs)
        return fs_observations(nodefs, imagefs, self.now())

    def pids(self) -> Observation:
        pid_max = int(_read(PROC_PID_MAX))
        threads_max = int(_read("/proc/sys/kernel/threads-max"))
        return pid_available(pid_max, parse_loadavg_tasks(_read("/proc/loadavg")), threads_max, self.now())

    def observe_memory(self) -> dict[str, Observation]:
        """The memory signals alone (the eviction manager's look between passes near the line)."""
        return make_observations(memory=self.memory(), allocatable_memory=self.allocatable())

    def observe(self) -> dict[str, Observation]:
        return make_observations(memory=self.memory(), allocatable_memory=self.allocatable(),
                                 fs=self.filesystems(), pid=self.pids())


class ContainerPaths(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def cgroup_path(self) -> str: ...


class PodPaths(Protocol):
    """Where a pod's usage is read: its cgroups and its directory (the pod manager's plans)."""

    @property
    def uid(self) -> str: ...
    @property
    def cgroup_path(self) -> str: ...
    @property
    def log_dir(self) -> str: ...
    @property
    def containers(self) -> Sequence[ContainerPaths]: ...


def _working_set(driver: CgroupDriver, path: str) -> int | None:
    try:
        usage, inactive_file = driver.memory_usage(path)
    except OSError:
        return None
    return max(0, usage - inactive_file)


def pod_usage(driver: CgroupDriver, pod: PodPaths, resource: str | None) -> PodUsage:
    """What a pod uses of the starved `resource` (memory, ephemeral-storage, inodes, pids), and
    only that: this runs in the eviction pass, for every candidate. Memory is two small reads
    per cgroup (stats() reads every controller and, on v1, walks the subtree for oom_kill:
    200 cgroups took 65 ms against 11 ms); disk walks the pod's directory; None reads all."""
    memory = processes = disk = inodes = 0
    containers: tuple[ContainerUsage, ...] = ()
    if resource in (None, "memory"):
        memory = _working_set(driver, pod.cgroup_path) or 0
        containers = tuple(ContainerUsage(c.name, memory_working_set=_working_set(driver, c.cgroup_path))
                           for c in pod.containers)
    if resource in (None, "pids"):
        try:
            processes = driver.stats(pod.cgroup_path).pids_current
        except OSError:
            processes = 0
    if resource in (None, "ephemeral-storage", "inodes") and os.path.isdir(pod.log_dir):
        disk, inodes = dir_usage(pod.log_dir)
    return PodUsage(uid=pod.uid, memory_working_set=memory, ephemeral_storage=disk, inodes=inodes,
                    processes=processes, containers=containers)


def pods_usage(driver: CgroupDriver, pods: Iterable[PodPaths], resource: str | None) -> dict[str, PodUsage]:
    """Blocking (file reads, a directory walk): run it off the event loop."""
    return {pod.uid: pod_usage(driver, pod, resource) for pod in pods}
