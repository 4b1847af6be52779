"""The eviction manager loop with a fake node: observations, pods and time are all in the test."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from nodeagent.agent.config.thresholds import parse_thresholds
from nodeagent.agent.events import EventRecorder
from nodeagent.agent.eviction.manager import EvictionManager
from nodeagent.agent.eviction.observations import Observation, PodUsage
from nodeagent.agent.pods.plan import PodPlan, plan_pod
from nodeagent.core.clock import FakeClock
from nodeagent.core.model import Pod, parse_pod

MI = 1024 * 1024
CAP = 1024 * MI


def pod(name: str, *, priority: int = 0, request: str | None = None) -> PodPlan:
    """The pod as admission planned it: what the eviction manager is given."""
    resources = {"requests": {"memory": request}} if request else {}
    return plan_pod(parse_pod({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "uid": f"uid-{name}"},
                               "spec": {"priority": priority,
                                        "containers": [{"name": "c", "command": ["x"], "resources": resources}]}}),
                    state_dir="/state", memory_capacity=CAP)


class FakeNode:
    """Memory that pods use; evicting a pod gives its usage back."""

    def __init__(self, clock: FakeClock, other: int, pods: list[tuple[PodPlan, int]]) -> None:
        self.clock = clock
        self.other = other
        self.pods = {p.pod.metadata.name: (p, used) for p, used in pods}
        self.evicted: list[tuple[str, float, str]] = []
        self.killed: list[str] = []  # kill() calls (hard evictions), in order
        self.garbage = 0

    def observe(self) -> dict[str, Observation]:
        used = self.other + sum(u for _, u in self.pods.values())
        return {"memory.available": Observation(CAP - used, CAP, self.clock.now()),
                "nodefs.available": Observation(10**12 - self.garbage, 10**12, self.clock.now())}

    def evictable_pods(self) -> list[PodPlan]:
        return [p for p, _ in self.pods.values()]

    async def usage(self, pods: Sequence[Pod], resource: str | None) -> dict[str, PodUsage]:
        return {p.metadata.uid: PodUsage(p.metadata.uid, memory_working_set=self.pods[p.metadata.name][1]) for p in pods}

    def kill(self, pod: Pod) -> None:
        self.killed.append(pod.metadata.name)

    async def evict(self, pod: Pod, grace_period: float, message: str) -> None:
        self.evicted.append((pod.metadata.name, grace_period, message))
        del self.pods[pod.metadata.name]

    async def reclaim_node_garbage(self) -> int:
        freed, self.garbage = self.garbage, 0
        return freed


def manager(node: FakeNode, clock: FakeClock, hard: dict[str, str] | None = None, **kw: object) -> EvictionManager:
    thresholds = parse_thresholds(hard if hard is not None else {"memory.available": "100Mi"},
                                  kw.pop("soft", {}), kw.pop("grace", {}), kw.pop("min_reclaim", {}))
    return EvictionManager(thresholds, node.observe, node, EventRecorder(clock, "n1"), clock,
                           transition_period=float(kw.pop("transition", 300.0)),
                           max_pod_grace_period=int(kw.pop("max_grace", 0)), interval=10.0)


async def test_no_pressure_no_eviction() -> None:
    clock = FakeClock()
    node = FakeNode(clock, 100 * MI, [(pod("a"), 200 * MI)])
    m = manager(node, clock)
    result = await m.synchronize()
    assert result.conditions == () and node.evicted == [] and m.admit(pod("be")) is None


async def test_hard_threshold_evicts_as_many_as_needed_in_one_pass_in_rank_order() -> None:
    clock = FakeClock()
    # 1024 - 100 - (300+250+200+150) = 24Mi available: need 76Mi+ back; best-effort hogs go first.
    pods = [(pod("big-be"), 300 * MI), (pod("be"), 250 * MI), (pod("bu", request="500Mi"), 200 * MI),
            (pod("crit", priority=2000000000), 150 * MI)]
    node = FakeNode(clock, 100 * MI, pods)
    m = manager(node, clock)
    result = await m.synchronize()
    assert [e[0] for e in node.evicted] == ["big-be"]  # its 300Mi covers the 76Mi shortfall
    assert node.evicted[0][1] == 0  # hard: killed at once
    assert node.killed == ["big-be"]  # SIGKILLed before its eviction's bookkeeping
    assert "The node was low on resource: memory." in node.evicted[0][2]
    assert result.conditions == ("MemoryPressure",)
    assert m.admit(pod("new-be")) == ("Evicted", "The node had condition: [MemoryPressure]. ")
    assert m.admit(pod("new-bu", request="10Mi")) is None
    assert m.events.list()[-1]["reason"] == "Evicted"


async def test_min_reclaim_takes_several_victims_and_never_the_critical_one() -> None:
    clock = FakeClock()
    pods = [(pod("a"), 100 * MI), (pod("b"), 100 * MI), (pod("c"), 100 * MI),
            (pod("crit", priority=2000001000), 500 * MI)]
    node = FakeNode(clock, 150 * MI, pods)  # available 74Mi < 100Mi; with 200Mi min reclaim need 226Mi
    m = manager(node, clock, min_reclaim={"memory.available": "200Mi"})
    await m.synchronize()
    assert sorted(e[0] for e in node.evicted) == ["a", "b", "c"]
    assert "crit" not in [e[0] for e in node.evicted]


async def test_soft_threshold_waits_for_grace_period_then_uses_pod_grace_cap() -> None:
    clock = FakeClock()
    node = FakeNode(clock, 600 * MI, [(pod("a"), 200 * MI)])  # 224Mi available < 300Mi soft
    m = manager(node, clock, hard={}, soft={"memory.available": "300Mi"}, grace={"memory.available": "30s"},
                max_grace=5)
    await m.synchronize()
    assert node.evicted == [] and m.conditions == ("MemoryPressure",)
    clock.advance(29)
    await m.synchronize()
    assert node.evicted == []
    clock.advance(2)
    await m.synchronize()
    assert [(e[0], e[1]) for e in node.evicted] == [("a", 5)]  # min(evictionMaxPodGracePeriod, 30)
    assert node.killed == []  # soft: the pod gets its grace period, no kill up front


async def test_condition_clears_only_after_transition_period() -> None:
    clock = FakeClock()
    hog = pod("hog")
    node = FakeNode(clock, 100 * MI, [(hog, 900 * MI)])
    m = manager(node, clock, transition=60)
    await m.synchronize()
    assert node.evicted and m.conditions == ("MemoryPressure",)
    clock.advance(59)
    await m.synchronize()
    assert m.conditions == ("MemoryPressure",)
    clock.advance(2)
    await m.synchronize()
    assert m.conditions == ()


async def test_disk_pressure_reclaims_garbage_before_evicting() -> None:
    clock = FakeClock()
    node = FakeNode(clock, 0, [(pod("a"), 1)])
    node.garbage = int(0.95 * 10**12)  # 5% available < 10%
    m = manager(node, clock, hard={"nodefs.available": "10%"})
    result = await m.synchronize()
    assert result.reclaimed_bytes == int(0.95 * 10**12)
    assert node.evicted == [] and result.conditions == ("DiskPressure",)


async def test_reload_swaps_thresholds_without_touching_pods() -> None:
    clock = FakeClock()
    node = FakeNode(clock, 100 * MI, [(pod("a"), 500 * MI)])  # 424Mi available
    m = manager(node, clock)
    await m.synchronize()
    assert node.evicted == []
    m.set_thresholds(parse_thresholds({"memory.available": "500Mi"}, {}, {}, {}), transition_period=300,
                     max_pod_grace_period=0)
    assert m.wake.is_set()
    await m.synchronize()
    assert [e[0] for e in node.evicted] == ["a"]


@pytest.mark.parametrize("available_mi,expected", [(50, ("MemoryPressure",)), (500, ())])
async def test_conditions_follow_observation(available_mi: int, expected: tuple[str, ...]) -> None:
    clock = FakeClock()
    node = FakeNode(clock, CAP - available_mi * MI, [])
    m = manager(node, clock)
    result = await m.synchronize()
    assert result.conditions == expected
