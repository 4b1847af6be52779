"""Admission fit: pod requests against node allocatable, as the kubelet's predicate reports it."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.core.model import Pod, parse_pod
from nodeagent.core.quantity import Quantity, parse_quantity
from nodeagent.core.resources import FitResult, fits, pod_limits, pod_requests

_counter = 0


def pod(*containers: dict[str, Any], uid: str | None = None) -> Pod:
    """A pod whose containers have the given resources ({"requests": {...}, "limits": {...}})."""
    global _counter
    _counter += 1
    metadata: dict[str, Any] = {"name": f"p{_counter}"}
    if uid:
        metadata["uid"] = uid
    return parse_pod(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": metadata,
            "spec": {
                "containers": [
                    {"name": f"c{i}", "command": ["true"], "resources": r} for i, r in enumerate(containers)
                ]
            },
        }
    )


def req(**values: Any) -> dict[str, Any]:
    return {"requests": {k.replace("_", "-"): v for k, v in values.items()}}


def q(values: dict[str, Any]) -> dict[str, Quantity]:
    return {k: parse_quantity(str(v)) for k, v in values.items()}


NODE = q({"cpu": "2", "memory": "3000000000", "ephemeral-storage": "10Gi", "hugepages-2Mi": "0"})


def test_pod_requests_sum_containers_and_include_defaulted_limits() -> None:
    p = pod(
        req(cpu="250m", memory="1Gi"),
        {"requests": {"cpu": "500m"}, "limits": {"memory": "512Mi", "example.com/foo": 2}},
        {},
    )
    assert pod_requests(p) == q({"cpu": "750m", "memory": "1536Mi", "example.com/foo": 2})
    assert pod_limits(p) == q({"memory": "512Mi", "example.com/foo": 2})


def test_pod_requests_of_best_effort_pod_is_empty() -> None:
    assert pod_requests(pod({}, {})) == {}
    assert pod_limits(pod({})) == {}


CASES: list[tuple[str, Pod, list[Pod], int, FitResult]] = [
    ("fits-empty-node", pod(req(cpu="1", memory="1Gi")), [], 110, FitResult(ok=True)),
    ("exact-fit", pod(req(cpu="1")), [pod(req(cpu="1"))], 110, FitResult(ok=True)),
    (
        "out-of-cpu",
        pod(req(cpu="1500m")),
        [pod(req(cpu="1"))],
        110,
        FitResult(False, "OutOfcpu", "Node didn't have enough resource: cpu, requested: 1500, used: 1000, capacity: 2000"),
    ),
    (
        "out-of-memory",
        pod(req(memory="2Gi")),
        [pod(req(memory="1Gi"))],
        110,
        FitResult(
            False,
            "OutOfmemory",
            "Node didn't have enough resource: memory, requested: 2147483648, used: 1073741824, capacity: 3000000000",
        ),
    ),
    (
        "out-of-ephemeral-storage",
        pod(req(ephemeral_storage="11Gi")),
        [],
        110,
        FitResult(
            False,
            "OutOfephemeral-storage",
            "Node didn't have enough resource: ephemeral-storage, requested: 11811160064, used: 0, capacity: 10737418240",
        ),
    ),
    (
        "extended-resource-the-node-lacks",
        pod({"limits": {"example.com/foo": 1}}),
        [],
        110,
        FitResult(
            False,
            "OutOfexample.com/foo",
            "Node didn't have enough resource: example.com/foo, requested: 1, used: 0, capacity: 0",
        ),
    ),
    (
        "hugepages-allocatable-zero",
        pod({"limits": {"hugepages-2Mi": "4Mi", "memory": "1Gi"}}),
        [],
        110,
        FitResult(
            False,
            "OutOfhugepages-2Mi",
            "Node didn't have enough resource: hugepages-2Mi, requested: 4194304, used: 0, capacity: 0",
        ),
    ),
    (
        "out-of-pods-first",
        pod(req(cpu="3")),
        [pod({}), pod({})],
        2,
        FitResult(False, "OutOfpods", "Node didn't have enough resource: pods, requested: 1, used: 2, capacity: 2"),
    ),
    ("last-pod-slot", pod({}), [pod({})], 2, FitResult(ok=True)),
    (
        "cpu-reported-before-memory",
        pod(req(cpu="3", memory="4G")),
        [],
        110,
        FitResult(False, "OutOfcpu", "Node didn't have enough resource: cpu, requested: 3000, used: 0, capacity: 2000"),
    ),
    ("zero-requests-fit-a-full-node", pod(req(cpu="0", memory="0")), [pod(req(cpu="2", memory="3G"))], 110, FitResult(ok=True)),
    ("best-effort-fits-a-full-node", pod({}), [pod(req(cpu="2", memory="3G"))], 110, FitResult(ok=True)),
    ("overcommitted-node-still-admits-zero", pod(req(cpu="0")), [pod(req(cpu="2")), pod(req(cpu="2"))], 110, FitResult(ok=True)),
    (
        "overcommitted-node-rejects-any-request",
        pod(req(cpu="1m")),
        [pod(req(cpu="2")), pod(req(cpu="1"))],
        110,
        FitResult(False, "OutOfcpu", "Node didn't have enough resource: cpu, requested: 1, used: 3000, capacity: 2000"),
    ),
]


@pytest.mark.parametrize(("new", "admitted", "max_pods", "want"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_fits(new: Pod, admitted: list[Pod], max_pods: int, want: FitResult) -> None:
    assert fits(new, NODE, admitted, max_pods) == want


def test_zero_requests_fit_a_node_without_cpu_or_memory() -> None:
    assert fits(pod(req(cpu="0", memory="0")), {}, [], 10).ok


def test_same_pod_is_not_counted_twice() -> None:
    p = pod(req(cpu="2"), uid="same-uid")
    assert fits(p, NODE, [p], 1).ok
    assert not fits(pod(req(cpu="1")), NODE, [p], 110).ok


def test_admitted_may_be_any_iterable() -> None:
    result = fits(pod(req(cpu="1")), NODE, (pod(req(cpu="1500m")) for _ in range(1)), 110)
    assert result.reason == "OutOfcpu"
    assert "used: 1500" in result.message
