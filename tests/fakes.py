"""Test doubles shared by unit tests.

FakeCgroupDriver keeps a cgroup tree in memory. Its procs_files() is [], so the process runtime
starts real (short) processes without joining any cgroup: pod-manager tests run real commands
as an ordinary user would, while the tree records what the agent asked the kernel for. A pid
given to add_process() is only recorded (pids() lists it, kill() and remove() forget it): the
process itself is never moved or signalled.

Given a `usage_tree` directory, its usage_files() name v2-shaped files there (cpu.stat,
memory.current, memory.stat per cgroup) that a test writes with set_usage(): the resource-metrics
reader then reads real files laid out like cgroupfs.
"""

from __future__ import annotations

import errno
import os

from nodeagent.agent.cgroups.common import normalize_root, split_rel, validate_spec
from nodeagent.agent.cgroups.driver import CgroupSpec, CgroupStats
from nodeagent.agent.cgroups.usage import UsageFiles


class FakeCgroupDriver:
    """An in-memory CgroupDriver: paths -> specs, plus a log of kills and removals.

    tests/cgroup_conformance.py runs the same cases against it as against the real drivers.
    """

    version = 2
    CONTROLLERS = ("cpu", "memory", "pids")
    MOUNT = "/fake-cgroupfs"  # never touched: memory_dir() and hierarchy() only name it

    def __init__(self, root: str = "/", usage_tree: str | None = None) -> None:
        self.root = normalize_root(root)
        self.usage_tree = usage_tree or "/fake-cgroupfs/unified"
        self.specs: dict[str, CgroupSpec] = {}
        self.killed: list[str] = []
        self.removed: list[str] = []
        self.fail_create: set[str] = set()  # paths whose create() raises OSError
        self.oom_kills: dict[str, int] = {}
        self.procs: dict[str, set[int]] = {}  # add_process(): recorded, not moved
        self.memory: dict[str, tuple[int, int]] = {}  # memory_usage() per path: (usage, inactive file), else 0s
        self.updates: list[tuple[str, CgroupSpec]] = []  # every update(), in order
        self.refuse_memory_below_usage = False  # as cgroup v1: a memory limit under the usage is EBUSY

    @staticmethod
    def _key(path: str) -> str:
        return "/".join(split_rel(path))

    def _subtree(self, key: str) -> list[str]:
        return [p for p in self.specs if p == key or p.startswith(key + "/")] if key else list(self.specs)

    def _forget_procs(self, key: str) -> None:
        for p in [p for p in self.procs if not key or p == key or p.startswith(key + "/")]:
            del self.procs[p]

    def create(self, path: str, spec: CgroupSpec) -> None:
        validate_spec(spec)
        key = self._key(path)
        if key in self.fail_create:
            raise OSError(errno.EACCES, f"create {key}: refused by the test")
        parts = key.split("/")
        for i in range(1, len(parts)):
            self.specs.setdefault("/".join(parts[:i]), CgroupSpec())
        self.specs[key] = spec

    def update(self, path: str, spec: CgroupSpec, previous: CgroupSpec | None = None) -> None:
        validate_spec(spec)
        key = self._key(path)
        if key not in self.specs:
            raise OSError(errno.ENOENT, f"update {key}: no such cgroup")
        usage = self.memory.get(key, (0, 0))[0]
        if self.refuse_memory_below_usage and spec.memory_max is not None and spec.memory_max < usage:
            raise OSError(errno.EBUSY, f"update {key}: memory limit {spec.memory_max} below usage {usage}")
        self.specs[key] = spec
        self.updates.append((key, spec))

    def exists(self, path: str) -> bool:
        key = self._key(path)
        return key == "" or key in self.specs

    def _guard_not_mount(self, path: str, what: str) -> None:
        if self.root == "/" and not self._key(path):
            raise ValueError(f"path: refusing to {what} the hierarchy root")

    def remove(self, path: str) -> None:
        self._guard_not_mount(path, "remove")
        key = self._key(path)
        for p in self._subtree(key):
            del self.specs[p]
        self._forget_procs(key)
        self.removed.append(key)

    def procs_files(self, path: str) -> list[str]:
        return []

    def add_process(self, path: str, pid: int) -> None:
        key = self._key(path)
        if not self.exists(key):
            raise OSError(errno.ENOENT, f"add_process {key}: no such cgroup")
        self.procs.setdefault(key, set()).add(pid)

    def pids(self, path: str) -> list[int]:
        key = self._key(path)
        return sorted({pid for p, pids in self.procs.items() if not key or p == key or p.startswith(key + "/")
                       for pid in pids})

    def stats(self, path: str) -> CgroupStats:
        key = self._key(path)
        if key not in self.specs:
            raise OSError(errno.ENOENT, f"stats {key}: no such cgroup")
        return CgroupStats(oom_kills=sum(self.oom_kills.get(p, 0) for p in self._subtree(key)))

    def memory_usage(self, path: str) -> tuple[int, int]:
        self.stats(path)  # the same errors
        return self.memory.get(self._key(path), (0, 0))

    def oom_kill_count(self, path: str) -> int:
        return self.stats(path).oom_kills

    def usage_files(self, path: str) -> UsageFiles:
        d = os.path.join(self.usage_tree, *split_rel(path))
        return UsageFiles(version=2, cpu=os.path.join(d, "cpu.stat"), memory=os.path.join(d, "memory.current"),
                          memory_stat=os.path.join(d, "memory.stat"))

    def set_usage(self, path: str, *, cpu_usec: int = 0, memory: int = 0, inactive_file: int = 0, anon: int = 0,
                  pgfault: int = 0, pgmajfault: int = 0) -> None:
        """Write the usage files of `path` under usage_tree as the v2 kernel lays them out."""
        files = self.usage_files(path)
        os.makedirs(os.path.dirname(files.memory), exist_ok=True)
        assert files.cpu is not None
        with open(files.cpu, "w") as f:
            f.write(f"usage_usec {cpu_usec}\nuser_usec {cpu_usec // 2}\nsystem_usec {cpu_usec - cpu_usec // 2}\n"
                    "nr_periods 0\nnr_throttled 0\nthrottled_usec 0\n")
        with open(files.memory, "w") as f:
            f.write(f"{memory}\n")
        with open(files.memory_stat, "w") as f:
            f.write(f"anon {anon}\nfile {max(0, memory - anon)}\nkernel 4096\nactive_anon {anon}\n"
                    f"inactive_anon 0\nactive_file 0\ninactive_file {inactive_file}\n"
                    f"pgfault {pgfault}\npgmajfault {pgmajfault}\n")

    def memory_dir(self, path: str) -> str:
        return "/".join(p for p in (self.MOUNT, self.root.strip("/"), self._key(path)) if p)

    def hierarchy(self, controller: str) -> str | None:
        return self.MOUNT if controller in self.CONTROLLERS else None  # one unified hierarchy, as v2

    def kill(self, path: str) -> None:
        self._guard_not_mount(path, "kill")
        self._forget_procs(self._key(path))
        self.killed.append(self._key(path))

    def children(self, path: str) -> list[str]:
        key = self._key(path)
        prefix = key + "/" if key else ""
        return sorted({p[len(prefix):].split("/")[0] for p in self.specs
                       if p.startswith(prefix) and p != key})
