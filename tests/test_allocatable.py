"""Node allocatable and capacity, with vectors from the kubelet's
pkg/kubelet/cm/node_container_manager_linux_test.go and the "Reserve Compute Resources" docs."""

from __future__ import annotations

import os
import struct

import pytest

from nodeagent.agent.config.thresholds import Threshold, parse_thresholds
from nodeagent.agent.node.allocatable import (
    enforced_pods_allocatable,
    hard_eviction_reservation,
    node_allocatable,
    node_allocatable_reservation,
    over_reserved,
)
from nodeagent.agent.node.capacity import (
    Capacity,
    discover_capacity,
    fs_totals,
    nearest_existing,
    parse_meminfo_total,
    parse_pid_max,
)
from nodeagent.core.quantity import Quantity, parse_quantity


def f32(value: float) -> float:
    return struct.unpack("f", struct.pack("f", value))[0]


def rl(cpu: str = "", memory: str = "", storage: str = "") -> dict[str, Quantity]:
    """The kubelet tests' getResourceList / getEphemeralStorageResourceList."""
    out = {}
    for name, text in (("cpu", cpu), ("memory", memory), ("ephemeral-storage", storage)):
        if text:
            out[name] = parse_quantity(text)
    return out


def memory_threshold(value: Quantity | float | None) -> list[Threshold]:
    if value is None:
        return [Threshold("memory.available")]  # the kubelet tests' zero ThresholdValue
    if isinstance(value, Quantity):
        return [Threshold("memory.available", quantity=value)]
    return [Threshold("memory.available", percentage=f32(value))]


def storage_threshold(value: Quantity | float | None) -> list[Threshold]:
    if value is None:
        return [Threshold("nodefs.available")]
    if isinstance(value, Quantity):
        return [Threshold("nodefs.available", quantity=value)]
    return [Threshold("nodefs.available", percentage=f32(value))]


MI100 = parse_quantity("100Mi")

# TestNodeAllocatableReservationForScheduling (cpu/memory): kube, system, capacity, threshold, expected
RESERVATION_CASES = [
    (rl("100m", "100Mi"), rl("50m", "50Mi"), rl("10", "10Gi"), None, rl("150m", "150Mi")),
    (rl("100m", "100Mi"), rl("50m", "50Mi"), rl("10", "10Gi"), MI100, rl("150m", "250Mi")),
    (rl("100m", "100Mi"), rl("50m", "50Mi"), rl("10", "10Gi"), 0.05, rl("150m", "694157320")),
    ({}, {}, rl("10", "10Gi"), None, {}),
    (rl("", "100Mi"), rl("50m", "50Mi"), rl("10", "10Gi"), None, rl("50m", "150Mi")),
    (rl("50m", "100Mi"), rl("", "50Mi"), rl("10", "10Gi"), None, rl("50m", "150Mi")),
    (rl("", "100Mi"), rl("", "50Mi"), rl("10", ""), None, rl("", "")),
]


@pytest.mark.parametrize(("kube", "system", "capacity", "threshold", "expected"), RESERVATION_CASES)
def test_reservation_for_scheduling_cpu_memory(kube, system, capacity, threshold, expected) -> None:
    got = node_allocatable_reservation(capacity, kube, system, memory_threshold(threshold))
    assert {k: v.milli_value() for k, v in got.items()} == {k: v.milli_value() for k, v in expected.items()}


# ... and its ephemeral-storage table: kube, capacity, threshold, expected
STORAGE_RESERVATION_CASES = [
    (rl(storage="100Mi"), rl(storage="10Gi"), None, rl(storage="100Mi")),
    (rl(storage="100Mi"), rl(storage="10Gi"), MI100, rl(storage="200Mi")),
    (rl(storage="150Mi"), rl(storage="10Gi"), 0.05, rl(storage="694157320")),
    ({}, rl(storage="10Gi"), None, {}),
]


@pytest.mark.parametrize(("kube", "capacity", "threshold", "expected"), STORAGE_RESERVATION_CASES)
def test_reservation_for_scheduling_storage(kube, capacity, threshold, expected) -> None:
    got = node_allocatable_reservation(capacity, kube, {}, storage_threshold(threshold))
    assert {k: v.milli_value() for k, v in got.items()} == {k: v.milli_value() for k, v in expected.items()}


