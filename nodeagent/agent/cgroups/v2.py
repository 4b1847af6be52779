"""The cgroup v2 driver: plain file I/O on the unified hierarchy.

Writes outside the agent root: only `cgroup.subtree_control` of the ancestors between the mount and
the agent root, and only the "+controller" tokens that are missing there and that the kernel offers
(`cgroup.controllers`). That is strictly what v2 needs for cpu.*, memory.* and pids.* files to exist
in our cgroups (a controller is available to a cgroup only if its parent enables it for its
subtree). Nothing is ever disabled, no other file above the root is written, and nothing above the
root is created or removed except the directories of the root itself.
"""

from __future__ import annotations

import errno
import functools
import os

import structlog

from nodeagent.agent.cgroups.common import (
    CgroupError,
    normalize_root,
    read_flat_keyed,
    read_int,
    read_pids,
    read_required_int,
    read_text,
    rmdir_retry,
    signal_until_empty,
    split_rel,
    subdirs,
    validate_spec,
    wait_until,
    walk_top_down,
    write_text,
)
from nodeagent.agent.cgroups.driver import CgroupSpec, CgroupStats, weight_alone_moved
from nodeagent.agent.cgroups.usage import UsageFiles
from nodeagent.core.resources import shares_to_cpu_weight

log = structlog.get_logger(__name__)

WANTED_CONTROLLERS = ("cpu", "memory", "pids")
DEFAULT_CPU_WEIGHT = 100
_NEW_CGROUP_DEFAULTS = {  # what a cgroup reads right after mkdir
    "cpu.weight": str(DEFAULT_CPU_WEIGHT), "cpu.max": "max 100000", "memory.high": "max",
    "memory.max": "max", "memory.swap.max": "max", "pids.max": "max",
}


