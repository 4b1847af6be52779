"""cgroup v1 memory thresholds: an eventfd the kernel signals when memory.usage_in_bytes crosses a line.

Registration (Documentation/admin-guide/cgroup-v1/memory.rst, "Memory thresholds"): write
"<eventfd> <fd of memory.usage_in_bytes> <bytes>" to the cgroup's cgroup.event_control. The
kernel signals in the charge path (checked every 128 page events per CPU), in BOTH directions,
so a wake-up may be the usage falling back below the line. A registration cannot be changed or
removed: closing the eventfd unregisters it, so re-arming is close + register anew. Several
thresholds may share one eventfd (e.g. an early "poll faster" line and the eviction line).

This writes cgroup.event_control of the cgroup it is given: give it only cgroups the agent
created (its kubepods), never the root memory cgroup (DESIGN: no writes outside our cgroups).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence

import structlog

from nodeagent.agent.cgroups.common import write_text
from nodeagent.agent.eviction.notify.base import NotifierUnavailable, WakeFn

log = structlog.get_logger(__name__)


def validate_thresholds(thresholds: Sequence[int]) -> tuple[int, ...]:
    if not thresholds:
        raise ValueError("thresholds: at least one byte value is needed")
    for i, t in enumerate(thresholds):
        if not isinstance(t, int) or isinstance(t, bool) or t <= 0:
            raise ValueError(f"thresholds[{i}]: must be a positive number of bytes, got {t!r}")
    return tuple(sorted(set(thresholds)))


class MemcgThresholdNotifier:
    """Wakes when a v1 memory cgroup's usage crosses any of `thresholds` (bytes), up or down."""

    def __init__(self, wake: WakeFn, memcg_dir: str, thresholds: Sequence[int], *, name: str | None = None) -> None:
        self.wake = wake
        self.memcg_dir = memcg_dir
        self.thresholds = validate_thresholds(thresholds)
        self.name = name or f"memcg-threshold:{memcg_dir}"
        self.fired = 0
        self._efd: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def _usage_file(self) -> str:
        return os.path.join(self.memcg_dir, "memory.usage_in_bytes")

    @property
    def _control_file(self) -> str:
        return os.path.join(self.memcg_dir, "cgroup.event_control")

    async def start(self) -> None:
        if self._efd is not None:
            return
        for f in (self._control_file, self._usage_file):
            if not os.path.exists(f):  # noqa: ASYNC240 - two stats of cgroupfs at arm time
                raise NotifierUnavailable(f"no {f}: not a cgroup v1 memory cgroup")
        self._loop = asyncio.get_running_loop()
        self._register()
        log.info("memcg_threshold_armed", cgroup=self.memcg_dir, thresholds=list(self.thresholds))

    def rearm(self, thresholds: Sequence[int]) -> None:
        """Replace the thresholds (close the eventfd, register a new one). Needs start() first."""
        new = validate_thresholds(thresholds)
        if self._loop is None:
            raise RuntimeError(f"{self.name}: rearm before start")
        self._unregister()
        self.thresholds = new
        self._register()
        # routine: the lines follow the node's memory every pass that moves them
        log.debug("memcg_threshold_rearmed", cgroup=self.memcg_dir, thresholds=list(self.thresholds))

    def _register(self) -> None:
        assert self._loop is not None
        efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        try:
            # the kernel only looks the usage fd up while registering: closed right after
            ufd = os.open(self._usage_file, os.O_RDONLY | os.O_CLOEXEC)
            try:
                for t in self.thresholds:
                    write_text(self._control_file, f"{efd} {ufd} {t}")
            finally:
                os.close(ufd)
            self._loop.add_reader(efd, self._ready)
        except BaseException:
            os.close(efd)
            raise
        self._efd = efd

    def _ready(self) -> None:
        if self._efd is None:
            return
        try:
            os.eventfd_read(self._efd)  # the count of crossings since the last read; reset to 0
        except BlockingIOError:
            return
        self.fired += 1
        self.wake(self.name)

    def _unregister(self) -> None:
        if self._efd is None:
            return
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._efd)
        os.close(self._efd)  # the kernel drops the registration when the eventfd is released
        self._efd = None

    def close(self) -> None:
        self._unregister()
