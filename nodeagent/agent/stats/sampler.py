"""The sampler: one read pass over the machine and every pod's cgroups per interval, CPU rates from
the counters' windows, and the latest Snapshot for the API to render.

    targets (from the pod manager, on the loop) -> pass (a worker thread: reader + windows)
        -> Snapshot (immutable, swapped in whole) -> /metrics/resource, /stats/summary

The pass runs in a thread so the event loop never waits on file I/O (walking log directories
can touch the disk); only one pass runs at a time, and it alone touches the windows and the
kept files. Directories are walked every `storage_interval` (new ones at once), cgroups and
/proc every pass. A cgroup that cannot be read this pass is left out of this snapshot; its
window keeps its points, so the next rate spans the gap.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence

import structlog

from nodeagent.agent.cgroups import layout
from nodeagent.agent.cgroups.driver import CgroupDriver
from nodeagent.agent.config.stats import StatsSettings
from nodeagent.agent.node.procfs import boot_time
from nodeagent.agent.stats.files import KeptFiles
from nodeagent.agent.stats.reader import CgroupReading, FilesystemReading, Reader
from nodeagent.agent.stats.targets import ContainerTarget, PodTarget
from nodeagent.agent.stats.values import (
    ContainerStats,
    CpuStats,
    FsStats,
    MemoryStats,
    NodeStats,
    PodStats,
    Snapshot,
)
from nodeagent.agent.stats.window import CounterWindow
from nodeagent.core.clock import Clock

log = structlog.get_logger(__name__)

NODE_KEY = "/proc/stat"  # the machine's CPU window
PODS_CONTAINER = "pods"  # the Summary API's system container for the pods cgroup

Sleep = Callable[[float], Awaitable[None]]


class Sampler:
    """Owns the windows and the kept files; `run()` is the long-lived task the daemon starts."""

    def __init__(self, driver: CgroupDriver, targets: Callable[[], Sequence[PodTarget]], clock: Clock, *,
                 node_name: str, nodefs_path: str, settings: StatsSettings | None = None,
                 pods_cgroup: str | None = layout.KUBEPODS, proc: str = "/proc",
                 boot: Callable[[], float] = boot_time) -> None:
        self.driver = driver
        self.targets = targets
        self.clock = clock
        self.node_name = node_name
        self.nodefs_path = nodefs_path
        self.settings = settings or StatsSettings()
        self.pods_cgroup = pods_cgroup
        self.proc = proc
        self._boot = boot
        self._boot_time: float | None = None
        self._reader: Reader | None = None  # made by the first pass: no I/O before start
        self._pending: StatsSettings | None = None
        self._windows: dict[str, CounterWindow] = {}
        self._storage_at: float | None = None  # when directories were last walked (monotonic)
        self._fs_reading: FilesystemReading | None = None  # nodefs at that walk
        self._node_fs: FsStats | None = None
        self._dir_stats: dict[str, FsStats | None] = {}
        self._ephemeral: dict[tuple[str, ...], FsStats | None] = {}
        self.latest: Snapshot | None = None
        self.failed = False  # the last pass raised
        self.passes = 0

    # ---- configuration ----
    def reconfigure(self, settings: StatsSettings) -> None:
        """Take effect at the next pass (a pass may be running in its thread right now)."""
        self._pending = settings

    def _apply_pending(self) -> None:
        new = self._pending  # never cleared: a reconfigure racing this read is applied next pass
        if new is None or new == self.settings:
            return
        old, self.settings = self.settings, new
        if (new.cpu_window, new.tolerance) != (old.cpu_window, old.tolerance):
            self._windows.clear()  # rates restart over the new window
        if new.max_open_files != old.max_open_files and self._reader is not None:
            self._reader.files.close()
            self._reader.files = KeptFiles(new.max_open_files)
        log.info("stats_reconfigured", interval=new.interval, cpu_window=new.cpu_window,
                 storage_interval=new.storage_interval)

    # ---- reading ----
    def current(self) -> Snapshot | None:
        """The latest snapshot, or None if there is none, the last pass failed or it is stale."""
        snap = self.latest
        if snap is None or self.failed or self.clock.now() - snap.monotonic > self.settings.stale_after:
            return None
        return snap

    def sample(self, targets: Sequence[PodTarget]) -> Snapshot:
        """One pass (blocking file I/O): read everything, update the windows, publish the snapshot."""
        self._apply_pending()
        if self._reader is None:
            self._reader = Reader(self.driver, self.clock, KeptFiles(self.settings.max_open_files), proc=self.proc)
        if self._boot_time is None:
            try:
                self._boot_time = self._boot()
            except (OSError, RuntimeError, ValueError):
                self._boot_time = None
        reader = self._reader
        mono, wall = reader.begin_pass()
        touched: set[str] = set()
        self._refresh_storage(reader, targets, mono)
        node = self._node(reader, touched)
        ephemeral: dict[tuple[str, ...], FsStats | None] = {}
        pods = tuple(self._pod(reader, t, touched, ephemeral) for t in targets)
        self._ephemeral = ephemeral
        reader.end_pass()
        for key in [k for k in self._windows if k not in touched]:
            del self._windows[key]
        snap = Snapshot(time=wall, monotonic=mono, node=node, pods=pods)
        self.latest = snap
        self.passes += 1
        return snap

    # ---- storage: walked every storage_interval, new directories at once ----
    def _refresh_storage(self, reader: Reader, targets: Sequence[PodTarget], now: float) -> None:
        """The FsStats of every wanted directory and of nodefs, rebuilt only when walked, so the
        passes in between reuse the same values (and build nothing)."""
        due = (self._storage_at is None
               or now - self._storage_at >= self.settings.storage_interval - self.settings.tolerance)
        if due:
            self._storage_at = now
            self._fs_reading = reader.filesystem(self.nodefs_path)
            fs = self._fs_reading
            self._node_fs = None if fs is None else FsStats(fs.wall, fs.used_bytes, fs.inodes - fs.inodes_free,
                                                             fs.capacity_bytes, fs.available_bytes, fs.inodes,
                                                             fs.inodes_free)
            self._ephemeral = {}
        old = {} if due else self._dir_stats
        stats: dict[str, FsStats | None] = {}
        for t in targets:
            dirs = [d for c in t.containers for d in (c.log_dir, c.rootfs_dir) if d]
            for d in (*dirs, *t.volume_dirs):
                stats[d] = old[d] if d in old else self._walk(reader, d)
        self._dir_stats = stats

    def _walk(self, reader: Reader, directory: str) -> FsStats | None:
        reading = reader.directory(directory)
        if reading is None:
            return None
        fs = self._fs_reading
        if fs is None:
            return FsStats(reading.wall, reading.used_bytes, reading.inodes_used)
        return FsStats(reading.wall, reading.used_bytes, reading.inodes_used, fs.capacity_bytes, fs.available_bytes,
                       fs.inodes, fs.inodes_free)

    def _ephemeral_of(self, t: PodTarget, cache: dict[tuple[str, ...], FsStats | None]) -> FsStats | None:
        """Containers' rootfs and logs plus local volumes, summed (the kubelet's ephemeral-storage)."""
        dirs = tuple(d for c in t.containers for d in (c.rootfs_dir, c.log_dir) if d) + t.volume_dirs
        if dirs in cache:
            return cache[dirs]
        if dirs in self._ephemeral:
            cache[dirs] = self._ephemeral[dirs]
            return cache[dirs]
        parts = [s for d in dirs if (s := self._dir_stats.get(d)) is not None]
        fs = self._fs_reading
        total = None
        if parts:
            total = FsStats(max(p.time for p in parts), sum(p.used_bytes or 0 for p in parts),
                            sum(p.inodes_used or 0 for p in parts),
                            *((fs.capacity_bytes, fs.available_bytes, fs.inodes, fs.inodes_free) if fs else ()))
        cache[dirs] = total
        return total

    # ---- cgroups and the machine: every pass ----
    def _cpu(self, key: str, reading: CgroupReading) -> CpuStats | None:
        cpu_ns = reading.usage.cpu_ns
        if cpu_ns is None:
            return None
        window = self._windows.get(key)
        if window is None:
            window = self._windows[key] = CounterWindow(self.settings.cpu_window, self.settings.tolerance)
        window.add(reading.monotonic, cpu_ns)
        rate = window.rate()
        return CpuStats(reading.wall, cpu_ns, None if rate is None else int(rate))

    @staticmethod
    def _memory(reading: CgroupReading, limit: int | None) -> MemoryStats:
        u = reading.usage
        return MemoryStats(reading.wall, u.memory_usage, u.memory_working_set, u.memory_rss, u.page_faults,
                           u.major_page_faults, None if limit is None else max(0, limit - u.memory_working_set))

    def _node(self, reader: Reader, touched: set[str]) -> NodeStats:
        cpu = memory = None
        machine = reader.machine()
        touched.add(NODE_KEY)  # a window lives while its series is wanted, read or not (a gap)
        if machine is not None:
            window = self._windows.get(NODE_KEY)
            if window is None:
                window = self._windows[NODE_KEY] = CounterWindow(self.settings.cpu_window, self.settings.tolerance)
            window.add(machine.monotonic, machine.cpu_busy_ns)
            rate = window.rate()
            cpu = CpuStats(machine.wall, machine.cpu_busy_ns, None if rate is None else int(rate))
            memory = MemoryStats(machine.wall, machine.memory_usage, machine.memory_working_set, machine.memory_rss,
                                 available_bytes=max(0, machine.memory_capacity - machine.memory_working_set))
        system: tuple[ContainerStats, ...] = ()
        if self.pods_cgroup is not None:
            touched.add(self.pods_cgroup)
            reading = reader.cgroup(self.pods_cgroup)
            if reading is not None:
                system = (ContainerStats(PODS_CONTAINER, self._boot_time, self._cpu(self.pods_cgroup, reading),
                                         self._memory(reading, None)),)
        return NodeStats(self.node_name, self._boot_time, cpu, memory, self._node_fs, system)

    def _container(self, reader: Reader, c: ContainerTarget, touched: set[str],
                   stamp: tuple[float, float]) -> ContainerStats:
        touched.add(c.cgroup)
        reading = reader.cgroup(c.cgroup, stamp)
        cpu = memory = None
        if reading is not None:
            cpu = self._cpu(c.cgroup, reading)
            memory = self._memory(reading, c.memory_limit)
        dirs = self._dir_stats
        return ContainerStats(c.name, c.start_time, cpu, memory, dirs.get(c.rootfs_dir) if c.rootfs_dir else None,
                              dirs.get(c.log_dir) if c.log_dir else None)

    def _pod(self, reader: Reader, t: PodTarget, touched: set[str],
             ephemeral: dict[tuple[str, ...], FsStats | None]) -> PodStats:
        stamp = reader.stamp()
        containers = tuple(self._container(reader, c, touched, stamp) for c in t.containers)
        touched.add(t.cgroup)
        reading = reader.cgroup(t.cgroup, stamp)
        cpu = memory = None
        if reading is not None:
            cpu = self._cpu(t.cgroup, reading)
            memory = self._memory(reading, t.memory_limit)
        return PodStats(t.namespace, t.name, t.uid, t.start_time, containers, cpu, memory,
                        self._ephemeral_of(t, ephemeral))

    # ---- the long-lived task ----
    async def run(self, sleep: Sleep = asyncio.sleep) -> None:
        """Pass after pass on a fixed schedule (missed ticks are skipped, never caught up);
        a failing pass is logged once and retried at the next tick."""
        log.info("stats_sampler_started", interval=self.settings.interval, cpu_window=self.settings.cpu_window,
                 storage_interval=self.settings.storage_interval)
        loop = asyncio.get_running_loop()
        next_at = self.clock.now()
        try:
            while True:
                future: asyncio.Future[Snapshot] | None = None
                try:
                    targets = tuple(self.targets())  # on the loop: the pod manager's state lives here
                    future = loop.run_in_executor(None, self.sample, targets)
                    await asyncio.shield(future)
                except asyncio.CancelledError:
                    if future is not None:
                        with contextlib.suppress(Exception):
                            await asyncio.wait([future])  # the thread finishes its pass (a few ms) before we close
                    raise
                except Exception as e:  # a broken pass must not end the sampler (logged with its traceback)
                    if not self.failed:
                        log.error("stats_pass_failed", error=repr(e), exc_info=True)
                    self.failed = True
                else:
                    if self.failed:
                        log.info("stats_pass_recovered")
                    self.failed = False
                interval = self.settings.interval
                next_at += interval
                now = self.clock.now()
                if next_at <= now:  # late by a whole interval: skip to the next tick of the grid
                    next_at = now + interval - (now - next_at) % interval
                await sleep(next_at - now)
        finally:
            self.close()

    def close(self) -> None:
        """Close the kept descriptors (the next pass, if any, opens them again)."""
        if self._reader is not None:
            self._reader.files.close()

    @property
    def kept_files(self) -> int:
        """Descriptors held open for re-reading now."""
        return len(self._reader.files) if self._reader is not None else 0

    @property
    def files_opened(self) -> int:
        """open() calls so far: flat once the files are kept, growing by the overflow otherwise."""
        return self._reader.files.opens if self._reader is not None else 0

    @property
    def series(self) -> frozenset[str]:
        """The counters that have a CPU window (cgroup paths, and NODE_KEY for the machine)."""
        return frozenset(self._windows)

    def window_span(self, key: str) -> float:
        """Seconds the CPU rate of `key` spans now (0 without a window)."""
        window = self._windows.get(key)
        return window.span() if window is not None else 0.0


__all__ = ["NODE_KEY", "PODS_CONTAINER", "Sampler"]
