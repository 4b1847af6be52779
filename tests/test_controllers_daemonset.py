"""DaemonSet decisions against upstream's behaviour (pkg/controller/daemon: daemon_controller.go
NodeShouldRunDaemonPod, podsShouldBeOnNode, syncNodes, updateDaemonSetStatus; update.go
rollingUpdate, constructHistory, cleanupHistory; util/daemonset_util.go), one rule a row, and
simulated rollouts over N nodes that check maxUnavailable/maxSurge at every step."""

from __future__ import annotations

import copy
import itertools
from typing import Any

import pytest
from controllers_objects import NOW, meta, node, owner_ref, pod, template, ts

from nodeagent.cluster.controllers.common.actions import (
    Create,
    Delete,
    Event,
    Patch,
    SlowStart,
    Update,
    UpdateStatus,
)
from nodeagent.cluster.controllers.common.backoff import Backoff
from nodeagent.cluster.controllers.common.expectations import Expectations
from nodeagent.cluster.controllers.common.pods import is_available
from nodeagent.cluster.controllers.daemonset import history, placement
from nodeagent.cluster.controllers.daemonset import reconcile as dsc

HASH = history.HASH_LABEL


def daemonset(name: str = "ds", *, tmpl: dict[str, Any] | None = None, strategy: dict[str, Any] | None = None,
              min_ready: int = 0, generation: int = 1, status: dict[str, Any] | None = None, uid: str = "ds-uid",
              limit: int = 10, annotations: dict[str, str] | None = None, deleting: float | None = None,
              selector: dict[str, Any] | None = None) -> dict[str, Any]:
    lbls = {"app": "web"}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": meta(name, uid=uid, labels=lbls, annotations=annotations, generation=generation,
                             deleting=deleting, created=NOW - 7200),
            "spec": {"selector": selector if selector is not None else {"matchLabels": lbls},
                     "template": tmpl or template(lbls), "minReadySeconds": min_ready, "revisionHistoryLimit": limit,
                     "updateStrategy": strategy or {"type": "RollingUpdate",
                                                    "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}},
            "status": status or {}}


def rolling(max_unavailable: int | str = 1, max_surge: int | str = 0) -> dict[str, Any]:
    return {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": max_unavailable, "maxSurge": max_surge}}


def hash_of(ds: dict[str, Any]) -> str:
    return history.template_hash(ds)


def revision_of(ds: dict[str, Any], number: int, **kw: Any) -> dict[str, Any]:
    rev = history.new_revision(ds, number)
    rev["metadata"].update(uid=kw.pop("uid", f"rev-{number}-{hash_of(ds)}"), creationTimestamp=ts(NOW - 3600))
    rev.update(kw)
    return rev


def dpod(name: str, ds: dict[str, Any], node_: str = "node-a", *, hash_: str | None = None, **kw: Any) -> dict[str, Any]:
    """A daemon pod of `ds` on `node_` carrying the hash label (the current one unless told)."""
    h = hash_of(ds) if hash_ is None else hash_
    kw.setdefault("node", node_)
    return pod(name, owner=ds, labels={"app": "web", **({HASH: h} if h else {})}, **kw)


def taint(key: str, effect: str, value: str = "") -> dict[str, Any]:
    return {"key": key, "effect": effect, **({"value": value} if value else {})}


def names(objs) -> list[str]:
    return [o["metadata"]["name"] for o in objs]


def deleted(s: dsc.DaemonSetSync) -> list[str]:
    return [d.ref.name for d in s.plan.of_type(Delete) if d.ref.kind == "Pod"]


def created_on(s: dsc.DaemonSetSync) -> list[str]:
    out: list[str] = []
    for burst in s.plan.of_type(SlowStart):
        out += [placement.target_node_name(c.obj) for c in burst.creates]
    return out


def status_of(s: dsc.DaemonSetSync) -> dict[str, Any] | None:
    ups = s.status.of_type(UpdateStatus)
    return ups[0].obj["status"] if ups else None


# ---- placement: NodeShouldRunDaemonPod ------------------------------------------------------

SEL = template({"app": "web"}, nodeSelector={"disk": "ssd"})
AFF = template({"app": "web"}, affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
    "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}})
TOL_GPU = template({"app": "web"}, tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoExecute"}])
HOSTNET = template({"app": "web"}, hostNetwork=True)
PINNED_B = template({"app": "web"}, nodeName="node-b")


@pytest.mark.parametrize(("tmpl", "n", "want"), [
    (None, node("node-a"), (True, True)),
    (SEL, node("node-a"), (False, False)),                                       # nodeSelector unmet
    (SEL, node("node-a", labels={"disk": "ssd"}), (True, True)),
    (AFF, node("node-a", labels={"zone": "b"}), (False, False)),                 # required affinity unmet
    (AFF, node("node-a", labels={"zone": "a"}), (True, True)),
    (PINNED_B, node("node-a"), (False, False)),                                  # template spec.nodeName elsewhere
    (PINNED_B, node("node-b"), (True, True)),
    # an untolerated NoSchedule taint: no new pod, but a running one stays (shouldContinueRunning)
    (None, node("node-a", taints=[taint("dedicated", "NoSchedule", "db")]), (False, True)),
    # an untolerated NoExecute taint: the pod goes too
    (None, node("node-a", taints=[taint("gpu", "NoExecute")]), (False, False)),
    (TOL_GPU, node("node-a", taints=[taint("gpu", "NoExecute")]), (True, True)),
    (None, node("node-a", taints=[taint("dedicated", "PreferNoSchedule")]), (True, True)),  # only a preference
    # tolerations every daemon pod gets (AddOrUpdateDaemonPodTolerations)
    (None, node("node-a", taints=[taint("node.kubernetes.io/not-ready", "NoExecute")]), (True, True)),
    (None, node("node-a", taints=[taint("node.kubernetes.io/unreachable", "NoExecute")]), (True, True)),
    (None, node("node-a", taints=[taint("node.kubernetes.io/disk-pressure", "NoSchedule")]), (True, True)),
    (None, node("node-a", taints=[taint("node.kubernetes.io/memory-pressure", "NoSchedule")]), (True, True)),
    (None, node("node-a", taints=[taint("node.kubernetes.io/pid-pressure", "NoSchedule")]), (True, True)),
    (None, node("node-a", taints=[taint("node.kubernetes.io/unschedulable", "NoSchedule")]), (True, True)),
    # not-ready is tolerated as NoExecute only: the NoSchedule taint node lifecycle also sets keeps new pods off
    (None, node("node-a", taints=[taint("node.kubernetes.io/not-ready", "NoSchedule")]), (False, True)),
    # network-unavailable is tolerated only by hostNetwork pods (they do not need the pod network)
    (None, node("node-a", taints=[taint("node.kubernetes.io/network-unavailable", "NoSchedule")]), (False, True)),
    (HOSTNET, node("node-a", taints=[taint("node.kubernetes.io/network-unavailable", "NoSchedule")]), (True, True)),
])
def test_node_should_run_daemon_pod(tmpl, n, want) -> None:
    assert placement.should_run(n, daemonset(tmpl=tmpl)) == want


def test_daemon_tolerations_are_added_once_and_keep_the_templates() -> None:
    own = {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}
    out = placement.add_daemon_tolerations({"tolerations": [own, {"key": "gpu", "operator": "Exists"}]})
    keys = [(t["key"], t["effect"]) for t in out["tolerations"] if t.get("effect")]
    assert len(keys) == len(set(keys)) == 6 and out["tolerations"][1] == {"key": "gpu", "operator": "Exists"}
    assert all(t["operator"] == "Exists" and "tolerationSeconds" not in t for t in out["tolerations"])
    assert ("node.kubernetes.io/network-unavailable", "NoSchedule") not in keys
    assert ("node.kubernetes.io/network-unavailable", "NoSchedule") in [
        (t["key"], t["effect"]) for t in placement.add_daemon_tolerations({"hostNetwork": True})["tolerations"]]


@pytest.mark.parametrize(("affinity", "want"), [
    (None, {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}}),
    # preferred terms and pod anti-affinity are kept; required terms are replaced (they were checked already)
    ({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1}],
                       "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                           {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}},
      "podAntiAffinity": {"x": 1}},
     {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1}],
                       "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                           {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}},
      "podAntiAffinity": {"x": 1}}),
])
def test_pin_to_node_replaces_the_required_node_affinity(affinity, want) -> None:
    assert placement.pin_to_node(affinity, "n1") == want


