"""ReplicaSet decisions against upstream's cases (replica_set_test.go TestGetPodsToDelete,
TestSyncReplicaSetDormancy, burst and slow start, TestDeletionTimestamp;
replica_set_utils_test.go TestCalculateStatus, TestCalculateStatusConditions)."""

from __future__ import annotations

import pytest
from controllers_objects import NOW, pod, replicaset, template

from nodeagent.cluster.controllers.common.actions import Delete, Patch, SlowStart, UpdateStatus
from nodeagent.cluster.controllers.replicaset import reconcile as rsc
from nodeagent.cluster.controllers.replicaset.victims import pods_to_delete

RS = replicaset("web", 3)
unscheduled_pending = pod("unscheduled-pending", node="", phase="Pending", ready=False)
scheduled_pending = pod("scheduled-pending", node="fake-node", phase="Pending", ready=False)
not_ready = pod("not-ready", node="fake-node", ready=False)
ready_n1 = pod("ready-node-1", node="fake-node-1")
ready_n2 = pod("ready-node-2", node="fake-node-2")


def names(pods):
    return [p["metadata"]["name"] for p in pods]


@pytest.mark.parametrize(("pods", "related", "diff", "want"), [
    ([], None, 0, []),
    ([not_ready, ready_n1], None, 2, ["not-ready", "ready-node-1"]),
    ([ready_n1, not_ready], None, 1, ["not-ready"]),
    ([scheduled_pending, unscheduled_pending], None, 1, ["unscheduled-pending"]),
    ([ready_n1, not_ready, not_ready], None, 2, ["not-ready", "not-ready"]),
    ([ready_n1, ready_n2], [ready_n1, ready_n2, ready_n2], 1, ["ready-node-2"]),   # doubled up goes first
    ([scheduled_pending, not_ready], None, 1, ["scheduled-pending"]),
    ([ready_n1, ready_n2, not_ready, scheduled_pending, unscheduled_pending], None, 3,
     ["unscheduled-pending", "scheduled-pending", "not-ready"]),
])
def test_pods_to_delete(pods, related, diff, want) -> None:
    assert names(pods_to_delete(pods, related if related is not None else pods, diff, NOW)) == want


def _owned(n: int, rs=RS, **kw):
    return [pod(f"p{i}", owner=rs, **kw) for i in range(n)]


