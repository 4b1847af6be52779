"""What /proc says: about processes (start time and parent from /proc/<pid>/stat, our
capabilities and our own oom_score_adj), boot time, and memory (/proc/meminfo parsed). The one
parser of these files in the agent."""

from __future__ import annotations

import os
import re
from functools import lru_cache

CAP_SYS_RESOURCE = 24
PROC_MEMINFO = "/proc/meminfo"
PROC_PID_MAX = "/proc/sys/kernel/pid_max"


def parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo as bytes per key ("kB" values multiplied out)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            out[key] = int(parts[0]) * (1024 if len(parts) > 1 and parts[1].lower() == "kb" else 1)
    return out


_WORKING_SET_KEYS = re.compile(rb"^(MemTotal|MemFree|Inactive\(file\)):[ \t]+([0-9]+) kB$", re.MULTILINE)


def parse_meminfo_working_set(data: bytes) -> dict[str, int]:
    """MemTotal, MemFree and Inactive(file) alone, in bytes: what memory.available needs."""
    return {k.decode(): int(v) * 1024 for k, v in _WORKING_SET_KEYS.findall(data)}


class MeminfoReader:
    """/proc/meminfo on a descriptor kept open, read with one pread and only the working-set keys
    parsed: every eviction pass and every look near the line reads it, and in the 1-CPU UML
    guest the open and the whole-file parse cost ~0.6 ms against ~0.07 ms for the read alone
    (bench/README.md, "The memory look")."""

    def __init__(self, path: str = PROC_MEMINFO) -> None:
        self.path = path
        self._fd: int | None = None

    def read(self) -> dict[str, int]:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            data = os.pread(self._fd, 1 << 16, 0)
        except OSError:  # never expected of procfs; a fresh descriptor next time
            self.close()
            raise
        return parse_meminfo_working_set(data)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _stat_fields(pid: int) -> list[bytes] | None:
    """Fields 3.. of /proc/<pid>/stat; None if there is no such process.

    comm (field 2) may contain spaces and ')': the fields after the last ')' start at field 3.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return data[data.rindex(b")") + 2 :].split()


def process_start_time(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat (start time in clock ticks since boot); None if no such process."""
    fields = _stat_fields(pid)
    return int(fields[22 - 3]) if fields is not None else None


def parent_pid(pid: int) -> int | None:
    """Field 4 of /proc/<pid>/stat; None if no such process."""
    fields = _stat_fields(pid)
    return int(fields[4 - 3]) if fields is not None else None


def session_id(pid: int) -> int | None:
    """Field 6 of /proc/<pid>/stat; None if no such process."""
    fields = _stat_fields(pid)
    return int(fields[6 - 3]) if fields is not None else None


def is_same_process(pid: int, start_time: int) -> bool:
    """True while `pid` still names the process that had `start_time` (PIDs get reused)."""
    return process_start_time(pid) == start_time


def boot_time() -> float:
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("btime "):
                return float(line.split()[1])
    raise RuntimeError("no btime in /proc/stat")


def start_time_to_wall(start_time: int) -> float:
    """Epoch seconds of a /proc start time (clock ticks since boot)."""
    return boot_time() + start_time / os.sysconf("SC_CLK_TCK")


def has_capability(cap: int, status_text: str) -> bool:
    """Whether the CapEff line of a /proc/<pid>/status text holds capability number `cap`."""
    for line in status_text.splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> cap & 1)
    return False


@lru_cache(maxsize=1)
def _own_status() -> str:
    try:
        with open("/proc/self/status") as f:
            return f.read()
    except OSError:
        return ""


def has_cap_sys_resource(status_text: str | None = None) -> bool:
    """Whether we (or the status text given) hold CAP_SYS_RESOURCE: it lets us lower an
    oom_score_adj below the inherited minimum and write PSI triggers with short windows."""
    return has_capability(CAP_SYS_RESOURCE, _own_status() if status_text is None else status_text)


def own_oom_score_adj() -> int:
    with open("/proc/self/oom_score_adj") as f:
        return int(f.read())