@pytest.mark.parametrize(("pod_spec", "want"), [
    ({"nodeName": "n2", "affinity": placement.pin_to_node(None, "n1")}, "n2"),   # bound: spec.nodeName wins
    ({"affinity": placement.pin_to_node(None, "n1")}, "n1"),                     # pending: from the affinity
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a", "b"]}]}]}}}}, None),
    ({}, None),
])
def test_target_node_name(pod_spec, want) -> None:
    assert placement.target_node_name({"spec": pod_spec}) == want


# ---- manage: creates and deletes ------------------------------------------------------------

NODES = [node("node-a"), node("node-b"), node("node-c")]


def test_creates_one_pod_per_eligible_node_pinned_by_affinity_with_hash_and_tolerations() -> None:
    ds = daemonset(tmpl=SEL)
    nodes = [node("node-a", labels={"disk": "ssd"}), node("node-b"), node("node-c", labels={"disk": "ssd"})]
    s = dsc.sync(ds, nodes, [], now=NOW)
    assert created_on(s) == ["node-a", "node-c"] and s.expect_creations == 2 and s.hash == hash_of(ds)
    p = s.plan.of_type(SlowStart)[0].creates[0].obj
    assert "nodeName" not in p["spec"]   # the scheduler binds it
    assert p["spec"]["affinity"] == placement.pin_to_node(None, "node-a")
    assert p["metadata"]["labels"] == {"app": "web", HASH: hash_of(ds)} and p["metadata"]["generateName"] == "ds-"
    assert p["metadata"]["ownerReferences"][0]["kind"] == "DaemonSet" and p["metadata"]["ownerReferences"][0]["controller"]
    assert {t["key"] for t in p["spec"]["tolerations"]} >= {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}
    # the first revision is snapshotted before the pods
    (rev,) = [c for c in s.plan.of_type(Create) if c.obj["kind"] == "ControllerRevision"]
    assert rev.obj["metadata"]["name"] == f"ds-{hash_of(ds)}" and rev.obj["revision"] == 1
    assert s.plan.actions.index(rev) < s.plan.actions.index(s.plan.of_type(SlowStart)[0])


