"""Eviction ranking, victim selection, messages and grace periods against the kubelet's vectors.

Ranking vectors: pkg/kubelet/eviction/helpers_test.go (TestOrderedByExceedsRequestMemory,
TestOrderedByPriority, TestOrderedByMemory, TestOrderedByPriorityMemory, TestOrderedbyDisk,
TestOrderedbyInodes, TestOrderedByPriorityDisk, TestOrderedByPriorityInodes,
TestOrderedByPriorityProcess); victims and grace periods from eviction_manager_test.go
(TestMinReclaim, TestDiskPressureNodeFs). Messages from the kubelet's format strings.
"""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.agent.config.thresholds import Threshold
from nodeagent.agent.eviction.observations import ContainerUsage, Observation, PodUsage
from nodeagent.agent.eviction.ranking import (
    evictable,
    eviction_grace_period,
    eviction_message,
    grace_period_override,
    rank_disk,
    rank_for_signal,
    rank_memory,
    rank_pids,
    select_victims,
)
from nodeagent.agent.pods.plan import PodPlan, plan_pod
from nodeagent.core.model import Pod, parse_pod
from nodeagent.core.quantity import parse_quantity

LOW, DEFAULT, HIGH = -1, 0, 1
Mi, Gi = 1024**2, 1024**3


def q(text: str) -> int:
    return parse_quantity(text).value()


def pod(name: str, priority: int | None = DEFAULT, requests: dict[str, str] | None = None, limits: dict[str, str] | None = None, **meta: Any) -> PodPlan:
    """The pod as eviction sees it: its plan (criticality, requests), derived once at admission."""
    return plan_pod(parse_pod({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "uid": name, "annotations": meta.pop("annotations", {})},
        "spec": {
            **({"priority": priority} if priority is not None else {}),
            "containers": [{"name": name, "command": ["true"], "resources": {"requests": requests or {}, "limits": limits or {}}}],
            **meta,
        },
    }), state_dir="/state", memory_capacity=64 * Gi)


def names(pods: list[PodPlan]) -> list[str]:
    return [p.pod.metadata.name for p in pods]


def mem_usage(**ws: str) -> dict[str, PodUsage]:
    return {k.replace("_", "-"): PodUsage(k.replace("_", "-"), memory_working_set=q(v)) for k, v in ws.items()}


def test_exceeds_request_memory_first() -> None:
    below = pod("below-requests", -1, {"memory": "200Mi"})
    exceeds = pod("exceeds-requests", 1, {"memory": "100Mi"})
    usage = {"below-requests": PodUsage("below-requests", 199 * Mi), "exceeds-requests": PodUsage("exceeds-requests", 101 * Mi)}
    assert names(rank_memory([below, exceeds], usage)) == ["exceeds-requests", "below-requests"]


def test_priority_order_without_stats() -> None:
    low = pod("low-priority", -134)
    medium = pod("medium-priority", 1, {"cpu": "100m", "memory": "100Mi"}, {"cpu": "200m", "memory": "200Mi"})
    high = pod("high-priority", 12534, {"cpu": "200m", "memory": "200Mi"}, {"cpu": "200m", "memory": "200Mi"})
    for rank in (rank_memory, rank_pids, rank_disk):
        assert names(rank([high, medium, low], {})) == ["low-priority", "medium-priority", "high-priority"]


def test_ordered_by_memory() -> None:
    pods = [
        pod("best-effort-high"), pod("best-effort-low"),
        pod("burstable-high", requests={"memory": "100Mi"}, limits={"memory": "1Gi"}),
        pod("burstable-low", requests={"memory": "100Mi"}, limits={"memory": "1Gi"}),
        pod("guaranteed-high", requests={"memory": "1Gi"}, limits={"memory": "1Gi"}),
        pod("guaranteed-low", requests={"memory": "1Gi"}, limits={"memory": "1Gi"}),
    ]
    usage = mem_usage(best_effort_high="500Mi", best_effort_low="300Mi", burstable_high="800Mi", burstable_low="300Mi", guaranteed_high="800Mi", guaranteed_low="200Mi")
    assert names(rank_memory(pods, usage)) == [
        "burstable-high", "best-effort-high", "best-effort-low", "burstable-low", "guaranteed-high", "guaranteed-low",
    ]


