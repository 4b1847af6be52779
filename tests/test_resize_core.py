"""In-place resize (KEP-1287), the pure core: the agent's decision, its conditions, the retry order, the API checks."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from nodeagent.core.errors import ValidationErrors
from nodeagent.core.model import parse_pod
from nodeagent.core.qos import qos_class as core_qos_class
from nodeagent.core.resize import (
    ContainerAction,
    Node,
    PendingResize,
    Resources,
    conditions,
    decide,
    memory_decrease_held,
    qos_class,
    resource_change_errors,
    resources_of,
    retry_order,
    validate_resize,
)

GI = 1 << 30
NODE = Node(allocatable_cpu=4000, allocatable_memory=8 * GI)


def c(
    cpu: int | None = None,
    mem: int | None = None,
    lcpu: int | None = None,
    lmem: int | None = None,
    name: str = "app",
    **policy: str,
) -> Resources:
    req = {k: v for k, v in (("cpu", cpu), ("memory", mem)) if v is not None}
    lim = {k: v for k, v in (("cpu", lcpu), ("memory", lmem)) if v is not None}
    return Resources(name, req, lim, policy)


@pytest.mark.parametrize(
    ("case", "desired", "allocated", "others", "kw", "outcome", "message"),
    [
        ("no change", [c(500, GI)], [c(500, GI)], [], {}, "none", ""),
        ("fits", [c(1000, GI)], [c(500, GI)], [{"cpu": 2000, "memory": GI}], {}, "accepted", ""),
        (
            "beyond allocatable memory",
            [c(500, 9 * GI)],
            [c(500, GI)],
            [],
            {},
            "infeasible",
            f"Node didn't have enough capacity: memory, requested: {9 * GI}, capacity: {8 * GI}",
        ),
        (
            "beyond allocatable cpu",
            [c(5000, GI)],
            [c(500, GI)],
            [],
            {},
            "infeasible",
            "Node didn't have enough capacity: cpu, requested: 5000, capacity: 4000",
        ),
        (
            "fits the node but not next to the others",
            [c(2500, GI)],
            [c(500, GI)],
            [{"cpu": 2000, "memory": GI}],
            {},
            "deferred",
            "Node didn't have enough resource: cpu, requested: 2500, used: 2000, capacity: 4000",
        ),
        (
            "memory deferred",
            [c(500, 6 * GI)],
            [c(500, GI)],
            [{"cpu": 0, "memory": 3 * GI}],
            {},
            "deferred",
            f"Node didn't have enough resource: memory, requested: {6 * GI}, used: {3 * GI}, capacity: {8 * GI}",
        ),
        (
            "QoS would change: Guaranteed to Burstable",
            [c(500, GI, 1000, GI)],
            [c(500, GI, 500, GI)],
            [],
            {},
            "infeasible",
            "Pod QOS Class may not change as a result of resizing",
        ),
        (
            "QoS would change: BestEffort to Burstable",
            [c(100)],
            [c()],
            [],
            {},
            "infeasible",
            "Pod QOS Class may not change as a result of resizing",
        ),
        (
            "static pod",
            [c(1000, GI)],
            [c(500, GI)],
            [],
            {"static_pod": True},
            "infeasible",
            "In-place resize of static-pods is not supported",
        ),
    ],
)
def test_decide(
    case: str,
    desired: list[Resources],
    allocated: list[Resources],
    others: list[dict[str, int]],
    kw: dict[str, Any],
    outcome: str,
    message: str,
) -> None:
    d = decide(desired, allocated, NODE, others, **kw)
    assert (d.outcome, d.message) == (outcome, message), case
    assert d.allocated == tuple(desired if outcome == "accepted" else allocated)


def test_static_cpu_and_memory_managers() -> None:
    g1, g2 = [c(1000, GI, 1000, GI)], [c(2000, GI, 2000, GI)]
    cpu_static = Node(4000, 8 * GI, static_cpu_manager=True)
    assert (
        decide(g2, g1, cpu_static, []).message
        == 'Resize is infeasible for Guaranteed Pods alongside CPU Manager policy "static"'
    )
    mem_change = [c(1000, 2 * GI, 1000, 2 * GI)]
    assert decide(mem_change, g1, cpu_static, []).outcome == "accepted"  # no CPU change
    mem_static = Node(4000, 8 * GI, static_memory_manager=True)
    assert decide(mem_change, g1, mem_static, []).outcome == "infeasible"
    assert decide([c(2000, GI)], [c(1000, GI)], cpu_static, []).outcome == "accepted"  # Burstable: not pinned


def test_resize_policy_per_resource() -> None:
    desired = [c(1000, 2 * GI, name="app", memory="RestartContainer"), c(200, GI, name="log")]
    allocated = [c(500, GI, name="app", memory="RestartContainer"), c(100, GI, name="log")]
    d = decide(desired, allocated, NODE, [])
    assert d.actions == (
        ContainerAction("app", {}, restart=True),  # cpu and memory change: RestartContainer wins
        ContainerAction("log", {"cpu": (200, None)}),
    )
    only_cpu = decide(
        [c(1000, GI, name="app", memory="RestartContainer")],
        [c(500, GI, name="app", memory="RestartContainer")],
        NODE,
        [],
    )
    assert only_cpu.actions == (ContainerAction("app", {"cpu": (1000, None)}),)


def test_memory_limit_decrease_waits_for_usage() -> None:
    desired, allocated = [c(500, GI, lmem=GI)], [c(500, GI, lmem=2 * GI)]
    d = decide(desired, allocated, NODE, [], memory_usage={"app": int(1.5 * GI)})
    assert d.outcome == "accepted" and d.actions[0].live == {}
    assert "memory usage 1610612736 is above the desired memory limit 1073741824" in d.actions[0].skipped
    ok = decide(desired, allocated, NODE, [], memory_usage={"app": GI // 2})
    assert ok.actions[0].live == {"memory": (GI, GI)} and ok.actions[0].skipped == ""
    restart = decide(
        [c(500, GI, lmem=GI, memory="RestartContainer")],
        [c(500, GI, lmem=2 * GI, memory="RestartContainer")],
        NODE,
        [],
        memory_usage={"app": int(1.5 * GI)},
    )
    assert restart.actions[0].restart and restart.actions[0].skipped == ""  # a restart starts from zero usage


def test_conditions() -> None:
    now = "2025-01-01T00:00:00Z"
    deferred = decide([c(2500, GI)], [c(500, GI)], NODE, [{"cpu": 2000}])
    assert conditions(deferred, [c(500, GI)], [c(500, GI)], now) == [
        {
            "type": "PodResizePending",
            "status": "True",
            "lastTransitionTime": now,
            "reason": "Deferred",
            "message": "Node didn't have enough resource: cpu, requested: 2500, used: 2000, capacity: 4000",
        }
    ]
    accepted = decide([c(1000, GI)], [c(500, GI)], NODE, [])
    assert conditions(accepted, accepted.allocated, [c(500, GI)], now) == [
        {"type": "PodResizeInProgress", "status": "True", "lastTransitionTime": now}
    ]  # actual not there yet
    assert conditions(None, accepted.allocated, [c(1000, GI)], "later") == []  # done: no conditions
    held = decide([c(500, GI, lmem=GI)], [c(500, GI, lmem=2 * GI)], NODE, [], memory_usage={"app": 2 * GI})
    got = conditions(held, held.allocated, [c(500, GI, lmem=2 * GI)], now)
    assert got[0]["type"] == "PodResizeInProgress" and got[0]["reason"] == "Error"
    kept = conditions(
        None, [c(500, GI)], [c(500, GI)], "later", previous=conditions(deferred, [c(500, GI)], [c(500, GI)], now)
    )
    assert kept[0]["lastTransitionTime"] == now and kept[0]["reason"] == "Deferred"


def test_retry_order() -> None:
    pending = [
        PendingResize("old-burstable", 0, "Burstable", 1.0),
        PendingResize("guaranteed", 0, "Guaranteed", 5.0),
        PendingResize("high", 1000, "BestEffort", 9.0),
        PendingResize("new-burstable", 0, "Burstable", 3.0),
    ]
    assert [p.pod for p in retry_order(pending)] == ["high", "guaranteed", "old-burstable", "new-burstable"]


def test_validate_resize() -> None:
    old = [Resources("app", {"cpu": 500, "memory": GI, "ephemeral-storage": GI}, {"cpu": 500})]
    ok = [Resources("app", {"cpu": 700, "memory": GI, "ephemeral-storage": GI}, {"cpu": 700})]
    assert validate_resize(old, ok) == []
    storage = [Resources("app", {"cpu": 500, "memory": GI, "ephemeral-storage": 2 * GI}, {"cpu": 500})]
    assert [str(e) for e in validate_resize(old, storage)] == [
        "spec.containers[0].resources.requests[ephemeral-storage]: Forbidden: only cpu and memory resources are mutable"
    ]
    guaranteed = [Resources("app", {"cpu": 500, "memory": GI}, {"cpu": 500, "memory": GI})]
    burstable = [Resources("app", {"cpu": 500, "memory": GI}, {"cpu": 600, "memory": GI})]
    assert [str(e) for e in validate_resize(guaranteed, burstable)] == [
        'spec: Invalid value: "Burstable": Pod QOS Class may not change as a result of resizing'
    ]
    assert validate_resize(old, [Resources("other")])[0].message.startswith("Forbidden")


amount = st.one_of(st.none(), st.integers(0, 3))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(amount, amount, amount, amount), min_size=1, max_size=3))
def test_qos_matches_the_core_rules(containers: list[tuple[int | None, int | None, int | None, int | None]]) -> None:
    """The plain-value QoS used for resizes agrees with nodeagent.core.qos on the same containers."""
    spec_containers = []
    for i, (cpu, mem, lcpu, lmem) in enumerate(containers):
        res: dict[str, dict[str, str]] = {"requests": {}, "limits": {}}
        for key, name, v in (
            ("requests", "cpu", cpu),
            ("requests", "memory", mem),
            ("limits", "cpu", lcpu),
            ("limits", "memory", lmem),
        ):
            if v is not None:
                res[key][name] = f"{v}m" if name == "cpu" else str(v)
        spec_containers.append({"name": f"c{i}", "command": ["x"], "resources": res})
    try:
        pod = parse_pod(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "p", "namespace": "d"},
                "spec": {"containers": spec_containers},
            }
        )
    except ValidationErrors:
        assume(False)  # the API refuses it (a limit below its request): not a pod anyone resizes
        return
    # the core model defaults a request to its limit, as the API does; compare on what it stores
    defaulted = [
        Resources(
            cc.name,
            {r: q.milli_value() if r == "cpu" else q.value() for r, q in cc.resources.requests.items()},
            {r: q.milli_value() if r == "cpu" else q.value() for r, q in cc.resources.limits.items()},
        )
        for cc in pod.spec.containers
    ]
    assert qos_class(defaulted) == core_qos_class(pod)


def _pod(container: dict[str, Any], init: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "app", "command": ["true"], **container}]}
    if init is not None:
        spec["initContainers"] = init
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}


def test_resources_of_a_parsed_container() -> None:
    pod = parse_pod(_pod({"resources": {"requests": {"cpu": "250m", "ephemeral-storage": "1Gi"},
                                        "limits": {"cpu": "1.5", "memory": "128Mi"}},
                          "resizePolicy": [{"resourceName": "memory", "restartPolicy": "RestartContainer"}]}))
    got = resources_of(pod.spec.containers[0])
    assert got.requests == {"cpu": 250, "memory": 128 << 20, "ephemeral-storage": GI}  # request defaulted from limit
    assert got.limits == {"cpu": 1500, "memory": 128 << 20}
    assert got.restart_policy("memory") == "RestartContainer" and got.restart_policy("cpu") == "NotRequired"


@pytest.mark.parametrize(("container", "init", "field"), [
    ({"resizePolicy": [{"resourceName": "cpu"}, {"resourceName": "cpu", "restartPolicy": "RestartContainer"}]}, None,
     "spec.containers[0].resizePolicy[1].resourceName"),
    ({"resizePolicy": [{"resourceName": "ephemeral-storage"}]}, None, "spec.containers[0].resizePolicy[0].resourceName"),
    ({"resizePolicy": [{"resourceName": "cpu", "restartPolicy": "Always"}]}, None, "spec.containers[0].resizePolicy[0].restartPolicy"),
    ({}, [{"name": "init", "command": ["true"], "resizePolicy": [{"resourceName": "cpu"}]}], "spec.initContainers[0].resizePolicy"),
])
def test_resize_policy_is_validated(container: dict[str, Any], init: list[dict[str, Any]] | None, field: str) -> None:
    with pytest.raises(ValidationErrors) as e:
        parse_pod(_pod(container, init))
    assert field in [err.path for err in e.value.errors]


def test_a_sidecar_may_have_a_resize_policy() -> None:
    sidecar = {"name": "side", "command": ["true"], "restartPolicy": "Always",
               "resizePolicy": [{"resourceName": "memory", "restartPolicy": "RestartContainer"}]}
    pod = parse_pod(_pod({}, [sidecar]))
    assert pod.to_dict()["spec"]["initContainers"][0]["resizePolicy"] == [
        {"resourceName": "memory", "restartPolicy": "RestartContainer"}]


def test_resource_change_errors_name_the_list() -> None:
    old = [c(500, GI, name="a")]
    assert [e.path for e in resource_change_errors(old, [c(500, GI, name="b")], "spec.initContainers")] == [
        "spec.initContainers"]
    changed = [Resources("a", {"cpu": 500, "memory": GI, "ephemeral-storage": 1})]
    assert [e.path for e in resource_change_errors(old, changed, "spec.initContainers")] == [
        "spec.initContainers[0].resources.requests[ephemeral-storage]"]


@pytest.mark.parametrize(("old", "new", "usage", "held"), [
    (256, 128, 200, True),  # lowered below the usage
    (256, 128, 128, False),  # down to the usage exactly: written
    (256, 128, None, False),  # usage unknown
    (None, 128, 200, True),  # from unlimited
    (128, 256, 200, False),  # raised
    (128, None, 200, False),  # to unlimited
])
def test_memory_decrease_held(old: int | None, new: int | None, usage: int | None, held: bool) -> None:
    why = memory_decrease_held("container app", old, new, usage)
    assert bool(why) is held
    if held:
        assert why == (f"container app: memory usage {usage} is above the desired memory limit {new}; "
                       "the limit is not lowered until usage falls below it")