def test_creates_are_capped_at_burst_replicas_250_in_slow_start_batches() -> None:
    nodes = [node(f"n{i:03d}") for i in range(300)]
    s = dsc.sync(daemonset(), nodes, [], now=NOW)
    (burst,) = s.plan.of_type(SlowStart)
    assert s.expect_creations == 250 and [len(b) for b in burst.batches()] == [1, 2, 4, 8, 16, 32, 64, 123]


def test_template_generation_annotation_labels_new_pods() -> None:
    ds = daemonset(annotations={dsc.TEMPLATE_GENERATION_ANNOTATION: "4"})
    p = dsc.sync(ds, NODES[:1], [], now=NOW).plan.of_type(SlowStart)[0].creates[0].obj
    assert p["metadata"]["labels"][dsc.TEMPLATE_GENERATION_LABEL] == "4"


@pytest.mark.parametrize(("n", "want_deleted", "misscheduled"), [
    (node("node-a", labels={"disk": "hdd"}), ["p"], 1),                                   # selector no longer met
    (node("node-a", labels={"disk": "ssd"}, taints=[taint("gpu", "NoExecute")]), ["p"], 1),  # untolerated NoExecute
    # NoSchedule: the pod stays (shouldContinueRunning), yet the status counts it misscheduled
    # (updateDaemonSetStatus looks at shouldRun only)
    (node("node-a", labels={"disk": "ssd"}, taints=[taint("gpu", "NoSchedule")]), [], 1),
    (node("node-a", labels={"disk": "ssd"}), [], 0),
])
def test_pods_on_nodes_that_should_not_run_them_are_deleted(n, want_deleted, misscheduled) -> None:
    ds = daemonset(tmpl=SEL)
    s = dsc.sync(ds, [n], [dpod("p", ds)], now=NOW)
    assert deleted(s) == want_deleted and not created_on(s)
    assert status_of(s)["numberMisscheduled"] == misscheduled


def test_excess_pods_on_a_node_keep_the_oldest() -> None:
    # podByCreationTimestampAndPhase: scheduled first, then oldest, then by name
    ds = daemonset()
    pods = [dpod("young", ds, created=NOW - 10), dpod("b-old", ds, created=NOW - 100),
            dpod("a-old", ds, created=NOW - 100), dpod("unbound", ds, node="", created=NOW - 1000,
                                                       spec={"affinity": placement.pin_to_node(None, "node-a")})]
    s = dsc.sync(ds, NODES[:1], pods, now=NOW)
    assert sorted(deleted(s)) == ["b-old", "unbound", "young"] and s.expect_deletions == [
        f"default/{n}" for n in deleted(s)]


def test_a_failed_pod_is_deleted_with_an_event_and_backs_off_per_node() -> None:
    ds = daemonset(status={"observedGeneration": 1})
    failed = dpod("f", ds, phase="Failed")
    s = dsc.sync(ds, NODES[:1], [failed], now=NOW)
    assert deleted(s) == ["f"] and s.backoff_next == [f"{ds['metadata']['uid']}/1/node-a"]
    (ev,) = s.plan.of_type(Event)
    assert (ev.type, ev.reason) == ("Warning", "FailedDaemonPod") and "default/f on node node-a" in ev.message
    # the loop records the failure; the next failed pod there waits out the back-off (1 s, doubling)
    backoff = Backoff(*dsc.FAILED_PODS_BACKOFF)
    for k in s.backoff_next:
        backoff.next(k, NOW)
    again = dsc.sync(ds, NODES[:1], [dpod("f2", ds, phase="Failed")], now=NOW + 0.5, backoff=backoff)
    assert deleted(again) == [] and again.plan.requeue_after == 1.0 and not again.backoff_next
    later = dsc.sync(ds, NODES[:1], [dpod("f2", ds, phase="Failed")], now=NOW + 2, backoff=backoff)
    assert deleted(later) == ["f2"]


def test_a_failed_pod_is_replaced_only_once_it_is_gone() -> None:
    # the failed pod is still listed until deleted: no second pod on the node meanwhile
    ds = daemonset()
    s = dsc.sync(ds, NODES[:1], [dpod("f", ds, phase="Failed", deleting=NOW - 1, finalizers=["x"])], now=NOW)
    assert not deleted(s) and created_on(s) == ["node-a"]   # a terminal pod being deleted is ignored