class CgroupV2Driver:
    """CgroupDriver for a pure cgroup v2 host (or a cgroup namespace / container with its own tree)."""

    version = 2

    def __init__(
        self,
        mount: str = "/sys/fs/cgroup",
        root: str = "/",
        *,
        kill_timeout: float = 5.0,
        remove_timeout: float = 5.0,
    ) -> None:
        self.mount = os.path.abspath(mount)
        self.root = normalize_root(root)
        self.kill_timeout = kill_timeout
        self.remove_timeout = remove_timeout
        self._root_parts = split_rel(self.root)
        self._wanted_cache: set[str] | None = None

    # -- paths ---------------------------------------------------------------------------------

    def _dir(self, path: str) -> str:
        return os.path.join(self.mount, *self._root_parts, *split_rel(path))

    def _guard_not_mount(self, path: str, what: str) -> None:
        if not self._root_parts and not split_rel(path):
            raise ValueError(f"path: refusing to {what} the hierarchy root {self.mount}")

    # -- create / update -----------------------------------------------------------------------

    def create(self, path: str, spec: CgroupSpec) -> None:
        """A cgroup this call made gets only the values that differ from a new cgroup's defaults."""
        validate_spec(spec)
        d = self._dir(path)
        self._prepare_ancestors(d)
        try:
            os.mkdir(d)
        except FileExistsError:
            self._apply(d, spec)
        else:
            self._apply(d, spec, fresh=True)

    def update(self, path: str, spec: CgroupSpec, previous: CgroupSpec | None = None) -> None:
        validate_spec(spec)
        d = self._dir(path)
        if previous is not None and weight_alone_moved(previous, spec):
            if spec.cpu_shares == previous.cpu_shares:
                return
            weight = os.path.join(d, "cpu.weight")
            if os.path.exists(weight):  # only the weight moved: one write (without cpu, _apply warns)
                shares = spec.cpu_shares
                write_text(weight, str(DEFAULT_CPU_WEIGHT if shares is None else shares_to_cpu_weight(shares)))
                return
        if not os.path.isdir(d):
            raise CgroupError(errno.ENOENT, f"update {d}: no such cgroup")
        self._apply(d, spec)

    def _wanted(self) -> set[str]:
        """The wanted controllers this kernel offers at the mount (read once: static per boot)."""
        if self._wanted_cache is None:
            offered = read_text(os.path.join(self.mount, "cgroup.controllers")).split()
            self._wanted_cache = {c for c in WANTED_CONTROLLERS if c in offered}
        return self._wanted_cache

    def _prepare_ancestors(self, d: str) -> None:
        """Top-down from the mount to d's parent: mkdir (below the mount) and enable controllers.

        Fast path: a parent that already receives every wanted controller only needs its own
        subtree_control checked (its ancestors must have enabled them already).
        """
        parent = os.path.dirname(d)
        try:
            available = set(read_text(os.path.join(parent, "cgroup.controllers")).split())
            if self._wanted() <= available:
                self._enable_subtree(parent, available)
                return
        except FileNotFoundError:
            pass
        rel = os.path.relpath(parent, self.mount)
        parts = [] if rel == "." else rel.split(os.sep)
        cur = self.mount
        self._enable_subtree(cur)
        for part in parts:
            cur = os.path.join(cur, part)
            if not os.path.isdir(cur):
                os.mkdir(cur)
            self._enable_subtree(cur)

    def _enable_subtree(self, d: str, available: set[str] | None = None) -> None:
        if available is None:
            try:
                available = set(read_text(os.path.join(d, "cgroup.controllers")).split())
            except FileNotFoundError:  # not a cgroup directory (a fake tree in tests): nothing to do
                return
        enabled = set(read_text(os.path.join(d, "cgroup.subtree_control")).split())
        missing = [c for c in WANTED_CONTROLLERS if c in available and c not in enabled]
        if not missing:
            return
        try:
            write_text(os.path.join(d, "cgroup.subtree_control"), " ".join("+" + c for c in missing))
        except CgroupError as e:
            # EBUSY: the "no internal processes" rule: d holds processes itself.
            raise CgroupError(
                e.errno, f"{e}: cannot enable {missing} in {d} (does it hold processes itself?)"
            ) from e
        log.info("cgroup_controllers_enabled", path=d, controllers=",".join(missing))

    def _apply(self, d: str, spec: CgroupSpec, *, fresh: bool = False) -> None:
        """Write the spec's files; on a `fresh` cgroup skip the values the kernel starts with."""
        shares = spec.cpu_shares
        weight = DEFAULT_CPU_WEIGHT if shares is None else shares_to_cpu_weight(shares)
        quota = "max" if spec.cpu_quota_us is None else str(spec.cpu_quota_us)
        values = [
            ("cpu.weight", str(weight), shares is not None),
            ("cpu.max", f"{quota} {spec.cpu_period_us}", spec.cpu_quota_us is not None),
            ("memory.high", _max(spec.memory_high), spec.memory_high is not None),
            ("memory.max", _max(spec.memory_max), spec.memory_max is not None),
            # no swap under a memory limit (what v1's memsw = limit gives, and the kubelet's
            # NoSwap); unlimited memory leaves swap unlimited too
            ("memory.swap.max", "max" if spec.memory_max is None else "0", False),
            ("pids.max", _max(spec.pids_max), spec.pids_max is not None),
        ]
        for name, value, requested in values:
            if fresh and value == _NEW_CGROUP_DEFAULTS[name]:
                continue
            f = os.path.join(d, name)
            if not os.path.exists(f):
                if requested:  # the kernel does not offer this controller here
                    log.warning("cgroup_controller_unavailable", path=d, file=name, value=value)
                continue
            write_text(f, value)

    # -- queries -------------------------------------------------------------------------------

    def exists(self, path: str) -> bool:
        return os.path.isdir(self._dir(path))

    def children(self, path: str) -> list[str]:
        return subdirs(self._dir(path))

    def procs_files(self, path: str) -> list[str]:
        return [os.path.join(self._dir(path), "cgroup.procs")]

    def add_process(self, path: str, pid: int) -> None:
        write_text(os.path.join(self._dir(path), "cgroup.procs"), str(pid))

    def pids(self, path: str) -> list[int]:
        out: list[int] = []
        for d in walk_top_down(self._dir(path)):
            out.extend(read_pids(os.path.join(d, "cgroup.procs")))
        return sorted(set(out))

    def stats(self, path: str) -> CgroupStats:
        d = self._dir(path)
        if not os.path.isdir(d):
            raise CgroupError(errno.ENOENT, f"stats {d}: no such cgroup")
        mem = read_flat_keyed(os.path.join(d, "memory.stat"))
        events = read_flat_keyed(os.path.join(d, "memory.events"))
        cpu = read_flat_keyed(os.path.join(d, "cpu.stat"))
        return CgroupStats(
            memory_usage=read_int(os.path.join(d, "memory.current")),
            memory_inactive_file=mem.get("inactive_file", 0),
            memory_anon=mem.get("anon", 0),
            memory_file=mem.get("file", 0),
            oom_events=events.get("oom", 0),
            oom_kills=events.get("oom_kill", 0),
            cpu_usage_usec=cpu.get("usage_usec", 0),
            cpu_nr_throttled=cpu.get("nr_throttled", 0),
            cpu_throttled_usec=cpu.get("throttled_usec", 0),
            pids_current=read_int(os.path.join(d, "pids.current")),
            extra={
                "memory_events_low": events.get("low", 0),
                "memory_events_high": events.get("high", 0),
                "memory_events_max": events.get("max", 0),
                "cpu_nr_periods": cpu.get("nr_periods", 0),
            },
        )

    def memory_usage(self, path: str) -> tuple[int, int]:
        """(usage, inactive file) bytes: what memory eviction needs, in two file reads."""
        d = self._dir(path)
        usage = read_required_int(os.path.join(d, "memory.current"), f"memory_usage {d}")
        return usage, read_flat_keyed(os.path.join(d, "memory.stat")).get("inactive_file", 0)

    def usage_files(self, path: str) -> UsageFiles:
        d = self._dir(path)
        return UsageFiles(version=2, cpu=os.path.join(d, "cpu.stat"), memory=os.path.join(d, "memory.current"),
                          memory_stat=os.path.join(d, "memory.stat"))

    def memory_dir(self, path: str) -> str:
        return self._dir(path)

    def hierarchy(self, controller: str) -> str | None:
        try:
            offered = read_text(os.path.join(self.mount, "cgroup.controllers")).split()
        except FileNotFoundError:
            return None
        return self.mount if controller in offered else None

    def oom_kill_count(self, path: str) -> int:
        d = self._dir(path)
        if not os.path.isdir(d):
            raise CgroupError(errno.ENOENT, f"oom_kill_count {d}: no such cgroup")
        return read_flat_keyed(os.path.join(d, "memory.events")).get("oom_kill", 0)

    # -- kill / remove -------------------------------------------------------------------------

    def kill(self, path: str) -> None:
        """SIGKILL the subtree (cgroup.kill, or per-PID on kernels < 5.14); wait, bounded, for it to empty."""
        d = self._dir(path)
        self._guard_not_mount(path, "kill")
        if not os.path.isdir(d):
            return
        kill_file = os.path.join(d, "cgroup.kill")
        if os.path.exists(kill_file):
            write_text(kill_file, "1")  # the kernel also catches tasks forking meanwhile
            if wait_until(lambda: not self.pids(path), self.kill_timeout):
                return
        elif signal_until_empty(lambda: self.pids(path), self.kill_timeout):
            return
        log.warning("cgroup_kill_timeout", path=d, remaining=self.pids(path))

    def remove(self, path: str) -> None:
        d = self._dir(path)
        self._guard_not_mount(path, "remove")
        if not os.path.isdir(d):
            return
        for sub in reversed(list(walk_top_down(d))):
            rmdir_retry(sub, self.remove_timeout, functools.partial(_describe_busy, sub))


def _max(value: int | None) -> str:
    return "max" if value is None else str(value)


def _describe_busy(d: str) -> str:
    pids = read_pids(os.path.join(d, "cgroup.procs"))
    return f"processes still inside: {pids}" if pids else ""

