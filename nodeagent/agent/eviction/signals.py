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
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from nodeagent.agent.cgroups import layout
from nodeagent.agent.cgroups.driver import CgroupDriver
from nodeagent.agent.eviction.observations import (
    ContainerUsage,
    FsStats,
    Observation,
    PodUsage,
    fs_observations,
    make_observations,
    memory_available,
    pid_available,
)
from nodeagent.agent.node.disk_usage import dir_usage
from nodeagent.agent.node.machine import meminfo_working_set, parse_meminfo
from nodeagent.core.model import Pod
from nodeagent.core.qos import qos_class

PROC_MEMINFO = "/proc/meminfo"


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

    def memory(self) -> Observation:
        capacity, ws = meminfo_working_set(parse_meminfo(_read(PROC_MEMINFO)))
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
        return fs_observations(nodefs, imagefs, self.now())

    def pids(self) -> Observation:
        pid_max = int(_read("/proc/sys/kernel/pid_max"))
        threads_max = int(_read("/proc/sys/kernel/threads-max"))
        return pid_available(pid_max, parse_loadavg_tasks(_read("/proc/loadavg")), threads_max, self.now())

    def observe(self) -> dict[str, Observation]:
        return make_observations(memory=self.memory(), allocatable_memory=self.allocatable(),
                                 fs=self.filesystems(), pid=self.pids())


def pod_usage(driver: CgroupDriver, pod: Pod, pod_dir: str | None, with_disk: bool) -> PodUsage:
    """A pod's memory working set and processes from its cgroups; disk only when asked (it walks)."""
    qos = qos_class(pod)
    uid = pod.metadata.uid
    try:
        stats = driver.stats(layout.pod_path(qos, uid))
        memory, processes = stats.working_set, stats.pids_current
    except OSError:
        memory = processes = 0
    containers = []
    for c in pod.spec.containers:
        try:
            ws: int | None = driver.stats(layout.container_path(qos, uid, c.name)).working_set
        except OSError:
            ws = None
        containers.append(ContainerUsage(c.name, memory_working_set=ws))
    disk = inodes = 0
    if with_disk and pod_dir and os.path.isdir(pod_dir):
        disk, inodes = dir_usage(pod_dir)
    return PodUsage(uid=uid, memory_working_set=memory, ephemeral_storage=disk, inodes=inodes,
                    processes=processes, containers=tuple(containers))


def pods_usage(driver: CgroupDriver, pods: Iterable[tuple[Pod, str | None]], with_disk: bool) -> dict[str, PodUsage]:
    return {pod.metadata.uid: pod_usage(driver, pod, d, with_disk) for pod, d in pods}
