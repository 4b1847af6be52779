"""Local-storage eviction (the kubelet's emptyDirLimitEviction): the pure check, the manager's
pass that evicts first and at once, and the pod side that measures only the limited emptyDirs."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from nodeagent.agent.config.thresholds import parse_thresholds
from nodeagent.agent.events import EventRecorder
from nodeagent.agent.eviction.local_storage import EmptyDirUsage, empty_dir_violation
from nodeagent.agent.eviction.manager import LOCAL_STORAGE, EvictionManager
from nodeagent.agent.eviction.observations import Observation, PodUsage
from nodeagent.agent.pods.eviction_access import local_storage_violations
from nodeagent.agent.pods.plan import PodPlan, plan_pod
from nodeagent.core.clock import FakeClock
from nodeagent.core.model import Pod, parse_pod
from nodeagent.core.quantity import Quantity, parse_quantity

MI = 1 << 20


def q(text: str) -> Quantity:
    return parse_quantity(text)


@pytest.mark.parametrize(("volumes", "message"), [
    ([], None),
    ([EmptyDirUsage("cache", q("1Mi"), MI)], None),  # at the limit: not over it
    ([EmptyDirUsage("cache", q("1Mi"), MI + 4096)], 'Usage of EmptyDir volume "cache" exceeds the limit "1Mi". '),
    ([EmptyDirUsage("cache", None, 10 * MI)], None),  # no sizeLimit
    ([EmptyDirUsage("cache", q("0"), 10 * MI)], None),  # a zero limit is no limit
    ([EmptyDirUsage("a", q("2Mi"), MI), EmptyDirUsage("b", q("500k"), 600_000)],
     'Usage of EmptyDir volume "b" exceeds the limit "500k". '),
])
def test_empty_dir_violation(volumes: list[EmptyDirUsage], message: str | None) -> None:
    assert empty_dir_violation(volumes) == message


def plan(name: str, volumes: list[dict[str, Any]], state_dir: str = "/state") -> PodPlan:
    return plan_pod(parse_pod({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "uid": f"uid-{name}"},
                               "spec": {"containers": [{"name": "c", "image": "busybox"}], "volumes": volumes}}),
                    state_dir=state_dir, memory_capacity=1 << 30)


class Pods:
    def __init__(self, plans: list[PodPlan], over: dict[str, str]) -> None:
        self.plans = plans
        self.over = over
        self.evicted: list[tuple[str, float, str]] = []

    def evictable_pods(self) -> list[PodPlan]:
        return self.plans

    async def usage(self, pods: Sequence[Pod], resource: str | None) -> dict[str, PodUsage]:
        return {p.metadata.uid: PodUsage(p.metadata.uid) for p in pods}

    async def evict(self, pod: Pod, grace_period: float, message: str) -> None:
        self.evicted.append((pod.metadata.name, grace_period, message))
        self.plans = [p for p in self.plans if p.pod.metadata.name != pod.metadata.name]

    async def reclaim_node_garbage(self) -> int:
        return 0

    async def local_storage(self) -> list[tuple[Pod, str]]:
        return [(p.pod, self.over[p.pod.metadata.name]) for p in self.plans if p.pod.metadata.name in self.over]


async def test_a_pod_over_its_empty_dir_limit_is_evicted_at_once_without_node_pressure() -> None:
    clock = FakeClock()
    pods = Pods([plan("a", []), plan("b", [])], {"b": 'Usage of EmptyDir volume "v" exceeds the limit "1Mi". '})
    events = EventRecorder(clock, "n1")
    m = EvictionManager(parse_thresholds({"memory.available": "100Mi"}, {}, {}, {}),
                        lambda: {"memory.available": Observation(1 << 30, 1 << 30, clock.now())}, pods, events, clock,
                        transition_period=300.0, max_pod_grace_period=30, interval=10.0,
                        local_storage=pods.local_storage)
    result = await m.synchronize()
    assert pods.evicted == [("b", 0, 'Usage of EmptyDir volume "v" exceeds the limit "1Mi". ')]
    assert result.signal == LOCAL_STORAGE and result.evicted == ("default/b",) and result.conditions == ()
    assert events.list()[-1]["reason"] == "Evicted"
    assert m.evictions_total == {"emptydirfs.limit": 1}  # the kubelet's metrics label
    assert (await m.synchronize()).evicted == ()  # gone: nothing more


def test_only_disk_empty_dirs_with_a_limit_are_measured(tmp_path: Path) -> None:
    over = plan("over", [{"name": "v", "emptyDir": {"sizeLimit": "64Ki"}}], str(tmp_path))
    under = plan("under", [{"name": "v", "emptyDir": {"sizeLimit": "1Mi"}}], str(tmp_path))
    unlimited = plan("free", [{"name": "v", "emptyDir": {}}], str(tmp_path))
    memory = plan("mem", [{"name": "v", "emptyDir": {"medium": "Memory", "sizeLimit": "1Ki"}}], str(tmp_path))
    for p, size in ((over, 128 << 10), (under, 128 << 10), (unlimited, 4 * MI), (memory, 128 << 10)):
        d = Path(p.log_dir) / "_volumes" / "kubernetes.io~empty-dir" / "v"
        d.mkdir(parents=True)
        (d / "data").write_bytes(b"x" * size)
    assert local_storage_violations([over, under, unlimited, memory]) == [
        (over.pod, 'Usage of EmptyDir volume "v" exceeds the limit "64Ki". ')]
