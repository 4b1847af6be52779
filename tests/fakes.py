"""Test doubles shared by unit tests.

FakeCgroupDriver keeps a cgroup tree in memory. Its procs_files() is [], so the process runtime
starts real (short) processes without joining any cgroup: pod-manager tests run real commands
as an ordinary user would, while the tree records what the agent asked the kernel for.
"""

from __future__ import annotations

import errno

from nodeagent.agent.cgroups.common import normalize_root, split_rel, validate_spec
from nodeagent.agent.cgroups.driver import CgroupSpec, CgroupStats


class FakeCgroupDriver:
    """An in-memory CgroupDriver: paths -> specs, plus a log of kills and removals.

    tests/cgroup_conformance.py runs the same cases against it as against the real drivers.
    """

    version = 2
    CONTROLLERS = ("cpu", "memory", "pids")
    MOUNT = "/fake-cgroupfs"  # never touched: memory_dir() and hierarchy() only name it

    def __init__(self, root: str = "/") -> None:
        self.root = normalize_root(root)
        self.specs: dict[str, CgroupSpec] = {}
        self.killed: list[str] = []
        self.removed: list[str] = []
        self.fail_create: set[str] = set()  # paths whose create() raises OSError
        self.oom_kills: dict[str, int] = {}

    @staticmethod
    def _key(path: str) -> str:
        return "/".join(split_rel(path))

    def _subtree(self, key: str) -> list[str]:
        return [p for p in self.specs if p == key or p.startswith(key + "/")] if key else list(self.specs)

    def create(self, path: str, spec: CgroupSpec) -> None:
        validate_spec(spec)
        key = self._key(path)
        if key in self.fail_create:
            raise OSError(errno.EACCES, f"create {key}: refused by the test")
        parts = key.split("/")
        for i in range(1, len(parts)):
            self.specs.setdefault("/".join(parts[:i]), CgroupSpec())
        self.specs[key] = spec

    def update(self, path: str, spec: CgroupSpec) -> None:
        validate_spec(spec)
        key = self._key(path)
        if key not in self.specs:
            raise OSError(errno.ENOENT, f"update {key}: no such cgroup")
        self.specs[key] = spec

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
        self.removed.append(key)

    def procs_files(self, path: str) -> list[str]:
        return []

    def add_process(self, path: str, pid: int) -> None:
        raise OSError(errno.EPERM, "the fake driver holds no processes")

    def pids(self, path: str) -> list[int]:
        return []

    def stats(self, path: str) -> CgroupStats:
        key = self._key(path)
        if key not in self.specs:
            raise OSError(errno.ENOENT, f"stats {key}: no such cgroup")
        return CgroupStats(oom_kills=sum(self.oom_kills.get(p, 0) for p in self._subtree(key)))

    def memory_usage(self, path: str) -> tuple[int, int]:
        self.stats(path)  # the same errors
        return 0, 0

    def oom_kill_count(self, path: str) -> int:
        return self.stats(path).oom_kills

    def memory_dir(self, path: str) -> str:
        return "/".join(p for p in (self.MOUNT, self.root.strip("/"), self._key(path)) if p)

    def hierarchy(self, controller: str) -> str | None:
        return self.MOUNT if controller in self.CONTROLLERS else None  # one unified hierarchy, as v2

    def kill(self, path: str) -> None:
        self._guard_not_mount(path, "kill")
        self.killed.append(self._key(path))

    def children(self, path: str) -> list[str]:
        key = self._key(path)
        prefix = key + "/" if key else ""
        return sorted({p[len(prefix):].split("/")[0] for p in self.specs
                       if p.startswith(prefix) and p != key})
