"""The I/O of a sampling pass: one cgroup's usage, the machine's CPU and memory, a filesystem, a
directory tree. Plain values out, each stamped with the instant it was read; no policy here.

Cgroup files are located by the driver (`CgroupDriver.usage_files`) and read through KeptFiles:
three preads per cgroup per pass once the files are open. A cgroup that does not exist (a pod
starting or going away) reads as None; any other failure also reads as None and is logged once,
until the file reads again.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from typing import NamedTuple

import structlog

from nodeagent.agent.cgroups.driver import CgroupDriver
from nodeagent.agent.cgroups.usage import CgroupUsage, UsageFiles, parse_usage
from nodeagent.agent.node.disk_usage import dir_usage
from nodeagent.agent.node.machine import meminfo_working_set, parse_cpu_busy_ns
from nodeagent.agent.node.procfs import parse_meminfo
from nodeagent.agent.stats.files import KeptFiles
from nodeagent.core.clock import Clock

log = structlog.get_logger(__name__)

_GONE = frozenset({errno.ENOENT, errno.ENODEV, errno.ESRCH})


class CgroupReading(NamedTuple):  # one per cgroup per pass: cheap to build
    monotonic: float
    wall: float
    usage: CgroupUsage


@dataclass(frozen=True, slots=True)
class MachineReading:
    """The whole machine, from /proc/stat and /proc/meminfo."""

    monotonic: float
    wall: float
    cpu_busy_ns: int
    memory_capacity: int
    memory_usage: int  # MemTotal - MemFree
    memory_working_set: int
    memory_rss: int  # AnonPages


@dataclass(frozen=True, slots=True)
class FilesystemReading:
    wall: float
    capacity_bytes: int
    available_bytes: int  # to unprivileged users (f_bavail)
    used_bytes: int  # blocks - free blocks, as df counts
    inodes: int
    inodes_free: int


@dataclass(frozen=True, slots=True)
class DirReading:
    wall: float
    used_bytes: int
    inodes_used: int


class Reader:
    """Reads for one sampler; `begin_pass()` anchors wall time to the monotonic clock, so every
    reading of a pass is stamped consistently even if the wall clock steps meanwhile."""

    def __init__(self, driver: CgroupDriver, clock: Clock, files: KeptFiles, *, proc: str = "/proc") -> None:
        self.driver = driver
        self.clock = clock
        self.files = files
        self.proc_stat = os.path.join(proc, "stat")
        self.proc_meminfo = os.path.join(proc, "meminfo")
        self._wall_offset = 0.0
        self._usage_files: dict[str, UsageFiles] = {}
        self._touched: set[str] = set()
        self._failing: set[str] = set()

    def begin_pass(self) -> tuple[float, float]:
        """(monotonic, wall) now; later readings of the pass derive their wall time from it."""
        mono, wall = self.clock.now(), self.clock.wall()
        self._wall_offset = wall - mono
        return mono, wall

    def end_pass(self) -> None:
        """Close what this pass did not read (pods that went away)."""
        self.files.sweep()
        for path in [p for p in self._usage_files if p not in self._touched]:
            del self._usage_files[path]
            self._failing.discard(path)
        self._touched = set()

    def stamp(self) -> tuple[float, float]:
        """(monotonic, wall) now. The sampler takes one per pod and reads the pod's cgroups under it:
        they are read within microseconds of each other, and where a clock read is a real syscall
        (no vDSO, as in the UML guest) one per cgroup would be a third of the pass."""
        mono = self.clock.now()
        return mono, mono + self._wall_offset

    def cgroup(self, path: str, stamp: tuple[float, float] | None = None) -> CgroupReading | None:
        self._touched.add(path)
        files = self._usage_files.get(path)
        if files is None:
            files = self._usage_files[path] = self.driver.usage_files(path)
        try:
            mono, wall = stamp or self.stamp()
            cpu = self.files.read(files.cpu) if files.cpu is not None else None
            memory = self.files.read(files.memory)
            stat = self.files.read(files.memory_stat)
            usage = parse_usage(files.version, cpu, memory, stat)
        except OSError as e:
            if e.errno not in _GONE:
                self._failed(path, e)
            return None
        except ValueError as e:
            self._failed(path, e)
            return None
        if path in self._failing:
            self._recovered(path)
        return CgroupReading(mono, wall, usage)

    def _recovered(self, path: str) -> None:
        self._failing.discard(path)
        log.info("stats_read_recovered", path=path)

    def _failed(self, path: str, error: Exception) -> None:
        if path not in self._failing:
            self._failing.add(path)
            log.warning("stats_read_failed", path=path, error=str(error))

    def machine(self) -> MachineReading | None:
        try:
            mono, wall = self.stamp()
            busy = parse_cpu_busy_ns(self.files.read(self.proc_stat))
            info = parse_meminfo(self.files.read(self.proc_meminfo).decode())
            capacity, working_set = meminfo_working_set(info)
        except (OSError, ValueError, KeyError) as e:
            self._failed(self.proc_stat, e)
            return None
        if self.proc_stat in self._failing:
            self._recovered(self.proc_stat)
        return MachineReading(mono, wall, busy, capacity, max(0, capacity - info.get("MemFree", 0)), working_set,
                              info.get("AnonPages", 0))

    def filesystem(self, path: str) -> FilesystemReading | None:
        try:
            st = os.statvfs(path)
        except OSError as e:
            self._failed(path, e)
            return None
        if path in self._failing:
            self._recovered(path)
        return FilesystemReading(self.stamp()[1], st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize,
                                 (st.f_blocks - st.f_bfree) * st.f_frsize, st.f_files, st.f_ffree)

    def directory(self, path: str) -> DirReading | None:
        """du of a directory; None if it does not exist (yet)."""
        if not os.path.isdir(path):
            return None
        used, inodes = dir_usage(path)
        return DirReading(self.stamp()[1], used, inodes)


__all__ = ["CgroupReading", "DirReading", "FilesystemReading", "MachineReading", "Reader"]