def test_a_succeeded_pod_is_deleted_with_a_normal_event() -> None:
    ds = daemonset()
    s = dsc.sync(ds, NODES[:1], [dpod("s", ds, phase="Succeeded")], now=NOW)
    assert deleted(s) == ["s"] and [(e.type, e.reason) for e in s.plan.of_type(Event)] == [("Normal", "SucceededDaemonPod")]


def test_a_terminating_pod_holds_its_node_until_gone() -> None:
    ds = daemonset()
    s = dsc.sync(ds, NODES[:1], [dpod("t", ds, deleting=NOW - 1)], now=NOW)
    assert not created_on(s) and not deleted(s)


def test_pending_pods_pinned_to_a_vanished_node_are_deleted() -> None:
    ds = daemonset()
    pinned = dpod("pinned", ds, node="", spec={"affinity": placement.pin_to_node(None, "gone")})
    bound = dpod("bound", ds, node="gone")  # bound pods on a gone node are the pod GC's
    s = dsc.sync(ds, NODES[:1], [pinned, bound], now=NOW)
    assert deleted(s) == ["pinned"]


def test_orphans_matching_the_selector_are_adopted_and_count() -> None:
    ds = daemonset()
    orphan = pod("orphan", node="node-a", labels={"app": "web"})
    s = dsc.sync(ds, NODES[:1], [orphan], now=NOW)
    assert [p.reason for p in s.plan.of_type(Patch)] == ["adopt"] and not created_on(s)


def test_an_empty_selector_acts_on_nothing() -> None:
    s = dsc.sync(daemonset(selector={}), NODES, [], now=NOW)
    assert [(e.reason) for e in s.plan.of_type(Event)] == ["SelectingAll"] and len(s.plan.actions) == 1
    assert not s.status.actions


def test_a_daemonset_being_deleted_is_left_alone() -> None:
    s = dsc.sync(daemonset(deleting=NOW - 1), NODES, [], now=NOW)
    assert not s.plan.actions and not s.status.actions


def test_unsatisfied_expectations_only_write_the_status_without_observed_generation() -> None:
    ds = daemonset(generation=3, status={"observedGeneration": 2})
    s = dsc.sync(ds, NODES, [], now=NOW, satisfied=False)
    assert not created_on(s) and status_of(s)["observedGeneration"] == 2 and status_of(s)["desiredNumberScheduled"] == 3


def test_expectations_of_a_sync_set_creates_and_deletes_together() -> None:
    exp = Expectations()
    exp.set_expectations("default/ds", 2, ["default/a"], NOW)
    assert exp.pending("default/ds") == (2, 1) and not exp.satisfied("default/ds", NOW)
    exp.lower_expectations("default/ds", 1, 0)
    exp.creation_observed("default/ds")
    exp.deletion_observed("default/ds", "default/a")
    assert exp.satisfied("default/ds", NOW)


# ---- status ---------------------------------------------------------------------------------

def test_status_counts_per_node() -> None:
    ds = daemonset(tmpl=SEL, min_ready=30, generation=2)
    h = hash_of(ds)
    nodes = [node(f"n{i}", labels={"disk": "ssd"}) for i in range(5)] + [node("other")]
    pods = [
        dpod("avail", ds, "n0"),                                   # ready long ago: available, updated
        dpod("fresh", ds, "n1", ready_since=NOW - 10),             # ready, not yet available (minReadySeconds)
        dpod("old", ds, "n2", hash_="oldhash"),                    # available but not updated
        dpod("unready", ds, "n3", ready=False),
        dpod("stray", ds, "other"),                                # misscheduled
        # n4: nothing scheduled
    ]
    s = dsc.sync(ds, nodes, pods, now=NOW)
    st = status_of(s)
    assert {k: st[k] for k in st if k != "observedGeneration"} == {
        "desiredNumberScheduled": 5, "currentNumberScheduled": 4, "numberMisscheduled": 1, "numberReady": 3,
        "numberAvailable": 2, "updatedNumberScheduled": 3, "numberUnavailable": 3}
    assert st["observedGeneration"] == 2 and s.hash == h
    assert s.status.requeue_after == 30.0   # ready != available: look again after minReadySeconds


def test_status_uses_the_oldest_pod_of_a_node() -> None:
    ds = daemonset(strategy=rolling(1, 1))
    pods = [dpod("old-ready", ds, hash_="x", created=NOW - 100), dpod("new-unready", ds, ready=False, created=NOW - 5)]
    st = status_of(dsc.sync(ds, NODES[:1], pods, now=NOW))
    assert (st["numberReady"], st["updatedNumberScheduled"], st["currentNumberScheduled"]) == (1, 0, 1)


def test_the_status_write_keeps_the_collision_count() -> None:
    ds = daemonset(status={"collisionCount": 3})
    st = status_of(dsc.sync(ds, NODES[:1], [], now=NOW))
    assert st["collisionCount"] == 3 and st["desiredNumberScheduled"] == 1 and st["observedGeneration"] == 1


