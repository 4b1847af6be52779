"""cgroup v2 memory.events: inotify tells us when the kernel bumps a counter (high, max, oom...).

The kernel raises a file-modified event (kernfs_notify, at most one per 10 ms per file) on a
cgroup's memory.events whenever one of its counters grows, for that cgroup and, hierarchically,
for events in its descendants. With `memory.high` on the pods cgroup a little above the eviction
line, a memory hog crossing it is both throttled by the kernel (reclaim + allocation delay
instead of an OOM kill) and reported to us at once through "high". inotify comes from libc via
ctypes (inotify_init1 / inotify_add_watch): no dependency. The watch fd is read from the asyncio
loop; counters are re-read on each event and only growth of the watched keys wakes the agent
("low" counts reclaim protection, not pressure, and is ignored by default). The cgroup's removal
is seen as IN_DELETE of its name on the parent directory: the watch then disarms and wakes once.
Observed on 6.1: a hog that stops allocating right at memory.high is not always counted in
"high" (it is counted on the way back to user space while still above the line); one that keeps
allocating always is.
"""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import Mapping, Sequence

import structlog

from nodeagent.agent.cgroups.common import CgroupError, read_flat_keyed, write_text
from nodeagent.agent.eviction.notify.base import NotifierUnavailable, WakeFn
from nodeagent.core.inotify import (
    IN_DELETE,
    IN_DELETE_SELF,
    IN_IGNORED,
    IN_MODIFY,
    IN_Q_OVERFLOW,
    IN_UNMOUNT,
    inotify_add_watch,
    inotify_init,
    parse_inotify,
)

log = structlog.get_logger(__name__)

DEFAULT_KEYS = ("high", "max", "oom", "oom_kill")


def increased(before: Mapping[str, int], after: Mapping[str, int], keys: Sequence[str]) -> dict[str, int]:
    """How much each watched counter grew (pure); counters missing before count from 0."""
    return {k: after[k] - before.get(k, 0) for k in keys if after.get(k, 0) > before.get(k, 0)}


class MemoryEventsNotifier:
    """Wakes when any of `keys` grows in a cgroup v2 memory.events (or memory.events.local)."""

    def __init__(
        self,
        wake: WakeFn,
        cgroup_dir: str,
        *,
        keys: Sequence[str] = DEFAULT_KEYS,
        local: bool = False,
        name: str | None = None,
    ) -> None:
        if not keys:
            raise ValueError("keys: at least one memory.events counter is needed")
        self.wake = wake
        self.path = os.path.join(cgroup_dir, "memory.events.local" if local else "memory.events")
        self.keys = tuple(keys)
        self.name = name or f"memory-events:{cgroup_dir}"
        self.counters: dict[str, int] = {}
        self.last_increase: dict[str, int] = {}
        self.fired = 0
        self.gone = False
        self._fd: int | None = None
        self._file_wd = self._parent_wd = -1
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> None:
        if self._fd is not None:
            return
        if not os.path.exists(self.path):  # noqa: ASYNC240 - one stat of cgroupfs at arm time
            raise NotifierUnavailable(f"no {self.path}: not a cgroup v2 memory cgroup")
        fd = inotify_init()
        try:
            self._file_wd = inotify_add_watch(fd, self.path, IN_MODIFY)
            # kernfs tells a file's watch nothing when its cgroup is removed (the watch pins the
            # inode): the parent's IN_DELETE naming our cgroup does
            cgroup_dir = os.path.dirname(self.path)
            self._parent_wd = inotify_add_watch(fd, os.path.dirname(cgroup_dir), IN_DELETE)
            self.counters = read_flat_keyed(self.path)  # after the watch: no bump is lost
            loop = asyncio.get_running_loop()
            loop.add_reader(fd, self._ready)
        except BaseException:
            os.close(fd)
            raise
        self._fd, self._loop = fd, loop
        log.info("memory_events_watch_armed", path=self.path, keys=list(self.keys), counters=self.counters)

    def _drain(self) -> tuple[int, bool]:
        """Read every pending event: (OR of the file watch's masks, whether our cgroup was removed)."""
        assert self._fd is not None
        mask, removed = 0, False
        own_name = os.path.basename(os.path.dirname(self.path))
        while True:
            try:
                buf = os.read(self._fd, 4096)
            except BlockingIOError:
                return mask, removed
            except OSError as e:
                if e.errno == errno.EINTR:
                    continue
                raise
            if not buf:
                return mask, removed
            for wd, m, name in parse_inotify(buf):
                if wd == self._file_wd or m & IN_Q_OVERFLOW:
                    mask |= m
                elif wd == self._parent_wd and m & IN_DELETE and name == own_name:
                    removed = True

    def _ready(self) -> None:
        if self._fd is None:
            return
        mask, removed = self._drain()
        if removed or mask & (IN_IGNORED | IN_DELETE_SELF | IN_UNMOUNT):
            log.warning("memory_events_watch_gone", path=self.path)
            self.gone = True
            self.close()
            self.wake(self.name)
            return
        if not mask & (IN_MODIFY | IN_Q_OVERFLOW):
            return
        after = read_flat_keyed(self.path)
        grown = increased(self.counters, after, self.keys)
        self.counters = after
        if grown:
            self.last_increase = grown
            self.fired += 1
            self.wake(self.name)

    def close(self) -> None:
        if self._fd is None:
            return
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._fd)
        os.close(self._fd)
        self._fd = None


def set_memory_high(cgroup_dir: str, value: int | None) -> None:
    """Write only memory.high of one v2 cgroup (None -> "max"), leaving every other limit as is.

    The driver's update() rewrites the whole CgroupSpec (cpu.weight, memory.max...), which is
    wrong for moving just the early-throttle line as thresholds or allocatable change.
    """
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
        raise ValueError(f"memory_high: must be a positive number of bytes or None, got {value!r}")
    path = os.path.join(cgroup_dir, "memory.high")
    if not os.path.exists(path):
        raise CgroupError(errno.ENOENT, f"no {path}: not a cgroup v2 memory cgroup")
    write_text(path, "max" if value is None else str(value))