# TestNodeAllocatableForEnforcement: the pods cgroup never subtracts the eviction threshold
ENFORCEMENT_CASES = [
    (rl("100m", "100Mi"), rl("50m", "50Mi"), rl("10", "10Gi"), rl("9850m", "10090Mi")),
    ({}, {}, rl("10", "10Gi"), rl("10", "10Gi")),
    (rl("", "100Mi"), rl("50m", "50Mi"), rl("10", "10Gi"), rl("9950m", "10090Mi")),
    (rl("50m", "100Mi"), rl("", "50Mi"), rl("10", "10Gi"), rl("9950m", "10090Mi")),
    (rl("", "100Mi"), rl("", "50Mi"), rl("10", ""), rl("10", "")),
]


@pytest.mark.parametrize(("kube", "system", "capacity", "expected"), ENFORCEMENT_CASES)
def test_enforced_pods_allocatable(kube, system, capacity, expected) -> None:
    got = enforced_pods_allocatable(capacity, kube, system)
    assert {k: v.milli_value() for k, v in got.items()} == {k: v.milli_value() for k, v in expected.items()}


def test_allocatable_for_scheduling_subtracts_the_hard_threshold() -> None:
    got = node_allocatable(rl("10", "10Gi"), rl("100m", "100Mi"), rl("50m", "50Mi"), memory_threshold(MI100))
    assert got == rl("9850m", "9990Mi")
    assert str(got["memory"]) == "9990Mi"  # keeps the capacity's binary format


def test_docs_reserve_compute_resources_example() -> None:
    """32Gi / 16 CPUs / 100Gi; kube cpu=1,memory=2Gi,storage=1Gi; system cpu=500m,memory=1Gi,
    storage=1Gi; evictionHard memory.available<500Mi, nodefs.available<10% -> 14.5 CPUs, 28.5Gi,
    88Gi. Exactly, the kubelet's arithmetic gives 29196Mi (the docs count 500Mi as 0.5Gi) and 88Gi
    less 160 bytes (its 10% is a float32)."""
    capacity = {**rl("16", "32Gi", "100Gi"), "pods": parse_quantity("110")}
    hard = parse_thresholds({"memory.available": "500Mi", "nodefs.available": "10%"}, {}, {}, {})
    got = node_allocatable(capacity, rl("1", "2Gi", "1Gi"), rl("500m", "1Gi", "1Gi"), hard)
    assert got["cpu"] == parse_quantity("14.5")
    assert got["memory"] == parse_quantity("29196Mi")
    assert abs(got["memory"].value() - parse_quantity("28.5Gi").value()) <= 12 * 2**20
    assert got["ephemeral-storage"].value() == 98 * 2**30 - int(100 * 2**30 * f32(0.1))
    assert abs(got["ephemeral-storage"].value() - 88 * 2**30) < 1024
    assert got["pods"] == parse_quantity("110")
    enforced = enforced_pods_allocatable(capacity, rl("1", "2Gi", "1Gi"), rl("500m", "1Gi", "1Gi"))
    assert enforced == {**rl("14.5", "29Gi", "98Gi"), "pods": parse_quantity("110")}


def test_only_memory_and_nodefs_thresholds_reserve() -> None:
    hard = parse_thresholds(
        {"memory.available": "1Gi", "nodefs.available": "1Gi", "imagefs.available": "5Gi",
         "nodefs.inodesFree": "5%", "pid.available": "100"},
        {"memory.available": "4Gi"},  # soft: never subtracted
        {"memory.available": "1m"},
        {},
        enforce_node_allocatable=["pods"],  # the allocatableMemory copy is not subtracted either
    )
    reservation = hard_eviction_reservation(hard, rl("4", "16Gi", "100Gi"))
    assert reservation == rl(memory="1Gi", storage="1Gi")


def test_allocatable_floors_at_zero() -> None:
    got = node_allocatable(rl("1", "1Gi"), rl("2", "2Gi"), {}, memory_threshold(MI100))
    assert got["cpu"].milli_value() == 0 and got["memory"].value() == 0
    enforced = enforced_pods_allocatable(rl("1", "1Gi"), rl("2", "2Gi"), {})
    assert enforced["cpu"].milli_value() == 0 and enforced["memory"].value() == 0