def test_an_unchanged_status_is_not_written() -> None:
    ds = daemonset(status={"observedGeneration": 1, "desiredNumberScheduled": 1, "currentNumberScheduled": 1,
                           "numberMisscheduled": 0, "numberReady": 1, "updatedNumberScheduled": 1,
                           "numberAvailable": 1, "numberUnavailable": 0})
    s = dsc.sync(ds, NODES[:1], [dpod("p", ds)], [revision_of(ds, 1)], now=NOW)
    assert not s.status.actions and not s.plan.actions


# ---- history --------------------------------------------------------------------------------

def test_an_existing_matching_revision_is_current_and_not_recreated() -> None:
    ds = daemonset()
    s = dsc.sync(ds, NODES[:1], [dpod("p", ds)], [revision_of(ds, 1)], now=NOW)
    assert not s.plan.of_type(Create) and s.hash == hash_of(ds)


def test_revision_data_is_the_template_replace_patch() -> None:
    ds = daemonset()
    assert history.patch_data(ds) == {"spec": {"template": {**ds["spec"]["template"], "$patch": "replace"}}}
    rev = history.new_revision(ds, 7)
    assert rev["metadata"]["labels"] == {"app": "web", HASH: hash_of(ds)} and rev["revision"] == 7


def test_revision_match_is_semantic_as_a_go_client_writes_it() -> None:
    # Go's json.Marshal of the template writes "creationTimestamp": null and no empty maps
    ds = daemonset()
    rev = revision_of(ds, 1)
    rev["data"]["spec"]["template"]["metadata"]["creationTimestamp"] = None
    rev["data"]["spec"]["template"]["spec"]["volumes"] = []
    assert history.matches(ds, rev)
    rev["data"]["spec"]["template"]["spec"]["containers"][0]["image"] = "nginx"
    assert not history.matches(ds, rev)


def test_an_orphan_revision_of_the_selector_is_adopted() -> None:
    ds = daemonset()
    orphan = revision_of(ds, 1)
    del orphan["metadata"]["ownerReferences"]
    s = dsc.sync(ds, NODES[:1], [], [orphan], now=NOW)
    assert [(p.ref.kind, p.reason) for p in s.plan.of_type(Patch)] == [("ControllerRevision", "adopt")]
    assert not [c for c in s.plan.of_type(Create) if c.obj["kind"] == "ControllerRevision"]


def test_a_new_template_gets_max_plus_one() -> None:
    v1, v2 = daemonset(), daemonset(tmpl=template(image="nginx"))
    s = dsc.sync(v2, NODES[:1], [], [revision_of(v1, 4)], now=NOW)
    (c,) = [c for c in s.plan.of_type(Create) if c.obj["kind"] == "ControllerRevision"]
    assert c.obj["revision"] == 5 and s.hash == hash_of(v2) != hash_of(v1)


def test_rolling_back_renumbers_the_old_revision() -> None:
    # constructHistory: the matching revision takes max(old)+1 rather than a new object
    v1, v2 = daemonset(), daemonset(tmpl=template(image="nginx"))
    s = dsc.sync(v1, NODES[:1], [], [revision_of(v1, 1), revision_of(v2, 2)], now=NOW)
    (u,) = s.plan.of_type(Update)
    assert u.obj["metadata"]["name"] == f"ds-{hash_of(v1)}" and u.obj["revision"] == 3 and s.hash == hash_of(v1)


def test_duplicate_current_revisions_keep_the_highest_and_relabel_pods() -> None:
    ds = daemonset()
    dup = revision_of(ds, 2, uid="dup")
    dup["metadata"]["name"], dup["metadata"]["labels"][HASH] = "ds-dup", "duphash"
    s = dsc.sync(ds, NODES[:1], [dpod("p", ds)], [revision_of(ds, 1), dup], now=NOW)
    assert s.hash == "duphash"
    assert [(p.ref.name, p.patch) for p in s.plan.of_type(Patch)] == [("p", {"metadata": {"labels": {HASH: "duphash"}}})]
    assert [d.ref.name for d in s.plan.of_type(Delete) if d.ref.kind == "ControllerRevision"] == [f"ds-{hash_of(ds)}"]


def test_a_revision_without_the_hash_label_gets_its_name() -> None:
    ds = daemonset()
    rev = revision_of(ds, 1)
    del rev["metadata"]["labels"][HASH]
    s = dsc.sync(ds, NODES[:1], [], [rev], now=NOW)
    (u,) = s.plan.of_type(Update)
    assert u.obj["metadata"]["labels"][HASH] == rev["metadata"]["name"] == f"ds-{hash_of(ds)}" and s.hash == u.obj[
        "metadata"]["name"]