def test_too_few_replicas_creates_the_difference_from_the_template() -> None:
    m = rsc.manage(RS, _owned(1), now=NOW, satisfied=True)
    (burst,) = m.plan.of_type(SlowStart)
    assert m.expect_creations == 2 and len(burst.creates) == 2
    created = burst.creates[0].obj
    assert created["metadata"]["generateName"] == "web-" and created["metadata"]["namespace"] == "default"
    assert created["metadata"]["labels"] == {"app": "web"}
    assert created["metadata"]["ownerReferences"] == [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web",
                                                       "uid": RS["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]
    assert created["spec"] == RS["spec"]["template"]["spec"] and created["spec"] is not RS["spec"]["template"]["spec"]


def test_creates_and_deletes_are_capped_by_burst_replicas() -> None:
    big = replicaset("big", 1200)
    m = rsc.manage(big, [], now=NOW, satisfied=True)
    assert m.expect_creations == 500 and [len(b) for b in m.plan.of_type(SlowStart)[0].batches()] == [1, 2, 4, 8, 16, 32, 64, 128, 245]
    small = replicaset("big", 0, uid=big["metadata"]["uid"])
    m = rsc.manage(small, [pod(f"p{i}", owner=small) for i in range(700)], now=NOW, satisfied=True)
    assert len(m.plan.of_type(Delete)) == 500 and len(m.expect_deletions) == 500


def test_too_many_replicas_deletes_in_victim_order_with_uid_preconditions() -> None:
    pods = [pod("old-ready", owner=RS), pod("new-unready", owner=RS, ready=False), pod("b", owner=RS), pod("c", owner=RS)]
    m = rsc.manage(RS, pods, now=NOW, satisfied=True)
    (d,) = m.plan.of_type(Delete)
    assert d.ref.name == "new-unready" and d.ref.uid == pods[1]["metadata"]["uid"] and m.expect_deletions == ["default/new-unready"]


def test_dormant_while_expectations_are_unsatisfied_but_still_adopts() -> None:
    orphan = pod("orphan")
    m = rsc.manage(RS, [orphan], now=NOW, satisfied=False)
    assert not m.plan.of_type(SlowStart) and [a.reason for a in m.plan.of_type(Patch)] == ["adopt"]
    assert names(m.claimed) == ["orphan"]


def test_inactive_pods_do_not_count() -> None:
    pods = [pod("done", owner=RS, phase="Succeeded"), pod("failed", owner=RS, phase="Failed"), pod("going", owner=RS, deleting=NOW)]
    m = rsc.manage(RS, pods + _owned(1), now=NOW, satisfied=True)
    assert m.expect_creations == 2 and len(m.claimed) == 1


def test_being_deleted_neither_creates_nor_adopts() -> None:
    dying = replicaset("web", 3, deleting=NOW)
    m = rsc.manage(dying, [pod("orphan")], now=NOW, satisfied=True)
    assert m.plan.actions == []


def test_a_template_without_labels_is_a_manage_error() -> None:
    bad = replicaset("web", 2, tmpl={"metadata": {}, "spec": {"containers": []}})
    m = rsc.manage(bad, [], now=NOW, satisfied=True)
    assert m.error == "unable to create pods, no labels" and not m.plan.actions
    st = rsc.calculate_status(bad, [], NOW, m.error)
    assert st["conditions"][0]["type"] == "ReplicaFailure" and st["conditions"][0]["reason"] == "FailedCreate"


@pytest.mark.parametrize(("pods", "min_ready", "want"), [
    ([pod("a", labels={"app": "web"})], 0, (1, 1, 1, 1)),
    ([pod("a", labels={"app": "web", "x": "y"})], 0, (1, 1, 1, 1)),           # more labels than the template: fully labeled
    ([pod("a", labels={"app": "web", "x": "y"}), pod("b", labels={"x": "y"})], 0, (2, 1, 2, 2)),
    ([pod("a", ready=False)], 0, (1, 1, 0, 0)),
    ([pod("a", ready_since=NOW - 5)], 10, (1, 1, 1, 0)),                       # ready, not yet available
    ([pod("a", ready_since=NOW - 11)], 10, (1, 1, 1, 1)),
])
def test_calculate_status_counts(pods, min_ready, want) -> None:
    rs = replicaset("web", 1, min_ready=min_ready, tmpl=template({"app": "web"}))
    rs["spec"]["selector"] = {"matchLabels": {"x": "y"}} if len(pods) == 2 else rs["spec"]["selector"]
    st = rsc.calculate_status(rs, pods, NOW, None)
    assert (st["replicas"], st["fullyLabeledReplicas"], st["readyReplicas"], st["availableReplicas"]) == want
    assert st["observedGeneration"] == 1


def test_replica_failure_condition_lifecycle() -> None:
    rs = replicaset("web", 2)
    st = rsc.calculate_status(rs, [], NOW, "quota exceeded")
    assert st["conditions"][0] | {} == {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
                                        "message": "quota exceeded", "lastTransitionTime": st["conditions"][0]["lastTransitionTime"]}
    failing = replicaset("web", 2, status=st)
    again = rsc.calculate_status(failing, [], NOW + 60, "other error")
    assert again["conditions"] == st["conditions"]          # an existing failure is kept as it was
    assert "conditions" not in rsc.calculate_status(failing, [], NOW + 60, None)
    over = rsc.calculate_status(replicaset("web", 0), [pod("a")], NOW, "boom")
    assert over["conditions"][0]["reason"] == "FailedDelete"


def test_status_write_skipped_in_the_steady_state_and_requeue_for_min_ready() -> None:
    rs = replicaset("web", 1, min_ready=30)
    p = pod("a", owner=rs, ready_since=NOW - 10)
    _, plan = rsc.reconcile(rs, [p], now=NOW)
    (upd,) = plan.of_type(UpdateStatus)
    assert upd.obj["status"]["readyReplicas"] == 1 and upd.obj["status"]["availableReplicas"] == 0
    assert plan.requeue_after == pytest.approx(21.0)        # available in 20 s, +1 s against skew
    steady = replicaset("web", 1, uid=rs["metadata"]["uid"], status=upd.obj["status"], min_ready=30)
    _, plan2 = rsc.reconcile(steady, [p], now=NOW)
    assert not plan2.of_type(UpdateStatus)