def test_pid_reservation_applies_to_the_internal_capacity_only() -> None:
    capacity = Capacity(milli_cpu=2000, memory=2**30, ephemeral_storage=2**34, pods=110, inodes=10**6, pid_max=32768)
    reserved = {"pid": parse_quantity("1000")}
    assert "pid" not in node_allocatable(capacity.as_quantities(), reserved, {}, [])
    assert enforced_pods_allocatable(capacity.internal_quantities(), reserved, {})["pid"] == parse_quantity("31768")


# TestNodeAllocatableInputValidation
@pytest.mark.parametrize(
    ("kube", "system", "capacity", "threshold", "invalid"),
    [
        (rl("100m", "100Mi"), rl("50m", "50Mi"), rl("10", "10Gi"), None, False),
        (rl("100m", "100Mi"), rl("50m", "50Mi"), rl("10", "10Gi"), MI100, False),
        (rl("100m", "100Mi"), rl("50m", "50Mi"), rl("10", "10Gi"), 0.05, False),
        ({}, {}, rl("10", "10Gi"), None, False),
        (rl("", "100Mi"), rl("", "50Mi"), rl("10", ""), None, False),
        (rl("5", "10Gi"), rl("5", "10Gi"), rl("10", "11Gi"), parse_quantity("2Gi"), True),
    ],
)
def test_over_reserved_cpu_memory(kube, system, capacity, threshold, invalid) -> None:
    problems = over_reserved(capacity, kube, system, memory_threshold(threshold))
    assert bool(problems) is invalid
    if invalid:
        assert problems == [
            "memory: kubeReserved + systemReserved + hard eviction threshold (22Gi) exceed capacity (11Gi)"
        ]


def test_over_reserved_storage() -> None:
    assert over_reserved(rl(storage="500Mi"), rl(storage="100Mi"), {}, storage_threshold(None)) == []
    assert over_reserved(rl(storage="20Gi"), rl(storage="20Gi"), {}, storage_threshold(MI100)) != []


# ---- capacity discovery: pure parsers, then one real read ----

MEMINFO = "MemTotal:       24684092 kB\nMemFree:        24324752 kB\nMemAvailable:   24325388 kB\n"


def test_parse_meminfo_total() -> None:
    assert parse_meminfo_total(MEMINFO) == 24684092 * 1024
    with pytest.raises(ValueError):
        parse_meminfo_total("MemFree: 1 kB\n")


def test_parse_pid_max() -> None:
    assert parse_pid_max("4194304\n") == 4194304


def test_fs_totals() -> None:
    st = os.statvfs_result((4096, 1024, 1000, 500, 400, 2000, 1500, 1500, 0, 255))
    assert fs_totals(st) == (1000 * 1024, 2000)  # f_blocks * f_frsize, f_files


def test_nearest_existing() -> None:
    existing = {"/", "/var", "/var/lib"}
    assert nearest_existing("/var/lib/nodeagent/state", existing.__contains__) == "/var/lib"
    assert nearest_existing("/var", existing.__contains__) == "/var"
    assert nearest_existing("/nope/x", existing.__contains__) == "/"


def test_capacity_as_quantities() -> None:
    capacity = Capacity(milli_cpu=2500, memory=8 * 2**30, ephemeral_storage=100 * 2**30, pods=110, inodes=5, pid_max=7)
    assert {k: str(v) for k, v in capacity.as_quantities().items()} == {
        "cpu": "2500m", "memory": "8Gi", "ephemeral-storage": "100Gi", "pods": "110",
    }
    assert str(capacity.internal_quantities()["pid"]) == "7"


def test_discover_capacity_reads_this_machine(tmp_path) -> None:
    capacity = discover_capacity(str(tmp_path / "not-yet" / "created"), max_pods=42)
    assert capacity.pods == 42
    assert capacity.milli_cpu >= 1000 and capacity.milli_cpu % 1000 == 0
    assert capacity.milli_cpu == len(os.sched_getaffinity(0)) * 1000
    assert capacity.memory > 0 and capacity.ephemeral_storage > 0 and capacity.inodes >= 0
    st = os.statvfs(tmp_path)
    assert capacity.ephemeral_storage == st.f_blocks * st.f_frsize
    assert capacity.pid_max >= 300
