"""Node capacity: what this machine has (cpu, memory, nodefs size, pods, inodes, pids).

Observe-only. The parsers are pure and table-tested; `discover_capacity` does the reads.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nodeagent.agent.node.procfs import PROC_MEMINFO, PROC_PID_MAX, parse_meminfo
from nodeagent.core.quantity import Quantity


@dataclass(frozen=True)
class Capacity:
    """Capacity of this node; pods is maxPods. inodes and pid_max are extra (not node status)."""

    milli_cpu: int
    memory: int
    ephemeral_storage: int
    pods: int
    inodes: int
    pid_max: int

    def as_quantities(self) -> dict[str, Quantity]:
        """The Node's status.capacity: cpu, memory, ephemeral-storage, pods."""
        return {
            "cpu": Quantity.from_milli(self.milli_cpu, "DecimalSI"),
            "memory": Quantity.from_value(self.memory, "BinarySI"),
            "ephemeral-storage": Quantity.from_value(self.ephemeral_storage, "BinarySI"),
            "pods": Quantity.from_value(self.pods, "DecimalSI"),
        }

    def internal_quantities(self) -> dict[str, Quantity]:
        """Capacity plus `pid` (the kubelet's internal capacity, used for the pods cgroup)."""
        out = self.as_quantities()
        out["pid"] = Quantity.from_value(self.pid_max, "DecimalSI")
        return out


# ---- pure parsers ----


def parse_meminfo_total(text: str) -> int:
    """MemTotal from /proc/meminfo, in bytes."""
    total = parse_meminfo(text).get("MemTotal")
    if total is None:
        raise ValueError("MemTotal not found in meminfo")
    return total


def parse_pid_max(text: str) -> int:
    """/proc/sys/kernel/pid_max -> int."""
    return int(text.strip())


def fs_totals(st: os.statvfs_result) -> tuple[int, int]:
    """(size in bytes, total inodes) of a filesystem from its statvfs."""
    return st.f_blocks * st.f_frsize, st.f_files


def nearest_existing(path: str, exists: Callable[[str], bool] = os.path.exists) -> str:
    """`path`, or its nearest existing parent (stateDir may not exist before the first run)."""
    current = Path(path).absolute()
    while not exists(str(current)) and current != current.parent:
        current = current.parent
    return str(current)


# ---- reads ----


def read_milli_cpu() -> int:
    """Usable CPUs in millicores: the scheduler affinity mask of this process.

    The kernel already narrows the affinity mask to the process's cgroup cpuset, so a
    cpuset-restricted agent sees the narrower set here without reading cgroup files.
    """
    try:
        count = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        count = os.cpu_count() or 1
    return count * 1000


def read_memory_bytes() -> int:
    """MemTotal in bytes (psutil as a fallback where /proc/meminfo is unreadable)."""
    try:
        return parse_meminfo_total(Path(PROC_MEMINFO).read_text())
    except (OSError, ValueError):
        import psutil

        return int(psutil.virtual_memory().total)


def read_fs_totals(path: str) -> tuple[int, int]:
    """(bytes, inodes) of the filesystem holding `path` (or its nearest existing parent)."""
    return fs_totals(os.statvfs(nearest_existing(path)))


def read_pid_max() -> int:
    return parse_pid_max(Path(PROC_PID_MAX).read_text())


def discover_capacity(nodefs_path: str, max_pods: int) -> Capacity:
    """Read this machine's capacity; ephemeral-storage and inodes come from nodefs_path."""
    storage, inodes = read_fs_totals(nodefs_path)
    return Capacity(
        milli_cpu=read_milli_cpu(),
        memory=read_memory_bytes(),
        ephemeral_storage=storage,
        pods=max_pods,
        inodes=inodes,
        pid_max=read_pid_max(),
    )