PRIORITY_VECTOR = [  # name, priority, request, usage: expected order is the list order
    ("above-requests-low-priority-high-usage", LOW, None, "500Mi"),
    ("above-requests-low-priority-low-usage", LOW, None, "50Mi"),
    ("above-requests-high-priority-high-usage", HIGH, "100Mi", "600Mi"),
    ("above-requests-high-priority-low-usage", HIGH, "100Mi", "150Mi"),
    ("below-requests-low-priority-high-usage", LOW, "1Gi", "800Mi"),
    ("below-requests-low-priority-low-usage", LOW, "1Gi", "200Mi"),
    ("below-requests-high-priority-high-usage", HIGH, "1Gi", "800Mi"),
    ("below-requests-high-priority-low-usage", HIGH, "1Gi", "200Mi"),
]


@pytest.mark.parametrize("resource", ["memory", "ephemeral-storage"])
def test_ordered_by_exceeds_then_priority_then_usage(resource: str) -> None:
    pods = [pod(n, p, {resource: r} if r else None) for n, p, r, _ in PRIORITY_VECTOR]
    field = "memory_working_set" if resource == "memory" else "ephemeral_storage"
    usage = {n: PodUsage(n, **{field: q(u)}) for n, _, _, u in PRIORITY_VECTOR}
    ranked = rank_memory(reversed(pods), usage) if resource == "memory" else rank_disk(reversed(pods), usage)
    assert names(ranked) == [n for n, *_ in PRIORITY_VECTOR]


def test_ordered_by_disk() -> None:
    spec = [  # name, ephemeral-storage request/limit, usage (rootfs + logs + local volumes)
        ("best-effort-high", None, "300Mi"), ("best-effort-low", None, "100Mi"),
        ("burstable-high", "100Mi", "350Mi"), ("burstable-low", "100Mi", "110Mi"),
        ("guaranteed-high", "400Mi", "375Mi"), ("guaranteed-low", "400Mi", "120Mi"),
    ]
    pods = [pod(n, requests={"ephemeral-storage": r} if r else None) for n, r, _ in spec]
    usage = {n: PodUsage(n, ephemeral_storage=q(u)) for n, _, u in spec}
    assert names(rank_disk(pods, usage)) == [
        "best-effort-high", "burstable-high", "best-effort-low", "burstable-low", "guaranteed-high", "guaranteed-low",
    ]


def test_ordered_by_inodes() -> None:
    pods = [pod("low"), pod("medium"), pod("high")]
    usage = {"low": PodUsage("low", inodes=200000), "medium": PodUsage("medium", inodes=300000), "high": PodUsage("high", inodes=400000)}
    assert names(rank_disk(pods, usage, "inodes")) == ["high", "medium", "low"]
    spec = [("low-priority-high-usage", LOW, 400000), ("low-priority-low-usage", LOW, 100000),
            ("high-priority-high-usage", HIGH, 350000), ("high-priority-low-usage", HIGH, 150000)]
    pods = [pod(n, p) for n, p, _ in reversed(spec)]
    usage = {n: PodUsage(n, inodes=i) for n, _, i in spec}
    assert names(rank_disk(pods, usage, "inodes")) == [n for n, *_ in spec]


def test_inodes_rank_subtracts_the_storage_request_like_the_kubelet() -> None:
    """The kubelet's disk comparator subtracts the ephemeral-storage request even for inodes."""
    a = pod("many-inodes-big-request", requests={"ephemeral-storage": "1000"})
    b = pod("few-inodes-no-request")
    usage = {"many-inodes-big-request": PodUsage("many-inodes-big-request", inodes=400),
             "few-inodes-no-request": PodUsage("few-inodes-no-request", inodes=100)}
    assert names(rank_disk([a, b], usage, "inodes")) == ["few-inodes-no-request", "many-inodes-big-request"]
    with pytest.raises(ValueError, match="resource"):
        rank_disk([a], usage, "memory")


def test_ordered_by_priority_then_processes() -> None:
    spec = [("low-priority-high-usage", LOW, 20), ("low-priority-low-usage", LOW, 6),
            ("high-priority-high-usage", HIGH, 20), ("high-priority-low-usage", HIGH, 5)]
    pods = [pod(n, p) for n, p, _ in reversed(spec)]
    usage = {n: PodUsage(n, processes=c) for n, _, c in spec}
    assert names(rank_pids(pods, usage)) == [n for n, *_ in spec]


def test_pods_without_stats_rank_first() -> None:
    pods = [pod("has-stats", LOW), pod("no-stats-high", HIGH), pod("no-stats-low", DEFAULT)]
    usage = {"has-stats": PodUsage("has-stats", memory_working_set=9 * Gi, processes=99, ephemeral_storage=9 * Gi)}
    for rank in (rank_memory, rank_pids, rank_disk):
        assert names(rank(pods, usage)) == ["no-stats-low", "no-stats-high", "has-stats"]


