"""The kubelet cgroupfs layout and the cgroup values per level (pure, table-driven)."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.agent.cgroups.driver import CgroupSpec
from nodeagent.agent.cgroups.layout import (
    container_cgroup_spec,
    container_path,
    kubepods_spec,
    pod_cgroup_spec,
    pod_path,
    pod_uid_from_dir,
    qos_cgroup_specs,
    qos_path,
)
from nodeagent.core.errors import FieldError
from nodeagent.core.model import Pod, parse_pod
from nodeagent.core.qos import qos_class
from nodeagent.core.quantity import parse_quantity
from nodeagent.core.resources import pod_resources

MI = 1024 * 1024


def make_pod(uid: str, *resources: dict[str, Any]) -> Pod:
    containers = [
        {"name": f"c{i}", "command": ["sleep", "1"], "resources": r} for i, r in enumerate(resources)
    ]
    return parse_pod(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"p-{uid}", "uid": uid},
            "spec": {"containers": containers},
        }
    )


def lim(cpu: str | None = None, memory: str | None = None) -> dict[str, str]:
    return {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}


def spec_of(pod: Pod, **kw: Any) -> CgroupSpec:
    """pod_cgroup_spec from the pod's QoS class and summed resources (what its plan holds)."""
    return pod_cgroup_spec(qos_class(pod), pod_resources(pod), **kw)


def tiers_of(pods: list[Pod]) -> dict[str, CgroupSpec]:
    """qos_cgroup_specs from the pods' (QoS class, cpu request) pairs (what their plans hold)."""
    return qos_cgroup_specs((qos_class(p), pod_resources(p).cpu_request_milli) for p in pods)


# -- paths -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("qos", "expected"),
    [
        ("Guaranteed", "kubepods/poduid-1"),
        ("Burstable", "kubepods/burstable/poduid-1"),
        ("BestEffort", "kubepods/besteffort/poduid-1"),
    ],
)
def test_pod_path_per_qos(qos: Any, expected: str) -> None:
    assert pod_path(qos, "uid-1") == expected
    assert container_path(qos, "uid-1", "app") == expected + "/app"


@pytest.mark.parametrize("qos", ["guaranteed", "Unknown", ""])
def test_unknown_qos_is_a_field_error(qos: Any) -> None:
    with pytest.raises(FieldError, match="qos"):
        qos_path(qos)


@pytest.mark.parametrize("uid", ["../etc", "a/b", "", "UPPER", "x" * 300])
def test_unsafe_uid_is_rejected(uid: str) -> None:
    with pytest.raises(FieldError, match="metadata.uid"):
        pod_path("Burstable", uid)


@pytest.mark.parametrize("name", ["", ".", "..", "a/b"])
def test_unsafe_container_name_is_rejected(name: str) -> None:
    with pytest.raises(FieldError, match="container.name"):
        container_path("Burstable", "u1", name)


@pytest.mark.parametrize(
    ("name", "uid"),
    [("pod1234-abcd", "1234-abcd"), ("pod", None), ("burstable", None), ("podA/B", None), ("xpod1", None)],
)
def test_pod_uid_from_dir(name: str, uid: str | None) -> None:
    assert pod_uid_from_dir(name) == uid


# -- pod values --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        # Guaranteed: shares from summed requests (= limits), quota and memory summed
        (
            [{"limits": lim("500m", "64Mi")}, {"limits": lim("250m", "32Mi")}],
            CgroupSpec(cpu_shares=768, cpu_quota_us=75000, memory_max=96 * MI),
        ),
        # Burstable, every container limits both: both pod limits set
        (
            [{"requests": lim("100m", "10Mi"), "limits": lim("1", "100Mi")}],
            CgroupSpec(cpu_shares=102, cpu_quota_us=100000, memory_max=100 * MI),
        ),
        # Burstable, one container without a memory limit: no pod memory.max, quota still set
        (
            [{"limits": lim("200m", "64Mi")}, {"requests": lim("100m"), "limits": lim("300m")}],
            CgroupSpec(cpu_shares=307, cpu_quota_us=50000, memory_max=None),
        ),
        # Burstable, one container without a cpu limit: no pod quota, memory.max still set
        (
            [{"limits": lim("200m", "64Mi")}, {"requests": lim("100m"), "limits": lim(memory="1Gi")}],
            CgroupSpec(cpu_shares=307, cpu_quota_us=None, memory_max=64 * MI + 1024 * MI),
        ),
        # Burstable with memory only: minimum shares
        ([{"requests": lim(memory="1Gi")}], CgroupSpec(cpu_shares=2)),
        # BestEffort: the minimum, nothing else
        ([{}, {}], CgroupSpec(cpu_shares=2)),
        # a tiny cpu limit gets the minimum quota (1000 us), a tiny request the minimum shares
        ([{"limits": lim("1m", "8Mi")}], CgroupSpec(cpu_shares=2, cpu_quota_us=1000, memory_max=8 * MI)),
    ],
)
def test_pod_cgroup_spec(resources: list[dict[str, Any]], expected: CgroupSpec) -> None:
    assert spec_of(make_pod("u1", *resources)) == expected


