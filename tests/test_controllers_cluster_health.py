"""Garbage collection (garbagecollector_test.go: attemptToDeleteItem cases, foreground, orphan,
cross-namespace), node lifecycle (node_lifecycle_controller_test.go: grace periods, Unknown
conditions, zone states, rate limits; taint_eviction_test.go; defaulttolerationseconds admission
tests) and disruption (disruption_test.go: minAvailable/maxUnavailable ints and percentages;
eviction_test.go: 429 messages, unhealthyPodEvictionPolicy)."""

from __future__ import annotations

import pytest
from controllers_objects import NOW, meta, node, owner_ref, pod, replicaset, ts

from nodeagent.cluster.admission.tolerations import add_default_tolerations
from nodeagent.cluster.controllers.common.actions import Delete, Patch, UpdateStatus
from nodeagent.cluster.controllers.disruption import status as pdbs
from nodeagent.cluster.controllers.garbagecollector.decide import collect, deletion_finalizers
from nodeagent.cluster.controllers.nodelifecycle import eviction as taint_eviction
from nodeagent.cluster.controllers.nodelifecycle import health, tainting, zones

NAMESPACED = {"ReplicaSet": True, "Deployment": True, "Pod": True, "Node": False, "Namespace": False}
scoped = lambda api, kind: NAMESPACED.get(kind)


def test_gc_deletes_orphans_whose_owner_is_gone_and_keeps_the_rest() -> None:
    rs = replicaset("web")
    live = pod("live", owner=rs)
    gone = pod("gone", owner=replicaset("deleted"))
    stale_uid = pod("stale", labels={})
    stale_uid["metadata"]["ownerReferences"] = [{**owner_ref(rs), "uid": "another-uid"}]
    (d1, d2) = collect([rs, live, gone, stale_uid], scoped).of_type(Delete)
    assert {d1.ref.name, d2.ref.name} == {"gone", "stale"} and d1.propagation == "Background"
    assert d1.verify_absent and d1.verify_absent[0].kind == "ReplicaSet"