def test_a_name_taken_by_another_template_bumps_the_collision_count() -> None:
    ds, other = daemonset(status={"collisionCount": 1}), daemonset(tmpl=template(image="nginx"))
    squatter = revision_of(other, 1, uid="sq")
    squatter["metadata"]["name"] = f"ds-{hash_of(ds)}"
    squatter["metadata"]["ownerReferences"] = [owner_ref({"kind": "Foo", "metadata": {"name": "f", "uid": "f"}})]
    s = dsc.sync(ds, NODES, [], [squatter], now=NOW)
    (u,) = s.plan.of_type(UpdateStatus)
    assert u.obj["status"]["collisionCount"] == 2 and s.error and not created_on(s) and not s.status.actions
    # the hash takes the collision count in: the next name differs
    assert hash_of(u.obj) != hash_of(ds)


def test_old_revisions_beyond_the_limit_go_oldest_first_unless_a_pod_uses_them() -> None:
    v = [daemonset(tmpl=template(image=f"img{i}"), limit=2) for i in range(5)]
    cur = v[4]
    revs = [revision_of(v[i], i + 1) for i in range(5)]
    live = dpod("still-old", cur, hash_=hash_of(v[0]))
    s = dsc.sync(cur, NODES[:1], [live], revs, now=NOW)
    gone = [d.ref.name for d in s.plan.of_type(Delete) if d.ref.kind == "ControllerRevision"]
    assert gone == [f"ds-{hash_of(v[1])}", f"ds-{hash_of(v[2])}"]   # 4 old, keep 2: kill 2, v0 skipped (live)


# ---- updates --------------------------------------------------------------------------------

