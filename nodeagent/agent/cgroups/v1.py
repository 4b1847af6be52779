"""The cgroup v1 driver, for legacy and hybrid hosts, built on cgroupspy.

Hierarchies used: cpu, cpuacct (co-mounted or separate), memory, pids. A path lives in each of them
under the same relative name. What comes from cgroupspy: the Node chain for navigation,
`Node.create_cgroup` / `Node.delete_cgroup`, the post-order `Node.walk_up`, and the typed controller
attributes (cpu.shares, cpu.cfs_*, cpu.stat, cpuacct.usage, memory.limit_in_bytes,
memory.memsw.limit_in_bytes, memory.usage_in_bytes, memory.stat, memory.oom_control, cgroup.procs).
Plain file I/O where cgroupspy has nothing: the whole pids controller (no PidsController), and the
retry loop around rmdir (its delete_cgroup gives up on the first EBUSY). cgroupspy's Tree is not
used: it walks the whole hierarchy on construction, which is too slow per call.
"""

from __future__ import annotations

import errno
import functools
import os
import time
from collections.abc import Iterator, Mapping

import structlog
from cgroupspy.nodes import Node

from nodeagent.agent.cgroups.common import (
    DEFAULT_SHARES,
    CgroupError,
    normalize_root,
    read_flat_keyed,
    read_int,
    read_required_int,
    rmdir_retry,
    signal_until_empty,
    split_rel,
    subdirs,
    validate_spec,
    walk_top_down,
    write_text,
)
from nodeagent.agent.cgroups.driver import CgroupSpec, CgroupStats, weight_alone_moved
from nodeagent.agent.cgroups.usage import UsageFiles

log = structlog.get_logger(__name__)

CONTROLLERS = ("cpu", "cpuacct", "memory", "pids")
DEFAULT_PERIOD_US = 100_000  # cpu.cfs_period_us of a new cgroup
LOWER_RETRIES = 5  # memory.limit_in_bytes below usage: the kernel reclaims, then says EBUSY


