"""What /proc says about the whole machine's usage: memory (/proc/meminfo) and busy CPU time
(/proc/stat). Pure parsers over the files' text (/proc/meminfo itself is parsed by procfs.py);
the callers read the files.

Both are what the kubelet reports for the node's root cgroup, read without touching a cgroup the
agent did not create: the working set is MemTotal - MemFree - Inactive(file) (cAdvisor's figure
for the v2 root, which has no memory.current), and busy CPU time is user + nice + system + irq +
softirq + steal, the sum the kernel gives as the v2 root cgroup's cpu.stat usage_usec.
"""

from __future__ import annotations

import os

USER_HZ = os.sysconf("SC_CLK_TCK")  # the unit of /proc/stat's times
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)  # user nice system [idle iowait] irq softirq steal (guest is in user)


def meminfo_working_set(info: dict[str, int]) -> tuple[int, int]:
    """(capacity, working set) from /proc/meminfo values: usage = total - free, minus inactive file."""
    total = info["MemTotal"]
    usage = max(0, total - info.get("MemFree", 0))
    return total, max(0, usage - info.get("Inactive(file)", 0))


def parse_cpu_busy_ns(text: bytes, user_hz: int = USER_HZ) -> int:
    """Busy CPU time of all CPUs since boot, in nanoseconds, from /proc/stat's first ("cpu") line."""
    line = text[: text.find(b"\n")] if b"\n" in text else text
    fields = line.split()
    if not fields or fields[0] != b"cpu" or len(fields) < 9:
        raise ValueError(f"/proc/stat does not start with the cpu line: {line[:80]!r}")
    ticks = sum(int(fields[1 + i]) for i in _BUSY_FIELDS)
    return ticks * 1_000_000_000 // user_hz


__all__ = ["USER_HZ", "meminfo_working_set", "parse_cpu_busy_ns"]