def test_pod_cgroup_spec_zero_limit_counts_as_undeclared() -> None:
    pod = make_pod("u1", {"limits": lim("500m", "64Mi")}, {"limits": lim("0", "0")})
    spec = spec_of(pod)
    assert spec.cpu_quota_us is None and spec.memory_max is None


def test_pod_cgroup_spec_passes_pids_limit_and_period() -> None:
    pod = make_pod("u1", {"limits": lim("500m", "64Mi")})
    spec = spec_of(pod, pids_max=1024, cpu_period_us=50000)
    assert (spec.pids_max, spec.cpu_period_us, spec.cpu_quota_us) == (1024, 50000, 25000)
    assert spec_of(make_pod("u2", {}), pids_max=7).pids_max == 7


# -- container values --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        ({"requests": lim("100m", "10Mi"), "limits": lim("200m", "20Mi")},
         CgroupSpec(cpu_shares=102, cpu_quota_us=20000, memory_max=20 * MI)),
        ({"limits": lim("2")}, CgroupSpec(cpu_shares=2048, cpu_quota_us=200000)),
        ({"requests": lim("250m")}, CgroupSpec(cpu_shares=256)),
        ({}, CgroupSpec(cpu_shares=2)),
        ({"limits": lim(memory="1.5Gi")}, CgroupSpec(cpu_shares=2, memory_max=1536 * MI)),
    ],
)
def test_container_cgroup_spec(resources: dict[str, Any], expected: CgroupSpec) -> None:
    pod = make_pod("u1", resources)
    assert container_cgroup_spec(pod.spec.containers[0]) == expected


# -- QoS tiers ---------------------------------------------------------------------------------


def test_qos_specs_sum_only_burstable_requests() -> None:
    pods = [
        make_pod("b1", {"requests": lim("300m")}),
        make_pod("b2", {"requests": lim("200m", "1Gi")}, {"requests": lim("500m")}),
        make_pod("g1", {"limits": lim("4", "1Gi")}),  # Guaranteed: not in the burstable tier
        make_pod("e1", {}),  # BestEffort
    ]
    specs = tiers_of(pods)
    assert specs == {
        "kubepods/besteffort": CgroupSpec(cpu_shares=2),
        "kubepods/burstable": CgroupSpec(cpu_shares=1024),  # 1000m
    }


def test_qos_specs_without_pods_give_minimum_shares() -> None:
    specs = tiers_of([])
    assert specs["kubepods/burstable"].cpu_shares == 2
    assert specs["kubepods/besteffort"].cpu_shares == 2


# -- kubepods (node allocatable) ---------------------------------------------------------------


def test_kubepods_spec_from_enforced_allocatable() -> None:
    alloc = {
        "cpu": parse_quantity("1500m"),
        "memory": parse_quantity("3Gi"),
        "pids": parse_quantity("1000"),
        "ephemeral-storage": parse_quantity("10Gi"),
    }
    assert kubepods_spec(alloc) == CgroupSpec(cpu_shares=1536, memory_max=3 * 1024 * MI, pids_max=1000)


def test_kubepods_spec_only_sets_what_is_given() -> None:
    assert kubepods_spec({"memory": parse_quantity("1Gi")}) == CgroupSpec(memory_max=1024 * MI)
    assert kubepods_spec({}) == CgroupSpec()


def test_kubepods_spec_memory_high() -> None:
    spec = kubepods_spec({"memory": parse_quantity("1Gi")}, memory_high=900 * MI)
    assert spec.memory_high == 900 * MI
    with pytest.raises(FieldError, match="memory_high"):
        kubepods_spec({"memory": parse_quantity("1Gi")}, memory_high=2048 * MI)


def test_kubepods_spec_rejects_nothing_left_for_pods() -> None:
    with pytest.raises(FieldError, match="allocatable.memory"):
        kubepods_spec({"memory": parse_quantity("0")})
