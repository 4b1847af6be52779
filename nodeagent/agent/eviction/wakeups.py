"""Which kernel notifications wake the eviction manager on this node, armed where memory thresholds are.

    cgroup v1: memcg threshold eventfds on the agent's kubepods cgroup, one line per memory
               threshold, at the kubepods usage where the signal would reach the threshold
               (re-armed after each pass as the line moves); PSI on /proc/pressure/memory.
    cgroup v2: memory.high on kubepods HIGH_MARGIN above the hard threshold's line (crossing
               it throttles the allocator and bumps memory.events "high", which inotify turns
               into a wake-up that finds the threshold met); PSI where the kernel has it.
    always:    adaptive polling (AdaptivePoll), from housekeepingInterval down to 25 ms; the
               poll plans for slower fills where the kernel reports the hard line itself, so it
               is built here, once what got armed is known (`start`, `reconfigure`).

Which kernel mechanisms are armed can be narrowed (benchmarks, or a kernel where one misbehaves)
with NODEAGENT_EVICTION_WAKEUPS: a comma list of "psi", "memcg", "memory-events", or "none"
(adaptive polling only: no notifier and no memory.high); unset or "all" arms what the kernel has.
The agent's factory (daemon.build_agent) reads it (`parse_mechanisms`) and hands the set to
MemoryWakeups, whose constructor reads nothing.

The line for memory.available in kubepods usage terms is usage_now + (available_now - T): pods
growing by the remaining headroom is what brings the node to the threshold. For
allocatableMemory.available it is enforced_memory - T + inactive_file (see kubepods_lines). The
agent never writes to a cgroup it did not create: the root memory cgroup gets no event_control registration.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import structlog

from nodeagent.agent.cgroups import layout
from nodeagent.agent.cgroups.driver import CgroupDriver
from nodeagent.agent.config.settings import Config
from nodeagent.agent.config.thresholds import ALLOCATABLE_MEMORY_AVAILABLE, MEMORY_AVAILABLE, Threshold
from nodeagent.agent.eviction.evaluate import is_hard
from nodeagent.agent.eviction.manager import EvictionManager, PassResult
from nodeagent.agent.eviction.notify import (
    PSI_SYSTEM_MEMORY,
    AdaptivePoll,
    KernelNotifier,
    MemcgThresholdNotifier,
    MemoryEventsNotifier,
    PsiNotifier,
    close_all,
    event_waker,
    rate_floor,
    set_memory_high,
    start_all,
)
from nodeagent.agent.eviction.observations import Observation
from nodeagent.agent.eviction.signals import kubepods_memory
from nodeagent.agent.node.allocatable import NodeAllocatable

log = structlog.get_logger(__name__)

REARM_SLACK = 2 * 1024 * 1024  # re-arm only when a line moved by more than this
# memory.high sits this far ABOVE the line (in kubepods usage). The line is an estimate (the node's
# other usage moves, file pages count differently in memory.current and memory.available): a
# memory.high below the true line throttles the allocator short of the threshold, where a wake-up
# finds nothing to evict; `spent` moves such a memory.high up at once. The margin is what a hog
# must allocate past the line before the kernel tells us, so it is kept small (measurements:
# bench/README.md, "memory.high 1 MiB above the hard line").
HIGH_MARGIN = 1 * 1024 * 1024
HIGH_SLACK = 1024 * 1024  # memory.high follows the line closely (one write per move)
WAKEUPS_ENV = "NODEAGENT_EVICTION_WAKEUPS"
PSI, MEMCG, MEMORY_EVENTS = "psi", "memcg", "memory-events"
MECHANISMS = frozenset({PSI, MEMCG, MEMORY_EVENTS})


def parse_mechanisms(text: str | None) -> frozenset[str]:
    """The kernel mechanisms to arm from NODEAGENT_EVICTION_WAKEUPS: unset/""/"all" -> all,
    "none" -> none (adaptive polling only), else a comma list of psi, memcg, memory-events."""
    words = {w.strip() for w in (text or "").split(",") if w.strip()}
    if not words or words == {"all"}:
        return MECHANISMS
    if words == {"none"}:
        return frozenset()
    unknown = words - MECHANISMS
    if unknown:
        raise ValueError(f"{WAKEUPS_ENV}: unknown mechanism(s) {sorted(unknown)}; "
                         f"use all, none or a comma list of {sorted(MECHANISMS)}")
    return frozenset(words)


def kubepods_lines(thresholds: Sequence[Threshold], observations: dict[str, Observation], pods_usage: int,
                   enforced_memory: int | None, pods_inactive_file: int = 0) -> list[int]:
    """kubepods usage values (bytes) at which each memory threshold would be reached (pure).

    memory.available: usage + (available - T), with the observation and the usage read back to
    back (observation first: a hog growing in between puts the line late by what it added, never
    early, and an early wake-up finds nothing to do and is not repeated). allocatableMemory:
    the signal is enforced - (usage - inactive_file), so the line is enforced - T + inactive_file,
    from one read of the pods cgroup (page cache in kubepods moves it up)."""
    lines: set[int] = set()
    node = observations.get(MEMORY_AVAILABLE)
    for t in thresholds:
        if t.signal == MEMORY_AVAILABLE and node is not None:
            lines.add(max(1, pods_usage + node.available - t.value_for(node.capacity)))
        elif t.signal == ALLOCATABLE_MEMORY_AVAILABLE and enforced_memory:
            lines.add(max(1, enforced_memory - t.value_for(enforced_memory) + pods_inactive_file))
    return sorted(lines)


def spent(old: Sequence[int], new: Sequence[int], usage: int) -> bool:
    """A line the usage already passed, where the threshold now says it is not reached yet: it
    fired early (page cache moved the real line by less than the re-arm slack) and, as the kernel
    signals crossings only, would stay silent while the pods grow on to the real line (pure)."""
    return len(old) == len(new) and any(o <= usage < n for o, n in zip(old, new, strict=True))


def moved(old: Sequence[int], new: Sequence[int], slack: int = REARM_SLACK) -> bool:
    if len(old) != len(new):
        return True
    return any(abs(a - b) > slack for a, b in zip(old, new, strict=True))


class MemoryWakeups:
    """Arms the notifiers for the current thresholds and keeps their lines where the thresholds are."""

    def __init__(self, driver: CgroupDriver, manager: EvictionManager, enforced_memory: int | None,
                 observe_memory: Callable[[], Observation], mechanisms: frozenset[str] = MECHANISMS) -> None:
        """`observe_memory` reads memory.available alone: the lines need nothing else, and they
        are recomputed after every pass, where a full observation (statvfs, pids) would cost idle
        CPU for nothing (bench/README.md, "Wake-up lines"). `mechanisms`: the kernel mechanisms
        that may be armed (the agent's factory parses NODEAGENT_EVICTION_WAKEUPS into it)."""
        self.observe_memory = observe_memory
        self.mechanisms = mechanisms
        self.driver = driver
        self.manager = manager
        self.enforced_memory = enforced_memory
        self.wake = event_waker(manager.wake, manager.note_wake)
        self.notifiers: list[KernelNotifier] = []
        self.unavailable: dict[str, str] = {}
        self.lines: list[int] = []
        self._memcg: MemcgThresholdNotifier | None = None
        self._kubepods = driver.memory_dir(layout.KUBEPODS)

    @property
    def memory_high(self) -> int | None:
        """The memory.high kept on kubepods (v2, when armed), so a rewrite of kubepods keeps it."""
        if self.driver.version != 2 or MEMORY_EVENTS not in self.mechanisms or not self.lines:
            return None
        return self.lines[0]

    def _current_lines(self, hard_only: bool) -> list[int]:
        return self._lines_and_usage(hard_only)[0]

    def _lines_and_usage(self, hard_only: bool) -> tuple[list[int], int]:
        """The lines now: a fresh observation, then the pods cgroup read right after it (a pass's
        own observation is older than its kills and than what pods allocated during the pass)."""
        thresholds = [t for t in self.manager.thresholds if is_hard(t) or not hard_only]
        observations = {MEMORY_AVAILABLE: self.observe_memory()}
        usage, inactive_file = kubepods_memory(self.driver)
        return kubepods_lines(thresholds, observations, usage, self.enforced_memory, inactive_file), usage

    async def start(self) -> dict[str, str]:
        """Arm what this kernel offers; returns {mechanism: why unavailable}."""
        candidates: list[KernelNotifier] = [PsiNotifier(self.wake, PSI_SYSTEM_MEMORY)] if PSI in self.mechanisms else []
        if self.driver.version == 1:
            self.lines = self._current_lines(hard_only=False)
            if self.lines and MEMCG in self.mechanisms:
                self._memcg = MemcgThresholdNotifier(self.wake, self._kubepods, self.lines)
                candidates.append(self._memcg)
        elif MEMORY_EVENTS in self.mechanisms:
            self._set_memory_high(self._memory_high()[0])
            candidates.append(MemoryEventsNotifier(self.wake, self._kubepods, keys=("high", "max", "oom", "oom_kill")))
        self.notifiers, self.unavailable = await start_all(candidates)
        self.unavailable.update(dict.fromkeys(sorted(MECHANISMS - self.mechanisms), f"disabled by {WAKEUPS_ENV}"))
        if self._memcg is not None and self._memcg not in self.notifiers:
            self._memcg = None
        log.info("eviction_wakeups_armed", armed=[n.name for n in self.notifiers], unavailable=self.unavailable,
                 lines=self.lines)
        self.manager.use_poll(self._poll())  # its floor depends on what got armed
        return self.unavailable

    def reconfigure(self, config: Config, allocatable: NodeAllocatable) -> None:
        """A reload, after the manager's own reconfigure and a fresh observation: the lines move
        to the new thresholds and enforced memory, then the poll is rebuilt for what is armed now."""
        self.enforced_memory = allocatable.enforced_memory
        self._move_lines(exact=True)
        self.manager.use_poll(self._poll())

    def _poll(self) -> AdaptivePoll:
        return AdaptivePoll(self.manager.thresholds, max_s=self.manager.interval,
                            rate_floor=rate_floor(self.notified_at_line))

    @property
    def notified_at_line(self) -> bool:
        """Whether the kernel reports the hard line itself (then the poll may plan for slower fills)."""
        if self._memcg is not None:
            return True
        return bool(self.lines) and any(isinstance(n, MemoryEventsNotifier) for n in self.notifiers)

    def _memory_high(self) -> tuple[int | None, int]:
        """(the kubepods memory.high for the current lines: the lowest hard line + HIGH_MARGIN,
        the kubepods usage it was computed at)."""
        lines, usage = self._lines_and_usage(hard_only=True)
        value = min(lines) + HIGH_MARGIN if lines else None
        if self.enforced_memory and value is not None:
            value = min(value, self.enforced_memory)
        return value, usage

    def _set_memory_high(self, value: int | None) -> None:
        """Write kubepods' memory.high (None: "max") and remember it as the line."""
        try:
            set_memory_high(self._kubepods, value)
            self.lines = [value] if value is not None else []
        except OSError as e:
            self.lines = []  # what the kernel holds is unknown: written again after the next pass
            log.warning("memory_high_set_failed", error=str(e))

    def after_pass(self, result: PassResult) -> None:
        """Move the lines with the node: a line is only right for the usage it was computed at."""
        self._move_lines(exact=False)

    def _move_lines(self, *, exact: bool) -> None:
        """After a pass a line moves when it moved by more than the slack or was spent; on a
        reload (`exact`) any change is written, so memory.high never stays above a lowered
        enforced memory (the one clamp is in _memory_high) or behind a removed threshold."""
        try:
            if self.driver.version == 1:
                if self._memcg is None:
                    return
                new, usage = self._lines_and_usage(hard_only=False)
                if new and (new != self.lines if exact else (moved(self.lines, new) or spent(self.lines, new, usage))):
                    self._memcg.rearm(new)
                    self.lines = new
            elif MEMORY_EVENTS in self.mechanisms:
                value, usage = self._memory_high()
                if exact:
                    if [value] != self.lines and (value is not None or self.lines):
                        self._set_memory_high(value)
                elif value is not None and (moved(self.lines, [value], HIGH_SLACK)
                                            or spent(self.lines, [value], usage)):
                    self._set_memory_high(value)
        except (OSError, ValueError) as e:
            log.warning("eviction_wakeups_rearm_failed", error=str(e))

    def close(self) -> None:
        close_all(self.notifiers)
        self.notifiers = []