def test_critical_pods_are_never_ranked_or_chosen() -> None:
    static = pod("static", annotations={"kubernetes.io/config.source": "file"})
    mirror = pod("mirror", annotations={"kubernetes.io/config.mirror": "x"})
    cluster_critical = pod("cluster-critical", None, priorityClassName="system-cluster-critical")
    node_critical = pod("node-critical", priority=2_000_001_000)
    just_below = pod("just-below", 1_999_999_999)
    pods = [static, mirror, cluster_critical, node_critical, just_below]
    usage = {p.uid: PodUsage(p.uid, 10 * Gi, 10 * Gi, 10, 10) for p in pods}
    assert names(evictable(pods)) == ["just-below"]
    for signal in ("memory.available", "nodefs.available", "nodefs.inodesFree", "pid.available"):
        assert names(rank_for_signal(signal, pods, usage)) == ["just-below"]
    assert names(select_victims(pods, usage, 100 * Gi, "memory")) == ["just-below"]


def test_rank_for_signal_uses_the_signal_resource() -> None:
    a, b = pod("a"), pod("b")
    usage = {"a": PodUsage("a", memory_working_set=1, ephemeral_storage=9, inodes=1, processes=9),
             "b": PodUsage("b", memory_working_set=9, ephemeral_storage=1, inodes=9, processes=1)}
    assert names(rank_for_signal("memory.available", [a, b], usage)) == ["b", "a"]
    assert names(rank_for_signal("allocatableMemory.available", [a, b], usage)) == ["b", "a"]
    assert names(rank_for_signal("imagefs.available", [a, b], usage)) == ["a", "b"]
    assert names(rank_for_signal("imagefs.inodesFree", [a, b], usage)) == ["b", "a"]
    assert names(rank_for_signal("pid.available", [a, b], usage)) == ["a", "b"]
    with pytest.raises(ValueError, match="signal"):
        rank_for_signal("mem.available", [a], usage)


MIN_RECLAIM_PODS = [  # TestMinReclaim's pods: name, priority, requests, working set
    ("guaranteed-low-priority-high-usage", LOW, {"cpu": "100m", "memory": "1Gi"}, "900Mi"),
    ("burstable-below-requests", DEFAULT, {"cpu": "100m", "memory": "100Mi"}, "50Mi"),
    ("burstable-above-requests", DEFAULT, {"cpu": "100m", "memory": "100Mi"}, "400Mi"),
    ("best-effort-high-priority-high-usage", HIGH, None, "400Mi"),
    ("best-effort-low-priority-low-usage", LOW, None, "100Mi"),
]


@pytest.mark.parametrize(
    ("needed", "victims"),
    [
        (0, []),
        (-5, []),
        (1, ["best-effort-low-priority-low-usage"]),  # the kubelet's single victim
        (100 * Mi, ["best-effort-low-priority-low-usage"]),
        (100 * Mi + 1, ["best-effort-low-priority-low-usage", "burstable-above-requests"]),
        (500 * Mi, ["best-effort-low-priority-low-usage", "burstable-above-requests"]),
        (900 * Mi, ["best-effort-low-priority-low-usage", "burstable-above-requests", "best-effort-high-priority-high-usage"]),
        (100 * Gi, [n for n in ("best-effort-low-priority-low-usage", "burstable-above-requests",  # noqa: C416
                                 "best-effort-high-priority-high-usage", "guaranteed-low-priority-high-usage",
                                 "burstable-below-requests")]),
    ],
)
def test_select_victims_for_shortfall(needed: int, victims: list[str]) -> None:
    pods = [pod(n, p, r, r) for n, p, r, _ in MIN_RECLAIM_PODS]
    usage = {n: PodUsage(n, memory_working_set=q(ws)) for n, *_, ws in MIN_RECLAIM_PODS}
    ranked = rank_memory(pods, usage)
    assert names(ranked)[0] == "best-effort-low-priority-low-usage"
    assert names(select_victims(ranked, usage, needed, "memory")) == victims


def test_select_victims_counts_pods_without_stats_as_zero() -> None:
    pods = [pod("no-stats"), pod("big")]
    usage = {"big": PodUsage("big", ephemeral_storage=5 * Gi)}
    ranked = rank_disk(pods, usage)
    assert names(select_victims(ranked, usage, 1 * Gi, "ephemeral-storage")) == ["no-stats", "big"]
    with pytest.raises(ValueError, match="resource"):
        select_victims(ranked, usage, 1, "cpu")


