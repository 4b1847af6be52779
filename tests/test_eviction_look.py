"""The look at memory between passes near the line: how a poll sleep is cut (pure), which
thresholds call for a pass at once (pure), the cheap /proc/meminfo read, and the manager's sleep
ending early on a look that finds a threshold newly met (and only then)."""

from __future__ import annotations

import asyncio

import pytest

from nodeagent.agent.config.thresholds import parse_thresholds
from nodeagent.agent.events import EventRecorder
from nodeagent.agent.eviction.evaluate import newly_met
from nodeagent.agent.eviction.manager import EvictionManager
from nodeagent.agent.eviction.notify.adaptive import LOOK_BELOW_S, LOOK_S, look_slices
from nodeagent.agent.eviction.observations import Observation
from nodeagent.agent.node.procfs import MeminfoReader, parse_meminfo, parse_meminfo_working_set
from nodeagent.core.clock import FakeClock

MI = 1 << 20
CAP = 1024 * MI


@pytest.mark.parametrize(("seconds", "slices"), [
    (10.0, [10.0]),  # far from the line: one sleep, no look
    (0.101, [0.101]),
    (0.1, [0.01] * 9 + [0.01]),
    (0.025, [0.01, 0.01, 0.005]),  # the 25 ms floor: two looks, then the pass
    (0.02, [0.01, 0.01]),
    (0.015, [0.01, 0.005]),
    (0.01, [0.01]),  # not longer than a look: the pass itself
    (0.004, [0.004]),
    (0.0, [0.0]),
])
def test_look_slices(seconds: float, slices: list[float]) -> None:
    got = look_slices(seconds, 0.01, 0.1)
    assert got == pytest.approx(slices)
    assert sum(got) == pytest.approx(seconds)


def test_the_defaults_look_every_10_ms_below_50_ms() -> None:
    assert (LOOK_S, LOOK_BELOW_S) == (0.01, 0.05)
    assert look_slices(0.025) == pytest.approx([0.01, 0.01, 0.005])
    assert look_slices(0.06) == [0.06]


def obs(available_mi: int) -> dict[str, Observation]:
    return {"memory.available": Observation(available_mi * MI, CAP, 1.0)}


HARD = parse_thresholds({"memory.available": "100Mi", "nodefs.available": "10%"}, {}, {}, {})
MEMORY = [t for t in HARD if t.signal == "memory.available"]


@pytest.mark.parametrize(("available_mi", "already", "expected"), [
    (150, [], []),  # above the line
    (99, [], MEMORY),  # crossed since the last pass: a pass now
    (99, MEMORY, []),  # the last pass met it already: the poll's cadence goes on
    (100, [], []),  # at the value is not below it
])
def test_newly_met(available_mi: int, already: list[object], expected: list[object]) -> None:
    assert newly_met(MEMORY, obs(available_mi), already) == expected  # type: ignore[arg-type]


def test_newly_met_ignores_signals_not_observed() -> None:
    assert newly_met(HARD, obs(99), []) == MEMORY  # nodefs has no observation in a look


MEMINFO = (b"MemTotal:        1017856 kB\nMemFree:          512000 kB\nMemAvailable:     700000 kB\n"
           b"Buffers:            1000 kB\nActive(file):      2000 kB\nInactive(file):   30000 kB\n"
           b"HugePages_Total:       0\nHugepagesize:       2048 kB\n")


def test_working_set_keys_parse_as_the_whole_file_parser_does() -> None:
    whole = parse_meminfo(MEMINFO.decode())
    assert parse_meminfo_working_set(MEMINFO) == {k: whole[k] for k in ("MemTotal", "MemFree", "Inactive(file)")}


def test_meminfo_reader_reads_the_live_file_each_time() -> None:
    r = MeminfoReader()
    try:
        first, second = r.read(), r.read()
    finally:
        r.close()
    assert set(first) == {"MemTotal", "MemFree", "Inactive(file)"} and first["MemTotal"] == second["MemTotal"] > 0
    r.close()  # idempotent


class Node:
    """Memory the test moves; the manager looks at it between passes. No pods to evict."""

    def __init__(self, available_mi: int, cross_at_look: int = 0) -> None:
        self.available_mi = available_mi
        self.cross_at_look = cross_at_look  # from this look on, memory is below the 100Mi line
        self.looks = 0
        self.passes = 0

    def observe(self) -> dict[str, Observation]:
        self.passes += 1
        return obs(self.available_mi)

    def observe_memory(self) -> dict[str, Observation]:
        self.looks += 1
        if self.cross_at_look and self.looks >= self.cross_at_look:
            self.available_mi = 99
        return obs(self.available_mi)

    def evictable_pods(self) -> list[object]:
        return []

    async def usage(self, pods: object, resource: object) -> dict[str, object]:
        return {}


def manager(node: Node) -> EvictionManager:
    clock = FakeClock()
    return EvictionManager(MEMORY, node.observe, node, EventRecorder(clock, "n1"), clock,  # type: ignore[arg-type]
                           transition_period=0.0, max_pod_grace_period=0, interval=10.0,
                           observe_memory=node.observe_memory)


async def test_a_look_that_finds_the_line_crossed_ends_the_sleep() -> None:
    node = Node(150, cross_at_look=2)
    m = manager(node)
    assert await m._sleep(0.05) == "look"  # four looks were due: the second found the line crossed
    assert node.looks == 2


async def test_looks_leave_a_threshold_met_at_the_last_pass_to_the_poll() -> None:
    node = Node(99)
    m = manager(node)
    await m.synchronize()  # finds it met, and no pod to evict
    assert m.state.thresholds_met == tuple(MEMORY)
    assert await m._sleep(0.025) == "poll"
    assert node.looks == 2


async def test_no_looks_far_from_the_line_or_without_a_memory_observer() -> None:
    node = Node(150)
    m = manager(node)
    assert await m._sleep(LOOK_BELOW_S + 0.01) == "poll" and node.looks == 0
    m.observe_memory = None
    assert await m._sleep(0.03) == "poll" and node.looks == 0


async def test_a_wake_up_ends_the_sleep_between_looks() -> None:
    node = Node(150)
    m = manager(node)
    sleep = asyncio.create_task(m._sleep(0.05))
    await asyncio.sleep(0.015)
    m.wake.set()
    assert await asyncio.wait_for(sleep, 0.05) == "again"