class CgroupV1Driver:
    """CgroupDriver for cgroup v1: one directory per hierarchy for each cgroup path."""

    version = 1

    def __init__(
        self,
        mount: str = "/sys/fs/cgroup",
        root: str = "/",
        *,
        hierarchies: Mapping[str, str] | None = None,
        kill_timeout: float = 5.0,
        remove_timeout: float = 5.0,
    ) -> None:
        """`hierarchies` maps controller -> its mount point (from /proc/self/mounts, see detect.py);
        by default `<mount>/<controller>` for each controller directory that exists."""
        self.mount = os.path.abspath(mount)
        self.root = normalize_root(root)
        self.kill_timeout = kill_timeout
        self.remove_timeout = remove_timeout
        if hierarchies is None:
            hierarchies = {
                c: os.path.join(self.mount, c)
                for c in CONTROLLERS
                if os.path.isdir(os.path.join(self.mount, c))
            }
        self.hierarchies = {c: os.path.abspath(m) for c, m in hierarchies.items() if c in CONTROLLERS}
        if "memory" not in self.hierarchies:
            raise ValueError(f"cgroup v1: no memory hierarchy among {dict(hierarchies)}")
        self._root_parts = split_rel(self.root)
        # one directory tree per distinct mount (cpu and cpuacct may share one)
        self._mounts = sorted(set(self.hierarchies.values()))

    # -- navigation ----------------------------------------------------------------------------

    def _parts(self, path: str) -> list[str]:
        return [*self._root_parts, *split_rel(path)]

    def _node(self, controller: str, path: str) -> Node:
        """A cgroupspy Node for `path` in the hierarchy of `controller`, with its controller set.

        Built as a chain (no filesystem walk); the controller is forced on the hierarchy root since
        cgroupspy only recognises a mount named exactly after one controller.
        """
        mount = self.hierarchies[controller]
        top = Node(os.path.dirname(mount).encode())
        node = Node(os.path.basename(mount).encode(), parent=top)
        key = controller.encode()
        if node.controller_type != key and key in Node.CONTROLLERS:
            node.controller_type = key
            node.controller = Node.CONTROLLERS[key](node)
        for part in self._parts(path):
            node = Node(part.encode(), parent=node)
        return node

    def _dirs(self, path: str) -> list[str]:
        parts = self._parts(path)
        return [os.path.join(m, *parts) for m in self._mounts]

    def _guard_not_mount(self, path: str, what: str) -> None:
        if not self._parts(path):
            raise ValueError(f"path: refusing to {what} the hierarchy roots {self._mounts}")

    # -- create / update -----------------------------------------------------------------------

    def create(self, path: str, spec: CgroupSpec) -> None:
        """mkdir the leaf in each hierarchy (the ancestors only when one is missing); a cgroup
        this call made gets only the values that differ from a new cgroup's kernel defaults,
        written straight to the files (no reads): pod start pays ~4 syscalls per hierarchy."""
        validate_spec(spec)
        parts = self._parts(path)
        fresh = True
        for mount in self._mounts:
            try:
                os.mkdir(os.path.join(mount, *parts))
            except FileExistsError:
                fresh = False
            except FileNotFoundError:  # an ancestor is missing: make the chain
                parent = Node(mount.encode())
                for part in parts:  # cgroupspy's create_cgroup tolerates EEXIST
                    parent = parent.create_cgroup(part)
        if fresh:
            self._apply_fresh(parts, spec)
        else:
            self._apply(path, spec)

    def _apply_fresh(self, parts: list[str], spec: CgroupSpec) -> None:
        """A new v1 cgroup starts at cpu.shares 1024, no cfs quota, period 100 ms, no memory or
        memsw limit, pids.max max: write only what differs, in an order the kernel accepts."""
        def put(controller: str, name: str, value: object) -> None:
            write_text(os.path.join(self.hierarchies[controller], *parts, name), str(value))

        if "cpu" in self.hierarchies:
            if spec.cpu_shares is not None and spec.cpu_shares != DEFAULT_SHARES:
                put("cpu", "cpu.shares", spec.cpu_shares)
            if spec.cpu_period_us != DEFAULT_PERIOD_US:
                put("cpu", "cpu.cfs_period_us", spec.cpu_period_us)
            if spec.cpu_quota_us is not None:
                put("cpu", "cpu.cfs_quota_us", spec.cpu_quota_us)
        elif spec.cpu_shares is not None or spec.cpu_quota_us is not None:
            log.warning("cgroup_controller_unavailable", path="/".join(parts), controller="cpu")
        if spec.memory_max is not None:  # lowering from unlimited: limit first, then memsw
            put("memory", "memory.limit_in_bytes", spec.memory_max)
            memsw = os.path.join(self.hierarchies["memory"], *parts, "memory.memsw.limit_in_bytes")
            if os.path.exists(memsw):
                write_text(memsw, str(spec.memory_max))
        if spec.pids_max is not None:
            if "pids" in self.hierarchies:
                put("pids", "pids.max", spec.pids_max)
            else:
                log.warning("cgroup_controller_unavailable", path="/".join(parts), controller="pids")

    def update(self, path: str, spec: CgroupSpec, previous: CgroupSpec | None = None) -> None:
        validate_spec(spec)
        if previous is not None and "cpu" in self.hierarchies and weight_alone_moved(previous, spec):
            if spec.cpu_shares != previous.cpu_shares:  # only the weight moved: one write (ENOENT if gone)
                shares = DEFAULT_SHARES if spec.cpu_shares is None else spec.cpu_shares
                write_text(os.path.join(self.hierarchies["cpu"], *self._parts(path), "cpu.shares"), str(shares))
            return
        if not self.exists(path):
            raise CgroupError(errno.ENOENT, f"update {path}: no such cgroup")
        self._apply(path, spec)

    def _apply(self, path: str, spec: CgroupSpec) -> None:
        if "cpu" in self.hierarchies:
            cpu = self._node("cpu", path).controller
            cpu.shares = DEFAULT_SHARES if spec.cpu_shares is None else spec.cpu_shares
            if cpu.cfs_period_us != spec.cpu_period_us:
                # quota/period is checked against the parent at each write: lift the quota
                # while the period changes so no intermediate ratio is refused
                cpu.cfs_quota_us = None
                cpu.cfs_period_us = spec.cpu_period_us
            cpu.cfs_quota_us = spec.cpu_quota_us  # None is written as -1: unlimited
        elif spec.cpu_shares is not None or spec.cpu_quota_us is not None:
            log.warning("cgroup_controller_unavailable", path=path, controller="cpu")
        self._set_memory_limit(path, spec.memory_max)
        # memory_high has no v1 equivalent (soft_limit_in_bytes means something else): ignored.
        if "pids" in self.hierarchies:  # cgroupspy has no pids controller: plain file I/O
            pids_dir = os.path.join(self.hierarchies["pids"], *self._parts(path))
            write_text(os.path.join(pids_dir, "pids.max"), _max(spec.pids_max))
        elif spec.pids_max is not None:
            log.warning("cgroup_controller_unavailable", path=path, controller="pids")

    def _set_memory_limit(self, path: str, limit: int | None) -> None:
        """memory.limit_in_bytes (None -> -1) and, with swap accounting, memsw kept equal to it.

        The kernel requires limit <= memsw limit at every step, so memsw goes first when raising
        and last when lowering (as runc does); memsw = limit means no swap, as the kubelet sets
        for v1 with swap disabled. Lowering below usage makes the kernel reclaim and, failing
        that, answer EBUSY (v1 never OOM-kills on a limit write): retried a few times, then raised.
        """
        mem = self._node("memory", path).controller
        has_memsw = os.path.exists(mem.filepath(b"memory.memsw.limit_in_bytes"))
        current = mem.limit_in_bytes  # cgroupspy: -1 reads as None; "unlimited" is a huge number
        target = limit
        raising = target is None or (current is not None and target > current)
        for attempt in range(LOWER_RETRIES):
            try:
                if has_memsw and raising:
                    mem.memsw_limit_in_bytes = target
                mem.limit_in_bytes = target
                if has_memsw and not raising:
                    mem.memsw_limit_in_bytes = target
                return
            except OSError as e:
                if e.errno != errno.EBUSY or attempt == LOWER_RETRIES - 1:
                    usage = mem.usage_in_bytes
                    raise CgroupError(
                        e.errno,
                        f"memory.limit_in_bytes={target} for {path}: {os.strerror(e.errno or 0)}"
                        f" (usage {usage})",
                    ) from e
                time.sleep(0.05)

    # -- queries -------------------------------------------------------------------------------

    def exists(self, path: str) -> bool:
        return all(os.path.isdir(d) for d in self._dirs(path))

    def children(self, path: str) -> list[str]:
        """The child cgroups in any hierarchy: one a crash left half-made (between the mkdirs of
        a create or the rmdirs of a remove) is in some of them only, and still a child."""
        parts = self._parts(path)
        return sorted({name for mount in self._mounts for name in subdirs(os.path.join(mount, *parts))})

    def procs_files(self, path: str) -> list[str]:
        return [os.path.join(d, "cgroup.procs") for d in self._dirs(path)]

    def add_process(self, path: str, pid: int) -> None:
        for f in self.procs_files(path):
            write_text(f, str(pid))

    def _walk(self, controller: str, path: str) -> Iterator[Node]:
        """Every Node of the subtree, children before parents (cgroupspy's walk_up)."""
        node = self._node(controller, path)
        _load_children(node)
        nodes: Iterator[Node] = node.walk_up()
        return nodes

    def pids(self, path: str) -> list[int]:
        """Union over the hierarchies: a task half-way through joining is still found."""
        out: set[int] = set()
        for controller in self._distinct_controllers():
            for node in self._walk(controller, path):
                out.update(_procs(node))
        return sorted(out)

    def _distinct_controllers(self) -> list[str]:
        seen: dict[str, str] = {}
        for c in CONTROLLERS:
            if c in self.hierarchies:
                seen.setdefault(self.hierarchies[c], c)
        return list(seen.values())

    def stats(self, path: str) -> CgroupStats:
        if not self.exists(path):
            raise CgroupError(errno.ENOENT, f"stats {path}: no such cgroup")
        mem = self._node("memory", path).controller
        mstat: dict[str, int] = mem.stat
        # oom_kill counts at the victim's own memcg on v1: sum the subtree to match v2's
        # hierarchical memory.events.
        oom_kills = sum(_oom_kill(n) for n in self._walk("memory", path))
        oom = mem.oom_control
        usage_usec = nr_throttled = throttled_usec = nr_periods = 0
        if "cpuacct" in self.hierarchies:
            usage_usec = (self._node("cpuacct", path).controller.usage or 0) // 1000
        if "cpu" in self.hierarchies:
            cstat: dict[str, int] = self._node("cpu", path).controller.stat
            nr_throttled = cstat.get("nr_throttled", 0)
            throttled_usec = cstat.get("throttled_time", 0) // 1000
            nr_periods = cstat.get("nr_periods", 0)
        pids_current = 0
        if "pids" in self.hierarchies:
            pids_dir = os.path.join(self.hierarchies["pids"], *self._parts(path))
            pids_current = read_int(os.path.join(pids_dir, "pids.current"))
        return CgroupStats(
            memory_usage=mem.usage_in_bytes or 0,
            memory_inactive_file=mstat.get("total_inactive_file", 0),
            memory_anon=mstat.get("total_rss", mstat.get("total_anon", 0)),
            memory_file=mstat.get("total_cache", 0),
            oom_events=0,
            oom_kills=oom_kills,
            cpu_usage_usec=usage_usec,
            cpu_nr_throttled=nr_throttled,
            cpu_throttled_usec=throttled_usec,
            pids_current=pids_current,
            extra={
                "memory_under_oom": int(oom.get("under_oom", 0)) if isinstance(oom, dict) else 0,
                "memory_failcnt": mem.failcnt or 0,
                "cpu_nr_periods": nr_periods,
            },
        )

    def memory_usage(self, path: str) -> tuple[int, int]:
        """(usage, inactive file) bytes: what memory eviction needs, in two file reads (stats()
        also walks the whole subtree for oom_kill, O(pods) on kubepods)."""
        d = self.memory_dir(path)
        usage = read_required_int(os.path.join(d, "memory.usage_in_bytes"), f"memory_usage {path}")
        return usage, read_flat_keyed(os.path.join(d, "memory.stat")).get("total_inactive_file", 0)

    def usage_files(self, path: str) -> UsageFiles:
        """cpuacct.usage (nanoseconds) where a cpuacct hierarchy is mounted, else no CPU figure."""
        parts = self._parts(path)
        mem = os.path.join(self.hierarchies["memory"], *parts)
        acct = self.hierarchies.get("cpuacct")
        return UsageFiles(version=1, cpu=os.path.join(acct, *parts, "cpuacct.usage") if acct else None,
                          memory=os.path.join(mem, "memory.usage_in_bytes"),
                          memory_stat=os.path.join(mem, "memory.stat"))

    def memory_dir(self, path: str) -> str:
        return os.path.join(self.hierarchies["memory"], *self._parts(path))

    def hierarchy(self, controller: str) -> str | None:
        return self.hierarchies.get(controller)

    def oom_kill_count(self, path: str) -> int:
        """Summed over the subtree like stats(), from plain memory.oom_control reads."""
        top = self.memory_dir(path)
        if not os.path.isdir(top):
            raise CgroupError(errno.ENOENT, f"oom_kill_count {path}: no such cgroup")
        return sum(read_flat_keyed(os.path.join(d, "memory.oom_control")).get("oom_kill", 0)
                   for d in walk_top_down(top))

    # -- kill / remove -------------------------------------------------------------------------

    def kill(self, path: str) -> None:
        """SIGKILL every task of the subtree in every hierarchy, looping until none is left.

        No freezer: a task forked between listing and signalling is caught by the next round.
        """
        self._guard_not_mount(path, "kill")
        if not any(os.path.isdir(d) for d in self._dirs(path)):
            return
        if not signal_until_empty(lambda: self.pids(path), self.kill_timeout):
            log.warning("cgroup_kill_timeout", path=path, remaining=self.pids(path))

    def remove(self, path: str) -> None:
        """Bottom-up rmdir in every hierarchy, with bounded retries while tasks are reaped."""
        self._guard_not_mount(path, "remove")
        for controller in self._distinct_controllers():
            for node in list(self._walk(controller, path)):
                d = node.full_path.decode()
                if not os.path.isdir(d):
                    continue
                rmdir_retry(d, self.remove_timeout, functools.partial(_describe_busy, node))
                node.parent.delete_cgroup(node.name.decode())  # detaches; dir already gone


def _max(value: int | None) -> str:
    return "max" if value is None else str(value)


def _load_children(node: Node) -> None:
    """Populate node.children from the filesystem (what cgroupspy's BaseTree does for a whole tree)."""
    for name in subdirs(node.full_path.decode()):
        child = Node(name.encode(), parent=node)
        node.children.append(child)
        _load_children(child)


def _procs(node: Node) -> list[int]:
    try:
        if node.controller is not None:
            return list(node.controller.procs)
        with open(os.path.join(node.full_path, b"cgroup.procs")) as f:
            return [int(x) for x in f.read().split()]
    except FileNotFoundError:
        return []


def _oom_kill(node: Node) -> int:
    try:
        oom = node.controller.oom_control
    except FileNotFoundError:
        return 0
    return int(oom.get("oom_kill", 0)) if isinstance(oom, dict) else 0


def _describe_busy(node: Node) -> str:
    pids = _procs(node)
    return f"processes still inside: {pids}" if pids else ""
