"""What the resource-metrics sampler reads from one cgroup: where the files are, and what they say (pure).

A driver names the files (`CgroupDriver.usage_files`, no I/O); the sampler keeps them open and
re-reads them; this module turns their bytes into a `CgroupUsage`. Three files per cgroup, the
fewest that give the kubelet's figures:

    cpu      v2 cpu.stat `usage_usec` (a core file: present without the cpu controller)
             v1 cpuacct.usage (nanoseconds)
    memory   v2 memory.current, v1 memory.usage_in_bytes
    stat     memory.stat: inactive_file, anon, pgfault, pgmajfault (v1: the hierarchical total_*
             keys, total_rss for anon)

Working set = usage - inactive_file, floored at 0, as cAdvisor computes it for the kubelet.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

# memory.stat keys per version: (inactive file, rss, minor faults, major faults)
_STAT_KEYS: dict[int, tuple[bytes, bytes, bytes, bytes]] = {
    2: (b"inactive_file", b"anon", b"pgfault", b"pgmajfault"),
    1: (b"total_inactive_file", b"total_rss", b"total_pgfault", b"total_pgmajfault"),
}


@dataclass(frozen=True)
class UsageFiles:
    """Absolute paths of one cgroup's usage files; `cpu` is None where no hierarchy counts CPU time
    (a v1 host without cpuacct)."""

    version: int
    cpu: str | None
    memory: str
    memory_stat: str

    def paths(self) -> tuple[str, ...]:
        return tuple(p for p in (self.cpu, self.memory, self.memory_stat) if p is not None)


class CgroupUsage(NamedTuple):
    """One read of a cgroup: cumulative CPU time and the memory figures the Summary API reports.
    (A NamedTuple: one is made per cgroup per pass, and it builds in a third of a frozen dataclass's time.)"""

    cpu_ns: int | None  # cumulative CPU time of the subtree, nanoseconds (v2 has microsecond resolution)
    memory_usage: int
    memory_working_set: int
    memory_rss: int
    page_faults: int
    major_page_faults: int


def parse_cpu_ns(version: int, data: bytes) -> int:
    """Cumulative CPU nanoseconds from v2 cpu.stat or v1 cpuacct.usage; ValueError if unreadable."""
    if version == 1:
        return int(data)
    if not data.startswith(b"usage_usec ") and b"\nusage_usec " not in data:
        raise ValueError("cpu.stat has no usage_usec")
    return stat_value(data, b"usage_usec") * 1000


def stat_value(stat: bytes, key: bytes) -> int:
    """The value of `key` in a flat-keyed file ("key value" lines), 0 if absent; ValueError on garbage.

    Found with bytes.find rather than a dict of every line: memory.stat has 40 lines and four are
    wanted, and this is the sampler's inner loop (half the cost of splitting the whole file)."""
    if stat.startswith(key + b" "):
        start = len(key) + 1
    else:
        at = stat.find(b"\n" + key + b" ")
        if at < 0:
            return 0
        start = at + len(key) + 2
    end = stat.find(b"\n", start)
    return int(stat[start:end] if end >= 0 else stat[start:])


def parse_usage(version: int, cpu: bytes | None, memory: bytes, memory_stat: bytes) -> CgroupUsage:
    """The figures of one cgroup from the bytes of its three files; ValueError on garbage."""
    if version not in _STAT_KEYS:
        raise ValueError(f"cgroup version must be 1 or 2, got {version!r}")
    inactive_key, rss_key, fault_key, major_key = _STAT_KEYS[version]
    usage = int(memory)
    return CgroupUsage(
        cpu_ns=parse_cpu_ns(version, cpu) if cpu is not None else None,
        memory_usage=usage,
        memory_working_set=max(0, usage - stat_value(memory_stat, inactive_key)),
        memory_rss=stat_value(memory_stat, rss_key),
        page_faults=stat_value(memory_stat, fault_key),
        major_page_faults=stat_value(memory_stat, major_key),
    )


__all__ = ["CgroupUsage", "UsageFiles", "parse_cpu_ns", "parse_usage", "stat_value"]