def test_gc_removes_dangling_references_beside_a_solid_owner() -> None:
    rs = replicaset("web")
    p = pod("p", owner=rs)
    p["metadata"]["ownerReferences"].append({"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "old", "uid": "old-uid"})
    (patch,) = collect([rs, p], scoped).of_type(Patch)
    assert patch.patch["metadata"]["ownerReferences"] == [{"$patch": "delete", "uid": "old-uid"}]


def test_gc_cross_namespace_owner_is_dangling_and_cluster_scoped_child_of_namespaced_owner_is_left() -> None:
    rs = replicaset("web")
    elsewhere = pod("p", owner=rs, namespace="other")
    (d,) = collect([rs, elsewhere], scoped).of_type(Delete)
    assert d.ref.name == "p"
    n = node("n1")
    n["metadata"]["ownerReferences"] = [owner_ref(rs)]
    plan = collect([rs, n], scoped)
    assert not plan.of_type(Delete) and [e.reason for e in plan.actions] == ["OwnerRefInvalidNamespace"]


def test_gc_foreground_waits_for_blocking_dependents_then_drops_its_finalizer() -> None:
    dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta("web", deleting=NOW, finalizers=["foregroundDeletion"])}
    rs = replicaset("web-1", owner=dep)
    p = pod("p", owner=rs)
    plan = collect([dep, rs, p], scoped)
    (d,) = plan.of_type(Delete)
    assert d.ref.name == "web-1" and d.propagation == "Foreground"   # the RS has dependents of its own
    assert collect([dep], scoped).of_type(Patch)[0].patch["metadata"]["$deleteFromPrimitiveList/finalizers"] == ["foregroundDeletion"]


def test_gc_orphan_strips_references_then_the_finalizer() -> None:
    rs = {**replicaset("web"), "metadata": {**replicaset("web")["metadata"], "deletionTimestamp": ts(NOW), "finalizers": ["orphan"]}}
    p = pod("p", owner=rs)
    patches = collect([rs, p], scoped).of_type(Patch)
    assert [x.ref.name for x in patches] == ["p", "web"]
    assert patches[0].patch["metadata"]["ownerReferences"] == [{"$patch": "delete", "uid": rs["metadata"]["uid"]}]
    assert deletion_finalizers("Orphan") == ["orphan"] and deletion_finalizers(None) == []


def test_node_goes_unknown_after_the_grace_period_with_upstreams_words() -> None:
    n = node("n1", heartbeat=NOW - 100)
    h = health.observe(n, None, None, NOW - 100)
    assert health.stale_status(n, h, NOW - 60) is None
    st = health.stale_status(n, h, NOW - 49)
    ready = next(c for c in st["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"], ready["message"]) == ("Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.")
    mem = next(c for c in st["conditions"] if c["type"] == "MemoryPressure")
    assert (mem["reason"], mem["message"]) == ("NodeStatusNeverUpdated", "Kubelet never posted node status.")
    lease = {"spec": {"renewTime": ts(NOW - 55)}}
    assert health.stale_status(n, health.observe(n, h, lease, NOW - 55), NOW - 49) is None   # a renewed Lease counts
    fresh = node("n2", ready=None, created=NOW - 59)
    assert health.stale_status(fresh, health.observe(fresh, None, None, NOW), NOW) is None     # 60 s startup grace


def test_condition_taints_and_swap() -> None:
    n = node("n1", ready="Unknown", unschedulable=True, taints=[{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}])
    add, remove = health.condition_taints(n)
    assert sorted(t["key"] for t in add) == ["node.kubernetes.io/unreachable", "node.kubernetes.io/unschedulable"]
    assert [t["key"] for t in remove] == ["node.kubernetes.io/not-ready"]
    out = health.swap_taints(n, add, remove, NOW)
    assert {t["key"] for t in out} == {"node.kubernetes.io/unreachable", "node.kubernetes.io/unschedulable"} and out[0]["timeAdded"] == ts(NOW)


@pytest.mark.parametrize(("ready", "want"), [
    (["True", "True", "False"], "Normal"), (["False", "False"], "FullDisruption"), (["True", "False", "False"], "Normal"),
    (["True", "False", "False", "False"], "PartialDisruption"), (["True"] * 4 + ["False"] * 3, "Normal"), ([None, "Unknown"], "FullDisruption"),
])
def test_zone_state(ready, want) -> None:
    assert zones.zone_state(ready, 0.55)[1] == want


def test_eviction_rates_per_zone_and_full_disruption_stops_everything() -> None:
    big = [node(f"a{i}", labels={"topology.kubernetes.io/zone": "a"}) for i in range(60)]
    small = [node(f"b{i}", labels={"topology.kubernetes.io/zone": "b"}) for i in range(4)]
    ready = {n["metadata"]["name"]: "False" for n in big[:40] + small[:3]} | {n["metadata"]["name"]: "True" for n in big[40:] + small[3:]}
    d = zones.handle(big + small, ready, {})
    assert d.rates == {":\x00:a": 0.01, ":\x00:b": 0.0} and not d.all_disrupted
    down = zones.handle(big, dict.fromkeys(ready, "Unknown"), {})
    assert down.all_disrupted and down.rates == {":\x00:a": 0.0}
    back = zones.handle(big, {**dict.fromkeys(ready, "Unknown"), "a0": "True"}, down.states)
    assert back.exiting and back.rates[":\x00:a"] == 0.01   # 59 of 60 down: partial, a large zone


def test_token_bucket_taints_one_node_per_ten_seconds() -> None:
    q = tainting.ZoneQueue(tainting.TokenBucket(0.1))
    for i in range(3):
        q.add(f"n{i}", NOW)
    assert q.due(NOW) == ["n0"]
    q.remove("n0")
    assert q.due(NOW + 5) == [] and q.due(NOW + 10) == ["n1"]
    q.swap_rate(0, NOW + 10)
    assert q.due(NOW + 1000) == []


def test_taint_based_eviction_after_toleration_seconds() -> None:
    n = node("n1", ready="Unknown", taints=[{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": ts(NOW - 100)}])
    defaulted = pod("p", created=NOW - 3600)
    add_default_tolerations(defaulted)
    assert [t["tolerationSeconds"] for t in defaulted["spec"]["tolerations"]] == [300, 300]
    plan = taint_eviction.decide(n, [defaulted], NOW)
    assert not plan.of_type(Delete) and plan.requeue_after == 200
    plan = taint_eviction.decide(n, [defaulted], NOW + 200)
    (d,) = plan.of_type(Delete)
    (cond,) = plan.of_type(Patch)
    assert cond.patch["status"]["conditions"][0]["reason"] == "DeletionByTaintManager" and d.ref.name == "p"
    forever = pod("ds", tolerations=[{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"}])
    assert taint_eviction.decide(n, [forever], NOW + 10**6).actions == []
    assert len(taint_eviction.decide(n, [pod("bare")], NOW).of_type(Delete)) == 1      # untolerated: at once
    own = pod("x", tolerations=[{"operator": "Exists"}])
    add_default_tolerations(own)
    assert own["spec"]["tolerations"] == [{"operator": "Exists"}]                        # already tolerates everything


def pdb(*, min_available=None, max_unavailable=None, status=None, policy=None, generation=1):
    sp = {"selector": {"matchLabels": {"app": "web"}}}
    if min_available is not None:
        sp["minAvailable"] = min_available
    if max_unavailable is not None:
        sp["maxUnavailable"] = max_unavailable
    if policy:
        sp["unhealthyPodEvictionPolicy"] = policy
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": meta("budget", generation=generation), "spec": sp,
            "status": status or {}}


RS = replicaset("web", 4)
scale_of = lambda ref, ns: (RS["metadata"]["uid"], 4) if ref.get("uid") == RS["metadata"]["uid"] else None


@pytest.mark.parametrize(("kw", "ready", "want"), [
    ({"min_available": 3}, 4, (4, 4, 3, 1)), ({"min_available": 3}, 3, (4, 3, 3, 0)), ({"min_available": "50%"}, 4, (4, 4, 2, 2)),
    ({"min_available": "51%"}, 4, (4, 4, 3, 1)), ({"max_unavailable": 1}, 4, (4, 4, 3, 1)), ({"max_unavailable": "25%"}, 3, (4, 3, 3, 0)),
    ({"max_unavailable": "26%"}, 4, (4, 4, 2, 2)),
])
def test_pdb_status(kw, ready, want) -> None:
    pods = [pod(f"p{i}", owner=RS, ready=i < ready) for i in range(4)]
    (upd,) = pdbs.sync(pdb(**kw), pods, scale_of, now=NOW).of_type(UpdateStatus)
    st = upd.obj["status"]
    assert (st["expectedPods"], st["currentHealthy"], st["desiredHealthy"], st["disruptionsAllowed"]) == want
    cond = st["conditions"][0]
    assert (cond["status"], cond["reason"]) == (("True", "SufficientPods") if want[3] > 0 else ("False", "InsufficientPods"))


def test_pdb_fail_safe_without_a_controller_and_disrupted_pods_expire() -> None:
    (upd,) = pdbs.sync(pdb(max_unavailable=1), [pod("lost", owner=replicaset("ghost"))], scale_of, now=NOW).of_type(UpdateStatus)
    assert upd.obj["status"]["disruptionsAllowed"] == 0 and upd.obj["status"]["conditions"][0]["reason"] == "SyncFailed"
    pods = [pod(f"p{i}", owner=RS) for i in range(4)]
    recent = pdb(min_available=2, status={"disruptedPods": {"p0": ts(NOW - 30)}})
    plan = pdbs.sync(recent, pods, scale_of, now=NOW)
    assert plan.of_type(UpdateStatus)[0].obj["status"]["currentHealthy"] == 3 and plan.requeue_after == 90
    old = pdb(min_available=2, status={"disruptedPods": {"p0": ts(NOW - 130)}})
    assert pdbs.sync(old, pods, scale_of, now=NOW).of_type(UpdateStatus)[0].obj["status"]["currentHealthy"] == 4