def test_disk_pressure_victim_matches_kubelet() -> None:
    """TestDiskPressureNodeFs evicts low-priority-high-usage first."""
    spec = [("low-priority-high-usage", LOW, "900Mi"), ("below-requests", DEFAULT, "50Mi"), ("above-requests", DEFAULT, "400Mi"),
            ("high-priority-high-usage", HIGH, "400Mi"), ("low-priority-low-usage", LOW, "100Mi")]
    pods = [pod(n, p, {"cpu": "100m", "memory": "100Mi"}) for n, p, _ in spec]
    usage = {n: PodUsage(n, ephemeral_storage=q(u)) for n, _, u in spec}
    assert names(select_victims(rank_for_signal("nodefs.available", pods, usage), usage, q("1Gi") - q("750Mi"), "ephemeral-storage")) == [
        "low-priority-high-usage",
    ]


def threshold(value: str, grace: float = 0.0, signal: str = "memory.available") -> Threshold:
    if value.endswith("%"):
        return Threshold(signal=signal, percentage=float(value[:-1]) / 100, grace_period=grace, hard=grace == 0)
    return Threshold(signal=signal, quantity=parse_quantity(value), grace_period=grace, hard=grace == 0)


def two_container_pod() -> Pod:
    return parse_pod({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "uid": "web"},
        "spec": {"containers": [
            {"name": "app", "command": ["true"], "resources": {"requests": {"memory": "100Mi", "ephemeral-storage": "1Gi"}}},
            {"name": "sidecar", "command": ["true"]},
            {"name": "quiet", "command": ["true"], "resources": {"requests": {"memory": "128M"}}},
        ]},
    })


def test_eviction_message_memory() -> None:
    usage = PodUsage("web", 400 * Mi, containers=(
        ContainerUsage("app", memory_working_set=300 * Mi),
        ContainerUsage("sidecar", memory_working_set=93434880),
        ContainerUsage("quiet", memory_working_set=10 * Mi),
    ))
    message = eviction_message("memory", threshold("100Mi"), Observation(50 * Mi, 8 * Gi), two_container_pod(), usage)
    assert message == (
        "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. "
        "Container app was using 300Mi, request is 100Mi, has larger consumption of memory. "
        "Container sidecar was using 91245Ki, request is 0, has larger consumption of memory. "
    )


def test_eviction_message_disk_inodes_and_no_stats() -> None:
    web = two_container_pod()
    usage = PodUsage("web", ephemeral_storage=3 * Gi, containers=(ContainerUsage("app", ephemeral_storage=2 * Gi),))
    message = eviction_message("ephemeral-storage", threshold("10%", signal="nodefs.available"), Observation(47166528 * 1024, 483359767300), web, usage)
    assert message == (
        "The node was low on resource: ephemeral-storage. Threshold quantity: 48335976730, available: 47166528Ki. "
        "Container app was using 2Gi, request is 1Gi, has larger consumption of ephemeral-storage. "
    )
    inodes = eviction_message("inodes", threshold("5%", signal="nodefs.inodesFree"), Observation(1000, 1000000), web, usage)
    assert inodes == "The node was low on resource: inodes. Threshold quantity: 50000, available: 1k. "
    assert eviction_message("memory", None, None, web, None) == "The node was low on resource: memory. "
    assert eviction_message("pid.available", None, None, web, None) == "The node was low on resource: pids. "
    with pytest.raises(ValueError, match="resource"):
        eviction_message("cpu", None, None, web, None)


@pytest.mark.parametrize(
    ("grace", "max_grace", "pod_grace", "override", "effective"),
    [
        (0, 30, 30, 1, 1),  # hard: immediate (1s), whatever the settings
        (0, 300, 600, 1, 1),
        (120, 5, 30, 5, 5),  # soft: the smaller of the two (TestDiskPressureNodeFs expects 5)
        (120, 60, 30, 30, 30),  # the setting caps, it does not lengthen (kubernetes#64530)
        (120, 0, 30, 0, 1),  # default evictionMaxPodGracePeriod 0: override 0, pod workers floor 1
        (120, 30, 0, 0, 1),
    ],
)
def test_grace_periods(grace: float, max_grace: int, pod_grace: int, override: int, effective: int) -> None:
    victim = parse_pod({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "v"},
                        "spec": {"terminationGracePeriodSeconds": pod_grace, "containers": [{"name": "c", "command": ["true"]}]}})
    t = threshold("1Gi", grace)
    assert grace_period_override(t, victim, max_grace) == override
    assert eviction_grace_period(t, victim, max_grace) == effective
