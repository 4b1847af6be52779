"""One monitor pass's per-node decisions (node_lifecycle_controller.go processTaintBaseEviction,
markNodeAsReachable, doNoExecuteTaintingPass, doNoScheduleTaintingPass; node_lifecycle_controller_test.go
TestSwapUnreachableNotReadyTaints, TestTaintsNodeByCondition cases), as tables."""

from __future__ import annotations

from typing import Any

import pytest
from controllers_objects import NOW, node, pod, ts

from nodeagent.cluster.controllers.nodelifecycle import monitor

NR_X = {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}
UR_X = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}
OTHER = {"key": "dedicated", "value": "db", "effect": "NoSchedule"}


def keys(taints: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(t["key"].split("/")[-1], t["effect"]) for t in taints]


@pytest.mark.parametrize(("ready", "taints", "op", "after"), [
    ("False", [], "enqueue", None),                                   # queued for the zone's limiter
    ("Unknown", [], "enqueue", None),
    ("False", [UR_X], "keep", [("not-ready", "NoExecute")]),          # swapped at once, no queue
    ("Unknown", [NR_X, OTHER], "keep", [("dedicated", "NoSchedule"), ("unreachable", "NoExecute")]),
    ("False", [NR_X], "enqueue", None),                               # already there: queue (a no-op later)
    ("True", [UR_X, OTHER], "dequeue", [("dedicated", "NoSchedule")]),  # reachable again: both off
    ("True", [OTHER], "dequeue", None),                               # nothing to take off
    (None, [UR_X], "keep", None),                                     # never posted Ready: left alone
])
def test_taint_based_eviction(ready: str | None, taints: list[dict[str, Any]], op: str,
                              after: list[tuple[str, str]] | None) -> None:
    n = node("n1", ready=ready, taints=[dict(t) for t in taints])
    n["metadata"]["resourceVersion"] = "42"
    got_op, patch = monitor.taint_based_eviction(n, NOW)
    assert got_op == op
    if after is None:
        assert patch is None
    else:
        assert patch is not None and patch.patch_type == "merge" and patch.ref.kind == "Node"
        assert keys(patch.patch["spec"]["taints"]) == after
        assert patch.patch["metadata"] == {"resourceVersion": "42"}  # no merge key: stale reads must conflict


@pytest.mark.parametrize(("ready", "taints", "after"), [
    ("False", [], [("not-ready", "NoExecute")]),
    ("Unknown", [], [("unreachable", "NoExecute")]),
    ("Unknown", [NR_X], [("unreachable", "NoExecute")]),    # the opposite one goes
    ("Unknown", [UR_X], None),                              # already tainted: no write
    ("True", [], None),                                     # ready again while queued: dropped
    (None, [], None),
])
def test_no_execute_tainting_pass(ready: str | None, taints: list[dict[str, Any]],
                                  after: list[tuple[str, str]] | None) -> None:
    patch = monitor.no_execute_taint(node("n1", ready=ready, taints=[dict(t) for t in taints]), NOW)
    if after is None:
        assert patch is None
    else:
        assert patch is not None and keys(patch.patch["spec"]["taints"]) == after
        assert patch.patch["spec"]["taints"][-1]["timeAdded"] == ts(NOW)


@pytest.mark.parametrize(("kw", "after"), [
    ({"ready": "True"}, None),
    ({"ready": "Unknown"}, [("unreachable", "NoSchedule")]),
    ({"ready": "False", "conditions": [{"type": "MemoryPressure", "status": "True"}]},
     [("not-ready", "NoSchedule"), ("memory-pressure", "NoSchedule")]),
    ({"ready": "True", "unschedulable": True}, [("unschedulable", "NoSchedule")]),
    ({"ready": "True", "taints": [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]}, []),
])
def test_no_schedule_condition_taints(kw: dict[str, Any], after: list[tuple[str, str]] | None) -> None:
    patch = monitor.condition_taint_patch(node("n1", **kw), NOW)
    if after is None:
        assert patch is None
    else:
        assert patch is not None and keys(patch.patch["spec"]["taints"]) == after


def test_pods_marked_not_ready_once_and_not_while_terminating() -> None:
    ready = pod("a")
    already = pod("b", ready=False)
    going = pod("c", deleting=NOW)
    (upd,) = monitor.pods_not_ready([ready, already, going], NOW)
    cond = next(c for c in upd.obj["status"]["conditions"] if c["type"] == "Ready")
    assert upd.obj["metadata"]["name"] == "a" and cond["status"] == "False" and cond["lastTransitionTime"] == ts(NOW)
    assert next(c for c in ready["status"]["conditions"] if c["type"] == "Ready")["status"] == "True"  # a copy
