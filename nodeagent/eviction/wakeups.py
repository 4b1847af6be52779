"""Which kernel notifications wake the eviction manager on this node, armed where memory thresholds are.

    cgroup v1: memcg threshold eventfds on the agent's kubepods cgroup, one line per memory
               threshold, at the kubepods usage where the signal would reach the threshold
               (re-armed after each pass as the line moves); PSI on /proc/pressure/memory.
    cgroup v2: memory.high on kubepods at the hard threshold's line (crossing it throttles the
               allocator and bumps memory.events "high", which inotify turns into a wake-up);
               PSI where the kernel has it.
    always:    adaptive polling (AdaptivePoll), from housekeepingInterval down to 50 ms.

The line for memory.available (node level) in kubepods terms is usage_now + (available_now - T):
pods growing by the remaining headroom is what brings the node to the threshold. For
allocatableMemory.available it is simply enforced_memory - T. The agent never writes to a cgroup
it did not create: the root memory cgroup gets no event_control registration.
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog

from nodeagent.cgroups import layout
from nodeagent.cgroups.driver import CgroupDriver
from nodeagent.eviction.evaluate import is_hard
from nodeagent.eviction.manager import EvictionManager, PassResult
from nodeagent.eviction.notify import (
    PSI_SYSTEM_MEMORY,
    MemcgThresholdNotifier,
    MemoryEventsNotifier,
    Notifier,
    PsiNotifier,
    close_all,
    event_waker,
    memcg_dir,
    set_memory_high,
    start_all,
)
from nodeagent.eviction.observations import Observation
from nodeagent.eviction.thresholds import ALLOCATABLE_MEMORY_AVAILABLE, MEMORY_AVAILABLE, Threshold

log = structlog.get_logger(__name__)

REARM_SLACK = 8 * 1024 * 1024  # re-arm only when a line moved by more than this


def kubepods_lines(thresholds: Sequence[Threshold], observations: dict[str, Observation], pods_usage: int,
                   enforced_memory: int | None) -> list[int]:
    """kubepods usage values (bytes) at which each memory threshold would be reached (pure)."""
    lines: set[int] = set()
    node = observations.get(MEMORY_AVAILABLE)
    for t in thresholds:
        if t.signal == MEMORY_AVAILABLE and node is not None:
            lines.add(max(1, pods_usage + node.available - t.value_for(node.capacity)))
        elif t.signal == ALLOCATABLE_MEMORY_AVAILABLE and enforced_memory:
            lines.add(max(1, enforced_memory - t.value_for(enforced_memory)))
    return sorted(lines)


def moved(old: Sequence[int], new: Sequence[int], slack: int = REARM_SLACK) -> bool:
    if len(old) != len(new):
        return True
    return any(abs(a - b) > slack for a, b in zip(old, new))


class MemoryWakeups:
    """Arms the notifiers for the current thresholds and keeps their lines where the thresholds are."""

    def __init__(self, driver: CgroupDriver, manager: EvictionManager, enforced_memory: int | None) -> None:
        self.driver = driver
        self.manager = manager
        self.enforced_memory = enforced_memory
        self.wake = event_waker(manager.wake)
        self.notifiers: list[Notifier] = []
        self.unavailable: dict[str, str] = {}
        self.lines: list[int] = []
        self._memcg: MemcgThresholdNotifier | None = None
        self._kubepods = memcg_dir(driver, layout.KUBEPODS)

    def _pods_usage(self) -> int:
        return self.driver.stats(layout.KUBEPODS).memory_usage

    def _current_lines(self, hard_only: bool) -> list[int]:
        thresholds = [t for t in self.manager.thresholds if is_hard(t) or not hard_only]
        observations = self.manager.last_observations or self.manager.observe_now()
        return kubepods_lines(thresholds, observations, self._pods_usage(), self.enforced_memory)

    async def start(self) -> dict[str, str]:
        """Arm what this kernel offers; returns {mechanism: why unavailable}."""
        candidates: list[Notifier] = [PsiNotifier(self.wake, PSI_SYSTEM_MEMORY)]
        if self.driver.version == 1:
            self.lines = self._current_lines(hard_only=False)
            if self.lines:
                self._memcg = MemcgThresholdNotifier(self.wake, self._kubepods, self.lines)
                candidates.append(self._memcg)
        else:
            self._apply_memory_high()
            candidates.append(MemoryEventsNotifier(self.wake, self._kubepods, keys=("high", "max", "oom", "oom_kill")))
        self.notifiers, self.unavailable = await start_all(candidates)
        if self._memcg is not None and self._memcg not in self.notifiers:
            self._memcg = None
        log.info("eviction_wakeups_armed", armed=[n.name for n in self.notifiers], unavailable=self.unavailable,
                 lines=self.lines)
        return self.unavailable

    def _apply_memory_high(self) -> None:
        lines = self._current_lines(hard_only=True)
        value = min(lines) if lines else None
        if self.enforced_memory and value is not None:
            value = min(value, self.enforced_memory)
        try:
            set_memory_high(self._kubepods, value)
            self.lines = [value] if value is not None else []
        except OSError as e:
            log.warning("memory_high_set_failed", error=str(e))

    def after_pass(self, _result: PassResult) -> None:
        """Move the lines with the node: a line is only right for the usage it was computed at."""
        try:
            if self.driver.version == 1:
                if self._memcg is None:
                    return
                new = self._current_lines(hard_only=False)
                if new and moved(self.lines, new):
                    self._memcg.rearm(new)
                    self.lines = new
            else:
                new = self._current_lines(hard_only=True)
                if new and moved(self.lines, new[:1]):
                    self._apply_memory_high()
        except (OSError, ValueError) as e:
            log.warning("eviction_wakeups_rearm_failed", error=str(e))

    def close(self) -> None:
        close_all(self.notifiers)
        self.notifiers = []
