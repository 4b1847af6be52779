"""Eviction decisions, replayed from the kubelet's own tests with a fake clock.

Vectors: pkg/kubelet/eviction/helpers_test.go (TestThresholdsMet, TestPercentageThresholdsMet,
TestThresholdsFirstObservedAt, TestThresholdsMetGracePeriod, TestNodeConditions*,
TestThresholdsUpdatedStats, TestSortByEvictionPriority, TestMakeSignalObservations) and
eviction_manager_test.go (TestMinReclaim, TestDiskPressureNodeFs, TestAdmitUnderNodeConditions).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from nodeagent.agent.config.thresholds import Threshold, parse_thresholds
from nodeagent.agent.eviction.evaluate import (
    DISK_PRESSURE,
    MEMORY_PRESSURE,
    PID_PRESSURE,
    Decision,
    EvictionState,
    admit_under_pressure,
    conditions_observed_since,
    node_conditions,
    node_conditions_last_observed_at,
    reclaim_amount,
    sort_by_eviction_priority,
    step,
    thresholds_first_observed_at,
    thresholds_met,
    thresholds_met_grace_period,
    thresholds_updated_stats,
)
from nodeagent.agent.eviction.observations import (
    FsStats,
    Observation,
    fs_observations,
    has_dedicated_imagefs,
    memory_available,
    pid_available,
    working_set,
)
from nodeagent.agent.pods.plan import PodPlan, plan_pod
from nodeagent.core.clock import FakeClock
from nodeagent.core.model import parse_pod
from nodeagent.core.quantity import parse_quantity

Mi, Gi = 1024**2, 1024**3


def q(text: str) -> int:
    return parse_quantity(text).value()


def th(signal: str, value: str, grace: float = 0.0, min_reclaim: str | None = None) -> Threshold:
    kw: dict[str, Any] = {"grace_period": grace, "hard": grace == 0}
    if value.endswith("%"):
        kw["percentage"] = float(value[:-1]) / 100
    else:
        kw["quantity"] = parse_quantity(value)
    if min_reclaim is not None and min_reclaim.endswith("%"):
        kw["min_reclaim_percentage"] = float(min_reclaim[:-1]) / 100
    elif min_reclaim is not None:
        kw["min_reclaim"] = parse_quantity(min_reclaim)
    return Threshold(signal=signal, **kw)


def obs(available: str, capacity: str = "0", time: float = 0.0) -> Observation:
    return Observation(q(available), q(capacity), time)


HARD = th("memory.available", "1Gi", min_reclaim="500Mi")
PCT_MEM = th("memory.available", "20%", min_reclaim="5%")
PCT_DISK = th("nodefs.available", "30%")


@pytest.mark.parametrize(
    ("available", "enforce", "met"),
    [("500Mi", False, True), ("2Gi", False, False), ("1.05Gi", True, True), ("1.05Gi", False, False),
     ("2Gi", True, False), ("1Gi", False, False), (None, False, False)],
    ids=["met", "not-met", "met-with-min-reclaim", "same-without-min-reclaim", "not-met-with-min-reclaim",
         "equal-is-not-less", "no-observation"],
)
def test_thresholds_met(available: str | None, enforce: bool, met: bool) -> None:
    observations = {"memory.available": obs(available)} if available else {}
    assert thresholds_met([HARD], observations, enforce) == ([HARD] if met else [])
    assert thresholds_met([], observations, enforce) == []


@pytest.mark.parametrize(
    ("memory", "disk", "enforce", "expected"),
    [("100Mi", "100Gi", False, "MD"), ("300Mi", "400Gi", False, ""), ("300Mi", "100Gi", False, "D"),
     ("100Mi", "400Gi", False, "M"), ("225Mi", None, True, "M"), ("300Mi", None, True, "")],
    ids=["both", "none", "disk", "memory", "memory-min-reclaim", "memory-not-met-min-reclaim"],
)
def test_percentage_thresholds_met(memory: str, disk: str | None, enforce: bool, expected: str) -> None:
    observations = {"memory.available": obs(memory, "1000Mi")}
    if disk:
        observations["nodefs.available"] = obs(disk, "1000Gi")
    want = [t for key, t in (("M", PCT_MEM), ("D", PCT_DISK)) if key in expected]
    assert thresholds_met([PCT_MEM, PCT_DISK], observations, enforce) == want


def test_thresholds_first_observed_at() -> None:
    now, old = 1000.0, 940.0
    assert thresholds_first_observed_at([], {}, now) == {}
    assert thresholds_first_observed_at([HARD], {}, now) == {HARD: now}
    assert thresholds_first_observed_at([HARD], {HARD: old}, now) == {HARD: old}
    assert thresholds_first_observed_at([], {HARD: old}, now) == {}  # no longer met: forgotten


def test_thresholds_met_grace_period() -> None:
    now = 1000.0
    hard = th("memory.available", "1Gi")
    soft = th("memory.available", "2Gi", grace=60)
    assert thresholds_met_grace_period({}, now) == []
    assert thresholds_met_grace_period({hard: now}, now) == [hard]
    assert thresholds_met_grace_period({soft: now}, now) == []
    assert thresholds_met_grace_period({soft: now - 59.9}, now) == []
    assert thresholds_met_grace_period({soft: now - 60}, now) == [soft]
    assert thresholds_met_grace_period({soft: now - 120}, now) == [soft]


@pytest.mark.parametrize(
    ("signals", "expected"),
    [
        ([], ()),
        (["memory.available"], (MEMORY_PRESSURE,)),
        (["allocatableMemory.available"], (MEMORY_PRESSURE,)),
        (["nodefs.available", "imagefs.inodesFree"], (DISK_PRESSURE,)),
        (["pid.available", "nodefs.inodesFree", "memory.available"], (MEMORY_PRESSURE, DISK_PRESSURE, PID_PRESSURE)),
    ],
)
def test_node_conditions(signals: list[str], expected: tuple[str, ...]) -> None:
    assert node_conditions([th(s, "1") for s in signals]) == expected


def test_node_conditions_last_observed_at() -> None:
    now, old = 1000.0, 940.0
    assert node_conditions_last_observed_at([MEMORY_PRESSURE], {}, now) == {MEMORY_PRESSURE: now}
    assert node_conditions_last_observed_at([MEMORY_PRESSURE], {MEMORY_PRESSURE: old}, now) == {MEMORY_PRESSURE: now}
    assert node_conditions_last_observed_at([], {MEMORY_PRESSURE: old}, now) == {MEMORY_PRESSURE: old}


@pytest.mark.parametrize(
    ("period", "age", "expected"),
    [(120, 60, (MEMORY_PRESSURE,)), (30, 60, ()), (60, 60, ()), (0, 0, (MEMORY_PRESSURE,)), (0, 1, ())],
    ids=["in-period", "out-of-period", "exactly-period", "period-0-observed-now", "period-0-gone"],
)
def test_conditions_observed_since(period: float, age: float, expected: tuple[str, ...]) -> None:
    now = 1000.0
    assert conditions_observed_since({MEMORY_PRESSURE: now - age}, period, now) == expected


@pytest.mark.parametrize(
    ("time", "last", "fresh"),
    [(0, None, True), (100, None, True), (100, 160, False), (100, 100, False), (160, 100, True), (None, None, False)],
    ids=["no-time", "no-last-observation", "time-machine", "same-observation", "new-observation", "no-observation"],
)
def test_thresholds_updated_stats(time: float | None, last: float | None, fresh: bool) -> None:
    t = th("memory.available", "1Gi")
    current = {} if time is None else {"memory.available": Observation(1, 1, time)}
    previous = {} if last is None else {"memory.available": Observation(1, 1, last)}
    assert thresholds_updated_stats([t], current, previous) == ([t] if fresh else [])


@pytest.mark.parametrize("memory_signal", ["memory.available", "allocatableMemory.available"])
def test_sort_by_eviction_priority_memory_first(memory_signal: str) -> None:
    # memory goes first even when soft and the others hard: the kubelet sorts by signal only
    ts = [th("nodefs.available", "1Gi"), th("pid.available", "10"), th(memory_signal, "1Gi", grace=30)]
    observations = {t.signal: obs("0", "100Gi") for t in ts}
    assert [t.signal for t in sort_by_eviction_priority(ts, observations)] == [memory_signal, "nodefs.available", "pid.available"]


def test_sort_prefers_hard_then_larger_shortfall() -> None:
    soft = th("memory.available", "2Gi", grace=30)
    hard = th("memory.available", "1Gi")
    alloc = th("allocatableMemory.available", "1Gi")
    observations = {"memory.available": obs("500Mi", "8Gi"), "allocatableMemory.available": obs("100Mi", "6Gi")}
    assert sort_by_eviction_priority([soft, hard, alloc], observations) == [alloc, hard, soft]


def test_reclaim_amount() -> None:
    assert reclaim_amount(HARD, obs("500Mi", "8Gi")) == q("1Gi") + q("500Mi") - q("500Mi")
    assert reclaim_amount(th("memory.available", "100Mi"), obs("51200Ki", "8Gi")) == 50 * Mi
    assert reclaim_amount(th("nodefs.inodesFree", "5%"), Observation(10, 1000)) == 40
    assert reclaim_amount(th("memory.available", "100Mi"), obs("1Gi", "8Gi")) == 0


def mem(available: str, time: float) -> dict[str, Observation]:
    return {"memory.available": Observation(q(available), 8 * Gi, time)}


def disk(available: str, time: float) -> dict[str, Observation]:
    return {"nodefs.available": Observation(q(available), 16 * Gi, time)}


class Run:
    """Drives `step` pass by pass on a fake clock, as the kubelet tests drive synchronize."""

    def __init__(self, thresholds: list[Threshold], make: Callable[[str, float], dict[str, Observation]]) -> None:
        self.clock, self.state, self.thresholds, self.make = FakeClock(), EvictionState(), thresholds, make

    def after(self, seconds: float, available: str, stats_time: float | None = None) -> Decision:
        self.clock.advance(seconds)
        now = self.clock.now()
        observations = self.make(available, now if stats_time is None else stats_time)
        self.state, decision = step(self.state, self.thresholds, observations, now)
        return decision


def test_min_reclaim_sequence() -> None:
    """TestMinReclaim: a 1Gi threshold with 500Mi minimum reclaim, pass by pass."""
    run = Run([HARD], mem)
    d = run.after(0, "2Gi")
    assert d.conditions == () and not d.evict
    d = run.after(60, "500Mi")  # induce memory pressure
    assert d.conditions == (MEMORY_PRESSURE,) and d.evict and d.hard == (HARD,) and d.soft == ()
    assert d.resource == "memory" and d.signal == "memory.available"
    assert d.amount == 1 * Gi  # 1Gi + 500Mi - 500Mi
    d = run.after(60, "1.2Gi")  # below the threshold again, but not by the minimum reclaim
    assert d.conditions == (MEMORY_PRESSURE,) and d.evict and d.amount == q("1Gi") + q("500Mi") - q("1.2Gi")
    d = run.after(60, "2Gi")  # min reclaim satisfied: no eviction, condition held by the transition
    assert d.conditions == (MEMORY_PRESSURE,) and not d.evict
    d = run.after(300, "2Gi")  # past the transition period
    assert d.conditions == () and not d.evict
    assert run.state.thresholds_met == () and dict(run.state.thresholds_first_observed_at) == {}


def test_disk_pressure_soft_then_hard_sequence() -> None:
    """TestDiskPressureNodeFs: soft 2Gi/2m and hard 1Gi on nodefs, with a 5m transition."""
    hard, soft = th("nodefs.available", "1Gi"), th("nodefs.available", "2Gi", grace=120)
    run = Run([hard, soft], disk)
    assert run.after(0, "16Gi").conditions == ()
    d = run.after(60, "1.5Gi")  # soft threshold: pressure reported at once, no eviction before its grace
    assert d.conditions == (DISK_PRESSURE,) and not d.evict
    d = run.after(180, "1.5Gi")  # past the grace period: evict for the soft threshold
    assert d.evict and d.threshold == soft and d.soft == (soft,)
    assert d.resource == "ephemeral-storage" and d.amount == q("512Mi")
    d = run.after(20 * 60, "16Gi")  # pressure gone long ago
    assert d.conditions == () and not d.evict
    d = run.after(60, "750Mi")  # hard threshold: acts at once, and sorts before the soft one
    assert d.conditions == (DISK_PRESSURE,) and d.evict and d.threshold == hard
    assert d.amount == q("1Gi") - q("750Mi")
    d = run.after(60, "16Gi")
    assert d.conditions == (DISK_PRESSURE,) and not d.evict
    assert run.after(300, "16Gi").conditions == ()


def test_soft_grace_restarts_when_threshold_clears() -> None:
    soft = th("memory.available", "2Gi", grace=90)
    run = Run([soft], mem)
    run.after(0, "1Gi")
    run.after(60, "3Gi")  # cleared: the grace clock restarts
    assert not run.after(60, "1Gi").evict
    assert not run.after(89, "1Gi").evict
    d = run.after(1, "1Gi")
    assert d.evict and d.threshold == soft


def test_stale_stats_do_not_act_twice() -> None:
    run = Run([HARD], mem)
    assert run.after(0, "500Mi", stats_time=50.0).evict
    d = run.after(10, "500Mi", stats_time=50.0)  # the same stats again
    assert d.conditions == (MEMORY_PRESSURE,) and not d.evict
    assert run.after(0, "500Mi", stats_time=60.0).evict


def test_step_with_parsed_defaults_memory_before_disk() -> None:
    thresholds = parse_thresholds({"memory.available": "100Mi", "nodefs.available": "10%"}, None, None, None)
    observations = {"memory.available": Observation(50 * Mi, 8 * Gi), "nodefs.available": Observation(1 * Gi, 100 * Gi)}
    state, decision = step(EvictionState(), thresholds, observations, 10.0)
    assert decision.conditions == (MEMORY_PRESSURE, DISK_PRESSURE)
    assert decision.signal == "memory.available" and decision.amount == 50 * Mi
    assert [t.signal for t in decision.thresholds] == ["memory.available", "nodefs.available"]
    with pytest.raises(ValueError, match="pressure_transition_period"):
        step(state, thresholds, observations, 11.0, pressure_transition_period=-1)


def test_state_is_immutable() -> None:
    state, _ = step(EvictionState(), [HARD], mem("500Mi", 0), 1.0)
    with pytest.raises(AttributeError):
        state.thresholds_met = ()  # type: ignore[misc]
    with pytest.raises(TypeError):
        state.thresholds_first_observed_at[HARD] = 0.0  # type: ignore[index]


# --- admission under pressure ---------------------------------------------------------------

RES = {"cpu": "100m", "memory": "1Gi"}


def pod(name: str, qos: str, **spec: Any) -> PodPlan:
    """The pod as admission planned it (its QoS class and criticality derived once)."""
    resources = {"Guaranteed": {"requests": RES, "limits": RES}, "Burstable": {"requests": RES}, "BestEffort": {}}[qos]
    annotations = spec.pop("annotations", {})
    return plan_pod(parse_pod({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "uid": name, "annotations": annotations},
        "spec": {"containers": [{"name": "c", "command": ["true"], "resources": resources}], **spec},
    }), state_dir="/state", memory_capacity=8 * 1024**3)


@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        ((), (True, True, True)),
        ((MEMORY_PRESSURE,), (True, True, False)),
        ((MEMORY_PRESSURE, DISK_PRESSURE), (False, False, False)),
        ((DISK_PRESSURE,), (False, False, False)),
        ((PID_PRESSURE,), (False, False, False)),
    ],
)
def test_admit_under_node_conditions(conditions: tuple[str, ...], expected: tuple[bool, bool, bool]) -> None:
    pods = [pod("guaranteed-pod", "Guaranteed"), pod("burstable-pod", "Burstable"), pod("best-effort-pod", "BestEffort")]
    assert tuple(admit_under_pressure(p, conditions)[0] for p in pods) == expected


def test_admit_rejection_reads_like_the_kubelet() -> None:
    ok, reason, message = admit_under_pressure(pod("be", "BestEffort"), [MEMORY_PRESSURE])
    assert (ok, reason, message) == (False, "Evicted", "The node had condition: [MemoryPressure]. ")
    _, _, message = admit_under_pressure(pod("g", "Guaranteed"), [DISK_PRESSURE, MEMORY_PRESSURE])
    assert message == "The node had condition: [MemoryPressure DiskPressure]. "
    assert admit_under_pressure(pod("g", "Guaranteed"), []) == (True, None, "")


def test_critical_pods_always_admitted() -> None:
    conditions = (MEMORY_PRESSURE, DISK_PRESSURE, PID_PRESSURE)
    assert admit_under_pressure(pod("c1", "BestEffort", priorityClassName="system-node-critical"), conditions)[0]
    assert admit_under_pressure(pod("c2", "BestEffort", priority=2_000_000_000), conditions)[0]
    assert admit_under_pressure(pod("c3", "BestEffort", annotations={"kubernetes.io/config.source": "file"}), conditions)[0]
    assert not admit_under_pressure(pod("c4", "BestEffort", priority=1_999_999_999), conditions)[0]


MP = "node.kubernetes.io/memory-pressure"


@pytest.mark.parametrize(
    ("toleration", "admitted"),
    [({"key": MP, "operator": "Exists", "effect": "NoSchedule"}, True), ({"key": MP, "operator": "Exists"}, True),
     ({"operator": "Exists"}, True), ({"key": MP, "operator": "Equal", "value": "", "effect": "NoSchedule"}, True),
     ({"key": MP, "operator": "Equal", "value": "x"}, False), ({"key": MP, "operator": "Exists", "effect": "NoExecute"}, False),
     ({"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"}, False)],
)
def test_best_effort_tolerating_memory_pressure(toleration: dict[str, str], admitted: bool) -> None:
    be = pod("be", "BestEffort", tolerations=[toleration])
    assert admit_under_pressure(be, [MEMORY_PRESSURE])[0] is admitted
    assert admit_under_pressure(be, [MEMORY_PRESSURE, DISK_PRESSURE])[0] is False


# --- observations ---------------------------------------------------------------------------

def test_memory_and_pid_available() -> None:
    assert working_set(700 * Mi, 200 * Mi) == 500 * Mi and working_set(100, 200) == 0
    assert memory_available(8 * Gi, usage=3 * Gi, inactive_file=1 * Gi, time=5.0) == Observation(6 * Gi, 8 * Gi, 5.0)
    assert memory_available(1 * Gi, usage=3 * Gi, inactive_file=0).available == 0
    with pytest.raises(ValueError, match="usage"):
        memory_available(1 * Gi, usage=-1, inactive_file=0)
    assert pid_available(255816, 1000) == Observation(255816 - 1000, 255816)  # TestMakeSignalObservations
    assert pid_available(4194304, 1000, threads_max=63000) == Observation(62000, 63000)


def test_fs_observations_fold_imagefs_into_nodefs() -> None:
    root = FsStats(f_frsize=4096, f_blocks=1000, f_bavail=250, f_files=500, f_favail=100, device=1)
    out = fs_observations(root, time=7.0)
    assert out["nodefs.available"] == Observation(250 * 4096, 1000 * 4096, 7.0)
    assert out["nodefs.inodesFree"] == Observation(100, 500, 7.0)
    assert out["imagefs.available"] == out["nodefs.available"]
    assert out["imagefs.inodesFree"] == out["nodefs.inodesFree"]
    same = FsStats(4096, 1, 1, 1, 1, device=1)
    assert fs_observations(root, same, time=7.0)["imagefs.available"] == out["nodefs.available"]
    assert not has_dedicated_imagefs(root, same) and not has_dedicated_imagefs(root, None)
    other = FsStats(f_frsize=1024, f_blocks=2048, f_bavail=1024, f_files=1024 * 1024, f_favail=1024, device=2)
    split = fs_observations(root, other)
    assert split["imagefs.available"] == Observation(1024 * 1024, 2 * 1024 * 1024)
    assert split["imagefs.inodesFree"] == Observation(1024, 1024 * 1024)
    assert has_dedicated_imagefs(root, other)
    with pytest.raises(ValueError, match="f_bavail"):
        FsStats(4096, 10, -1, 10, 10)

