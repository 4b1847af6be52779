"""What the kernel says, read without the agent's code: processes in /proc and cgroup files.

Cgroup files are located from the driver's mounts and the documented layout
(kubepods/<qos>/pod<uid>/<container>), and their values checked against the kubelet's formulas.
"""

from __future__ import annotations

import os
from pathlib import Path

from nodeagent.agent.cgroups.driver import CgroupDriver
from nodeagent.agent.cgroups.v1 import CONTROLLERS as V1_CONTROLLERS
from nodeagent.core.resources import shares_to_cpu_weight

PAGE = os.sysconf("SC_PAGE_SIZE")
V1_UNLIMITED = 1 << 62  # v1 reads "no limit" as 9223372036854771712


# ---- processes ----


def proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in ticks) of a process, None if there is no such PID."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return None
    rest = data[data.rindex(b")") + 2 :].split()
    return rest[0].decode(), int(rest[22 - 3])


def is_running(pid: int, start_time: int | None = None) -> bool:
    """Alive (not a zombie) and, when given, still the process that had `start_time`."""
    st = proc_stat(pid)
    return st is not None and st[0] != "Z" and (start_time is None or st[1] == start_time)


PF_EXITING = 0x4  # include/linux/sched.h: the task is in its exit path
def exe_of(pid: int) -> str:
    """The program `pid` runs, or "" once it is gone (a container's short-lived children exit between
    reading cgroup.procs and this)."""
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return ""


SIGKILL_BIT = 1 << 8  # SIGKILL (9) in the pending masks of /proc/<pid>/status


def is_dying(pid: int) -> bool:
    """Sent SIGKILL or already exiting, though not yet a zombie: a large process keeps its state R
    or D for tens of milliseconds while the kernel frees its memory."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    flags = int(stat[stat.rindex(b")") + 2 :].split()[9 - 3])
    pending = 0
    for line in status.splitlines():
        if line.startswith(("SigPnd:", "ShdPnd:")):
            pending |= int(line.split()[1], 16)
    return bool(flags & PF_EXITING or pending & SIGKILL_BIT)


def container_id_parts(container_id: str) -> tuple[int, int]:
    """nodeagent://<pid>@<start time> -> (pid, start time)."""
    prefix = "nodeagent://"
    assert container_id.startswith(prefix), container_id
    pid, start = container_id[len(prefix) :].split("@")
    return int(pid), int(start)


# ---- cgroup files, located independently of the driver ----


class CgroupFiles:
    """Reads kernel interface files of `<mount>/<root>/<path>` for this kernel's cgroup version."""

    def __init__(self, driver: CgroupDriver) -> None:
        self.version = driver.version
        self.root = driver.root.strip("/")
        if self.version == 2:
            self.bases = {"": str(driver.hierarchy("memory"))}
        else:
            self.bases = {c: base for c in V1_CONTROLLERS if (base := driver.hierarchy(c)) is not None}

    def dir(self, path: str, controller: str = "memory") -> str:
        base = self.bases[""] if self.version == 2 else self.bases[controller]
        return os.path.join(base, self.root, path.strip("/")).rstrip("/")

    def read(self, path: str, controller: str, name: str) -> str:
        return Path(self.dir(path, controller), name).read_text().strip()

    def keyed(self, path: str, controller: str, name: str) -> dict[str, int]:
        out = {}
        for line in self.read(path, controller, name).splitlines():
            key, value = line.split()
            out[key] = int(value)
        return out

    def exists(self, path: str) -> list[str]:
        """The directories of `path` that exist (one per hierarchy on v1)."""
        dirs = {self.dir(path, c) for c in self.bases}
        return sorted(d for d in dirs if os.path.isdir(d))

    def pids(self, path: str, controller: str = "memory") -> set[int]:
        """Every PID in the cgroup and its descendants."""
        out: set[int] = set()
        for d, _subdirs, _files in os.walk(self.dir(path, controller)):
            try:
                out.update(int(x) for x in Path(d, "cgroup.procs").read_text().split())
            except FileNotFoundError:
                pass
        return out

    def cpu_usage_usec(self, path: str) -> int:
        if self.version == 2:
            return self.keyed(path, "cpu", "cpu.stat")["usage_usec"]
        return int(self.read(path, "cpuacct", "cpuacct.usage")) // 1000

    def nr_throttled(self, path: str) -> int:
        return self.keyed(path, "cpu", "cpu.stat")["nr_throttled"]

    def oom_kills(self, path: str) -> int:
        if self.version == 2:
            return self.keyed(path, "memory", "memory.events")["oom_kill"]
        return self.keyed(path, "memory", "memory.oom_control").get("oom_kill", 0)


# ---- expected values ----


def page_floor(n: int) -> int:
    """Memory limits are kept in pages: the kernel rounds a written byte count down."""
    return n - n % PAGE


def expect_cpu(cg: CgroupFiles, path: str, shares: int, quota: int | None) -> None:
    """v1 cpu.shares and cfs quota/period; v2 cpu.weight (quadratic map of the shares) and cpu.max."""
    if cg.version == 2:
        assert cg.read(path, "cpu", "cpu.weight") == str(shares_to_cpu_weight(shares)), path
        assert cg.read(path, "cpu", "cpu.max") == f"{'max' if quota is None else quota} 100000", path
    else:
        assert int(cg.read(path, "cpu", "cpu.shares")) == shares, path
        assert int(cg.read(path, "cpu", "cpu.cfs_quota_us")) == (-1 if quota is None else quota), path
        assert int(cg.read(path, "cpu", "cpu.cfs_period_us")) == 100000, path


def cpu_is(cg: CgroupFiles, path: str, shares: int, quota: int | None) -> bool:
    """expect_cpu as a predicate, for polling."""
    try:
        expect_cpu(cg, path, shares, quota)
    except AssertionError:
        return False
    return True


def expect_memory(cg: CgroupFiles, path: str, limit: int | None) -> None:
    """v2 memory.max / v1 memory.limit_in_bytes; None means no limit."""
    name = "memory.max" if cg.version == 2 else "memory.limit_in_bytes"
    text = cg.read(path, "memory", name)
    if limit is None:
        unlimited = text == "max" if cg.version == 2 else int(text) >= V1_UNLIMITED
        assert unlimited, (path, text)
    else:
        assert int(text) == page_floor(limit), (path, text)