def _old_fleet(ds: dict[str, Any], n: int, **kw: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    nodes = [node(f"n{i}") for i in range(n)]
    return nodes, [dpod(f"p{i}", ds, f"n{i}", hash_="oldhash", **kw) for i in range(n)]


@pytest.mark.parametrize(("max_unavailable", "n", "want"), [
    (1, 4, 1),
    (2, 4, 2),
    ("25%", 5, 2),     # 1.25 rounds up (a Deployment's maxUnavailable rounds down)
    ("10%", 4, 1),     # 0.4 rounds up to 1
    ("100%", 3, 3),
    (0, 3, 1),         # neither surge nor unavailability: upstream falls back to 1
])
def test_rolling_update_deletes_old_available_pods_within_max_unavailable(max_unavailable, n, want) -> None:
    ds = daemonset(strategy=rolling(max_unavailable, 0))
    nodes, pods = _old_fleet(ds, n)
    s = dsc.sync(ds, nodes, pods, [revision_of(ds, 2)], now=NOW)
    assert len(deleted(s)) == want and not created_on(s)


def test_rolling_update_counts_unavailable_nodes_against_the_budget() -> None:
    ds = daemonset(strategy=rolling(2, 0))
    nodes, pods = _old_fleet(ds, 5)
    pods[0] = dpod("new-unready", ds, "n0", ready=False)         # new, not available: counts
    pods[1] = dpod("terminating", ds, "n1", hash_="oldhash", deleting=NOW - 1)  # being deleted: counts
    s = dsc.sync(ds, nodes, pods, [revision_of(ds, 2)], now=NOW)
    assert deleted(s) == []


def test_rolling_update_always_replaces_old_unavailable_pods() -> None:
    ds = daemonset(strategy=rolling(1, 0))
    nodes, pods = _old_fleet(ds, 4)
    pods[2] = dpod("old-unready", ds, "n2", hash_="oldhash", ready=False)
    pods[3] = dpod("old-unready2", ds, "n3", hash_="oldhash", ready=False)
    s = dsc.sync(ds, nodes, pods, [revision_of(ds, 2)], now=NOW)
    assert sorted(deleted(s)) == ["old-unready", "old-unready2"]   # beyond maxUnavailable, no available one


def test_on_delete_leaves_old_pods_and_recreates_deleted_ones_new() -> None:
    ds = daemonset(strategy={"type": "OnDelete"})
    nodes, pods = _old_fleet(ds, 3)
    s = dsc.sync(ds, nodes, pods[:2], [revision_of(ds, 2)], now=NOW)
    assert deleted(s) == [] and created_on(s) == ["n2"]
    assert s.plan.of_type(SlowStart)[0].creates[0].obj["metadata"]["labels"][HASH] == hash_of(ds)
    assert status_of(s)["updatedNumberScheduled"] == 0


def test_surge_creates_new_pods_beside_old_ones_up_to_max_surge() -> None:
    ds = daemonset(strategy=rolling(0, 2))
    nodes, pods = _old_fleet(ds, 5)
    s = dsc.sync(ds, nodes, pods, [revision_of(ds, 2)], now=NOW)
    assert created_on(s) == ["n0", "n1"] and not deleted(s)


@pytest.mark.parametrize(("max_surge", "n", "want"), [("10%", 3, 1), ("50%", 5, 3), (1, 5, 1)])
def test_surge_percentages_round_up(max_surge, n, want) -> None:
    ds = daemonset(strategy=rolling(0, max_surge))
    nodes, pods = _old_fleet(ds, n)
    assert len(created_on(dsc.sync(ds, nodes, pods, [revision_of(ds, 2)], now=NOW))) == want


def test_surge_replaces_the_old_pod_once_the_new_one_is_available() -> None:
    ds = daemonset(strategy=rolling(0, 1), min_ready=10)
    node_ = [node("n0")]
    old = dpod("old", ds, "n0", hash_="oldhash", created=NOW - 100)
    waiting = dsc.sync(ds, node_, [old, dpod("new", ds, "n0", ready_since=NOW - 5, created=NOW - 6)],
                       [revision_of(ds, 2)], now=NOW)
    assert deleted(waiting) == [] and not created_on(waiting)
    done = dsc.sync(ds, node_, [old, dpod("new", ds, "n0", ready_since=NOW - 60, created=NOW - 61)],
                    [revision_of(ds, 2)], now=NOW)
    assert deleted(done) == ["old"]


def test_surge_replaces_an_old_pod_that_stopped_being_ready() -> None:
    ds = daemonset(strategy=rolling(0, 1))
    pods = [dpod("old", ds, "n0", hash_="oldhash", created=NOW - 100, ready=False),
            dpod("new", ds, "n0", ready=False, created=NOW - 6)]
    assert deleted(dsc.sync(ds, [node("n0")], pods, [revision_of(ds, 2)], now=NOW)) == ["old"]


def test_surge_creates_beside_a_terminating_pod() -> None:
    # podsShouldBeOnNode: with surge a node needs one pod not being deleted; without, it waits
    surge, plain = daemonset(strategy=rolling(0, 1)), daemonset(strategy=rolling(1, 0))
    assert created_on(dsc.sync(surge, [node("n0")], [dpod("t", surge, "n0", deleting=NOW - 1)], now=NOW)) == ["n0"]
    assert created_on(dsc.sync(plain, [node("n0")], [dpod("t", plain, "n0", deleting=NOW - 1)], now=NOW)) == []


def test_surge_immediately_replaces_old_unavailable_pods_beyond_max_surge() -> None:
    ds = daemonset(strategy=rolling(0, 1))
    nodes, pods = _old_fleet(ds, 3, ready=False)
    assert created_on(dsc.sync(ds, nodes, pods, [revision_of(ds, 2)], now=NOW)) == ["n0", "n1", "n2"]


def test_surge_keeps_pods_on_nodes_leaving_the_placement_until_others_are_available() -> None:
    # n1 took an untolerated NoSchedule taint: no new pod there, the old one may continue (an
    # untolerated NoExecute taint or a selector mismatch has the manage pass delete it at once)
    ds = daemonset(strategy=rolling(0, 1))
    nodes = [node("n0"), node("n1", taints=[taint("dedicated", "NoSchedule")])]
    on_leaving = dpod("leaving", ds, "n1", hash_="oldhash")
    waiting = dsc.sync(ds, nodes, [on_leaving, dpod("new", ds, "n0", ready=False)], [revision_of(ds, 2)], now=NOW)
    assert deleted(waiting) == []     # available 1 (n1's old pod) - desired 1 = 0: keep it
    ready = dsc.sync(ds, nodes, [on_leaving, dpod("new", ds, "n0")], [revision_of(ds, 2)], now=NOW)
    assert deleted(ready) == ["leaving"]


def test_invalid_max_unavailable_fails_the_sync_but_writes_the_status() -> None:
    ds = daemonset(strategy=rolling("lots", 0))
    nodes, pods = _old_fleet(ds, 2)
    s = dsc.sync(ds, nodes, pods, [revision_of(ds, 2)], now=NOW)
    assert s.error and "lots" in s.error and not deleted(s) and status_of(s) is not None


# ---- simulated rollouts ---------------------------------------------------------------------

class Cluster:
    """A fake cluster the plans are applied to: the scheduler binds a created pod at once, a pod
    becomes ready `ready_after` seconds after creation, a deleted pod lingers one step
    (graceful termination). Every step is 10 s."""

    def __init__(self, ds: dict[str, Any], n: int, ready_after: float = 15.0) -> None:
        self.ds, self.ready_after, self.now = ds, ready_after, NOW
        self.nodes = [node(f"n{i:02d}") for i in range(n)]
        self.pods: dict[str, dict[str, Any]] = {}
        self.revisions: list[dict[str, Any]] = []
        self.ids = itertools.count()

    def step(self) -> dsc.DaemonSetSync:
        self.now += 10
        for uid_, p in list(self.pods.items()):
            if p["metadata"].get("deletionTimestamp"):
                del self.pods[uid_]
            elif p["status"]["conditions"][0]["status"] == "False" and p["ready_at"] <= self.now:
                p["status"]["conditions"][0] = {"type": "Ready", "status": "True", "lastTransitionTime": ts(p["ready_at"])}
        s = dsc.sync(self.ds, self.nodes, list(self.pods.values()), self.revisions, now=self.now)
        for a in [*s.plan.actions, *s.status.actions]:
            if isinstance(a, Create):
                rev = copy.deepcopy(a.obj)
                rev["metadata"]["uid"] = f"rev-{next(self.ids)}"
                self.revisions.append(rev)
            elif isinstance(a, SlowStart):
                for c in a.creates:
                    self._bind(c.obj)
            elif isinstance(a, Delete) and a.ref.kind == "Pod":
                self.pods[a.ref.uid]["metadata"]["deletionTimestamp"] = ts(self.now)
            elif isinstance(a, Delete):
                self.revisions = [r for r in self.revisions if r["metadata"]["uid"] != a.ref.uid]
            elif isinstance(a, UpdateStatus):
                self.ds = {**self.ds, "status": a.obj["status"]}
        return s

    def _bind(self, obj: dict[str, Any]) -> None:
        p = copy.deepcopy(obj)
        i = next(self.ids)
        p["metadata"].update(name=f"ds-{i}", uid=f"pod-{i}", creationTimestamp=ts(self.now))
        p["spec"]["nodeName"] = placement.target_node_name(p)
        p["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}
        p["ready_at"] = self.now + self.ready_after
        self.pods[p["metadata"]["uid"]] = p

    def available_nodes(self) -> set[str]:
        mrs = self.ds["spec"].get("minReadySeconds", 0)
        return {p["spec"]["nodeName"] for p in self.pods.values()
                if not p["metadata"].get("deletionTimestamp") and is_available(p, mrs, self.now)}

    def pods_on(self, n: str) -> list[dict[str, Any]]:
        return [p for p in self.pods.values() if p["spec"]["nodeName"] == n and not p["metadata"].get("deletionTimestamp")]

    def settle(self, steps: int = 20) -> None:
        for _ in range(steps):
            self.step()

    def update_template(self, image: str) -> None:
        self.ds = {**self.ds, "metadata": {**self.ds["metadata"], "generation": 2},
                   "spec": {**self.ds["spec"], "template": template(image=image)}}


@pytest.mark.parametrize(("n", "max_unavailable", "budget", "min_ready"), [
    (10, 1, 1, 0), (10, 3, 3, 0), (12, "25%", 3, 0), (7, "30%", 3, 10), (20, "10%", 2, 20),
])
def test_rollout_never_exceeds_max_unavailable(n, max_unavailable, budget, min_ready) -> None:
    c = Cluster(daemonset(strategy=rolling(max_unavailable, 0), min_ready=min_ready), n)
    c.settle()
    assert len(c.available_nodes()) == n and c.ds["status"]["numberAvailable"] == n
    c.update_template("nginx")
    new_hash = hash_of(c.ds)
    worst = 0
    for _ in range(400):
        c.step()
        unavailable = n - len(c.available_nodes())
        worst = max(worst, unavailable)
        assert unavailable <= budget, f"{unavailable} nodes without an available pod (maxUnavailable {budget})"
        assert all(len(c.pods_on(x["metadata"]["name"])) <= 1 for x in c.nodes)
        if c.ds["status"].get("updatedNumberScheduled") == n and len(c.available_nodes()) == n:
            break
    assert worst == budget   # the budget was used, not only respected
    assert all(p["metadata"]["labels"][HASH] == new_hash for p in c.pods.values())
    assert c.ds["status"]["numberAvailable"] == n and c.ds["status"]["observedGeneration"] == 2
    assert [r["revision"] for r in sorted(c.revisions, key=lambda r: r["revision"])] == [1, 2]


@pytest.mark.parametrize(("n", "max_surge", "surge"), [(10, 2, 2), (9, "34%", 4)])
def test_surge_rollout_keeps_every_node_available(n, max_surge, surge) -> None:
    c = Cluster(daemonset(strategy=rolling(0, max_surge)), n)
    c.settle()
    c.update_template("nginx")
    new_hash = hash_of(c.ds)
    worst = 0
    for _ in range(400):
        c.step()
        assert len(c.available_nodes()) == n
        doubled = sum(len(c.pods_on(x["metadata"]["name"])) == 2 for x in c.nodes)
        assert all(len(c.pods_on(x["metadata"]["name"])) <= 2 for x in c.nodes) and doubled <= surge
        worst = max(worst, doubled)
        if c.ds["status"].get("updatedNumberScheduled") == n and all(
                len(c.pods_on(x["metadata"]["name"])) == 1 for x in c.nodes):
            break
    assert worst == surge
    assert all(p["metadata"]["labels"][HASH] == new_hash for p in c.pods.values())


def test_a_node_joining_gets_a_pod_and_a_node_tainted_noexecute_loses_it() -> None:
    c = Cluster(daemonset(), 2)
    c.settle(3)
    c.nodes.append(node("n99"))
    c.step()
    assert len(c.pods_on("n99")) == 1
    c.nodes[0] = node("n00", taints=[taint("maintenance", "NoExecute")])
    c.step()
    assert c.pods_on("n00") == [] and c.ds["status"]["desiredNumberScheduled"] == 2
