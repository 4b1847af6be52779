"""Deployment decisions against upstream's cases (deployment_util_test.go TestResolveFenceposts,
TestNewRSNewReplicas; rolling_test.go reconcileNewReplicaSet / reconcileOldReplicaSets; sync_test.go
TestScale; progress_test.go), a rolling update simulated step by step against the decision with
random readiness (hypothesis: never below replicas - maxUnavailable available), Recreate, pause,
history cleanup, hash collisions, and what `kubectl rollout status` / `rollout undo` read."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from controllers_objects import NOW, meta, pod, ts
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeagent.cluster.controllers.common import hashing
from nodeagent.cluster.controllers.common.actions import Create, Delete, Event, Patch, Update, UpdateStatus
from nodeagent.cluster.controllers.deployment import reconcile as dc
from nodeagent.cluster.controllers.deployment import util


def deployment(replicas: int = 3, surge: Any = "25%", unavailable: Any = "25%", *, image: str = "v1", strategy: str = "RollingUpdate",
               generation: int = 1, status: dict | None = None, paused: bool = False, history: int = 10, deadline: int | None = 600,
               uid: str = "d-uid", annotations: dict | None = None) -> dict[str, Any]:
    sp: dict[str, Any] = {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                          "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": image}]}},
                          "strategy": {"type": strategy}, "revisionHistoryLimit": history, "minReadySeconds": 0}
    if strategy == "RollingUpdate":
        sp["strategy"]["rollingUpdate"] = {"maxSurge": surge, "maxUnavailable": unavailable}
    if deadline is not None:
        sp["progressDeadlineSeconds"] = deadline
    if paused:
        sp["paused"] = True
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": meta("web", uid=uid, generation=generation, annotations=annotations), "spec": sp, "status": status or {}}


def rs_for(d: dict, name: str, replicas: int, *, image: str | None = None, available: int | None = None, created: float = NOW - 600,
           revision: int | None = None, desired: int | None = None, max_replicas: int | None = None) -> dict[str, Any]:
    tmpl = copy.deepcopy(d["spec"]["template"])
    if image:
        tmpl["spec"]["containers"][0]["image"] = image
    h = hashing.compute_hash(tmpl, None)
    tmpl["metadata"]["labels"]["pod-template-hash"] = h
    ann = {}
    if revision is not None:
        ann[util.REVISION] = str(revision)
    if desired is not None:
        ann[util.DESIRED_REPLICAS] = str(desired)
    if max_replicas is not None:
        ann[util.MAX_REPLICAS] = str(max_replicas)
    avail = replicas if available is None else available
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": meta(name, labels=dict(tmpl["metadata"]["labels"]), annotations=ann, created=created, generation=1,
                             owners=[{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": d["metadata"]["uid"],
                                      "controller": True, "blockOwnerDeletion": True}]),
            "spec": {"replicas": replicas, "selector": {"matchLabels": dict(tmpl["metadata"]["labels"])}, "template": tmpl},
            "status": {"replicas": replicas, "readyReplicas": avail, "availableReplicas": avail, "observedGeneration": 1}}


@pytest.mark.parametrize(("surge", "unavailable", "desired", "want"), [
    ("0%", "0%", 0, (0, 1)), ("39%", "39%", 10, (4, 3)), (5, 1, 10, (5, 1)), ("25%", "25%", 4, (1, 1)),
    ("25%", "25%", 1, (1, 0)), (0, 0, 5, (0, 1)), ("1%", "0%", 2, (1, 0)), ("0%", "1%", 2, (0, 1)),
])
def test_resolve_fenceposts(surge, unavailable, desired, want) -> None:
    assert util.resolve_fenceposts(surge, unavailable, desired) == want


@pytest.mark.parametrize(("strategy", "dep", "new", "surge", "olds", "want"), [
    ("RollingUpdate", 1, 5, 1, [0], 5),      # can not scale up
    ("RollingUpdate", 6, 2, 10, [0], 6),     # up to the deployment's replicas
    ("Recreate", 3, 1, 1, [0], 3),
    ("RollingUpdate", 10, 0, 2, [10], 2),
    ("RollingUpdate", 10, 0, 2, [5], 7),
])
def test_new_rs_new_replicas(strategy, dep, new, surge, olds, want) -> None:
    d = deployment(dep, surge, 0, strategy=strategy)
    new_rs = rs_for(d, "new", new, image="v2")
    olds_ = [rs_for(d, f"old{i}", n) for i, n in enumerate(olds)]
    assert util.new_rs_new_replicas(d, [new_rs, *olds_], new_rs) == want


def _updates(plan) -> dict[str, int]:
    return {a.obj["metadata"]["name"]: a.obj["spec"]["replicas"] for a in plan.of_type(Update)}


@pytest.mark.parametrize(("dep", "surge", "old", "new", "want_new"), [
    (10, 0, 10, 0, None), (10, 2, 10, 0, 2), (10, 2, 5, 0, 7), (10, 2, 10, 2, None), (2, 0, 2, 3, 2),
])
def test_reconcile_new_replica_set(dep, surge, old, new, want_new) -> None:
    d = deployment(dep, surge, 0)
    rss = [rs_for(d, "old", old, image="v0", revision=1, desired=dep, max_replicas=dep + surge),
           rs_for(d, "new", new, revision=2, desired=dep, max_replicas=dep + surge)]
    got = _updates(dc.sync(d, rss, now=NOW)).get("new")
    assert got == want_new


@pytest.mark.parametrize(("dep", "unavail", "old", "new", "ready_old", "ready_new", "want_old"), [
    (10, 0, 10, 0, 10, 0, 9),
    (10, 2, 10, 0, 10, 0, 8),
    (10, 2, 10, 0, 8, 0, 8),     # the unhealthy old replicas go first
    (10, 2, 10, 0, 9, 0, 8),     # one unhealthy, then one ready
    (10, 2, 8, 2, 8, 0, None),   # the new RS's unavailable pods hold back further scale down
    # a stale status (written before a scale-down or a server restart) counts more available pods
    # than the RS wants: at most spec.replicas of them count, so the old RS is never scaled up and
    # comes down only by what the availability allows
    (10, 2, 5, 5, 8, 5, 3),
    (10, 2, 5, 5, 6, 3, None),   # old: 5 of 6 count; new: 2 unavailable, no room left
    (10, 2, 6, 4, 6, 9, 4),      # new: 4 of 9 count, not 9
])
def test_reconcile_old_replica_sets(dep, unavail, old, new, ready_old, ready_new, want_old) -> None:
    d = deployment(dep, 0, unavail)
    rss = [rs_for(d, "old", old, image="v0", available=ready_old, revision=1, desired=dep, max_replicas=dep),
           rs_for(d, "new", new, available=ready_new, revision=2, desired=dep, max_replicas=dep)]
    plan = dc.sync(d, rss, now=NOW)
    assert _updates(plan).get("old") == want_old
    olds = [a.obj["spec"]["replicas"] for a in plan.of_type(Update) if a.obj["metadata"]["name"] == "old"]
    assert all(n <= old for n in olds), olds   # an old RS is never scaled up on the way


@pytest.mark.parametrize(("was", "now_", "new", "olds", "want_new", "want_olds"), [
    (10, 12, 10, [], 12, []),
    (10, 5, 10, [], 5, []),
    (5, 10, 2, [3], 4, [6]),
    (5, 3, 2, [3], 1, [2]),
    (9, 4, 8, [1], 4, [0]),
    (7, 10, 2, [3, 2], 3, [4, 3]),
    (13, 8, 2, [8, 3], 1, [5, 2]),
    (3, 4, 1, [1, 1], 2, [1, 1]),      # leftovers go to the newest when scaling up
    (3, 2, 1, [1, 1], 1, [0, 1]),      # and come off the oldest (old0) when scaling down
    (6, 0, 3, [2, 1], 0, [0, 0]),
    (4, 5, None, [2, 2], None, [2, 3]),
])
def test_proportional_scaling(was, now_, new, olds, want_new, want_olds) -> None:
    d = deployment(now_, 0, 0)
    old_rss = [rs_for(d, f"old{i}", n, image=f"v0{i}", created=NOW - 1000 + i, revision=i + 1, desired=was, max_replicas=was)
               for i, n in enumerate(olds)]
    rss = old_rss + ([rs_for(d, "new", new, created=NOW - 10, revision=9, desired=was, max_replicas=was)] if new is not None else [])
    plan = dc.sync(d, rss, now=NOW)
    got = {**{rs["metadata"]["name"]: rs["spec"]["replicas"] for rs in rss}, **_updates(plan)}
    if new is not None:
        assert got["new"] == want_new
    assert [got[f"old{i}"] for i in range(len(olds))] == want_olds
    for u in plan.of_type(Update):    # every scaled RS records the new size it belongs to
        assert u.obj["metadata"]["annotations"][util.DESIRED_REPLICAS] == str(now_)


def test_first_rollout_creates_the_revision_1_replica_set() -> None:
    d = deployment(4, "25%", "25%")
    plan = dc.sync(d, [], now=NOW)
    (create,) = plan.of_type(Create)
    rs = create.obj
    h = rs["spec"]["template"]["metadata"]["labels"]["pod-template-hash"]
    assert rs["metadata"]["name"] == f"web-{h}" and rs["spec"]["selector"]["matchLabels"] == {"app": "web", "pod-template-hash": h}
    assert rs["spec"]["replicas"] == 4 and rs["metadata"]["annotations"] == {util.REVISION: "1", util.DESIRED_REPLICAS: "4", util.MAX_REPLICAS: "5"}
    assert rs["metadata"]["ownerReferences"][0]["uid"] == "d-uid"
    (patch,) = plan.of_type(Patch)
    assert patch.patch == {"metadata": {"annotations": {util.REVISION: "1"}}}
    (upd,) = plan.of_type(UpdateStatus)
    prog = next(c for c in upd.obj["status"]["conditions"] if c["type"] == "Progressing")
    assert (prog["status"], prog["reason"], prog["message"]) == ("True", "NewReplicaSetCreated", f'Created new replica set "web-{h}"')
    assert [e.message for e in plan.of_type(Event)] == [f"Scaled up replica set web-{h} to 4"]


def test_hash_collision_bumps_collision_count() -> None:
    d = deployment(2)
    h = hashing.compute_hash(d["spec"]["template"], None)
    plan = dc.sync(d, [], now=NOW, names_taken={f"web-{h}"})
    assert not plan.of_type(Create) and plan.requeue_after == 0
    (upd,) = plan.of_type(UpdateStatus)
    assert upd.obj["status"]["collisionCount"] == 1
    d2 = deployment(2, status=upd.obj["status"])
    (create,) = dc.sync(d2, [], now=NOW, names_taken={f"web-{h}"}).of_type(Create)
    assert create.obj["metadata"]["name"] != f"web-{h}"


def test_complete_rollout_status_and_cleanup_of_old_history() -> None:
    d = deployment(3, history=1)
    olds = [rs_for(d, f"old{i}", 0, image=f"v0{i}", revision=i + 1, created=NOW - 1000 + i) for i in range(3)]
    for rs in olds:
        rs["status"] = {"replicas": 0, "observedGeneration": 1}
    new = rs_for(d, "new", 3, revision=4, desired=3, max_replicas=4)
    status = {"observedGeneration": 1, "replicas": 3, "updatedReplicas": 3, "readyReplicas": 3, "availableReplicas": 3,
              "unavailableReplicas": 0}
    plan = dc.sync(deployment(3, history=1, status=status, annotations={util.REVISION: "4"}), [*olds, new], now=NOW)
    assert [a.ref.name for a in plan.of_type(Delete)] == ["old0", "old1"]     # the oldest two beyond the limit of 1
    (upd,) = plan.of_type(UpdateStatus)
    conds = {c["type"]: c for c in upd.obj["status"]["conditions"]}
    assert conds["Available"]["reason"] == "MinimumReplicasAvailable"
    assert (conds["Progressing"]["reason"], conds["Progressing"]["message"]) == ("NewReplicaSetAvailable", 'ReplicaSet "new" has successfully progressed.')
    assert rollout_status(upd.obj) == 'deployment "web" successfully rolled out'


def test_progress_deadline_exceeded_and_not_while_paused() -> None:
    d0 = deployment(2, 1, 0)
    old = rs_for(d0, "old", 2, image="v0", revision=1, desired=2, max_replicas=3)
    new = rs_for(d0, "new", 1, revision=2, desired=2, max_replicas=3, available=0)
    prog = {"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated", "message": 'ReplicaSet "new" is progressing.',
            "lastUpdateTime": ts(NOW - 700), "lastTransitionTime": ts(NOW - 700)}
    status = {"observedGeneration": 1, "replicas": 3, "updatedReplicas": 1, "readyReplicas": 2, "availableReplicas": 2, "conditions": [prog]}
    d = deployment(2, 1, 0, status=status, annotations={util.REVISION: "2"})
    (upd,) = dc.sync(d, [old, new], now=NOW).of_type(UpdateStatus)
    c = next(c for c in upd.obj["status"]["conditions"] if c["type"] == "Progressing")
    assert (c["status"], c["reason"], c["message"]) == ("False", "ProgressDeadlineExceeded", 'ReplicaSet "new" has timed out progressing.')
    with pytest.raises(RolloutError, match='deployment "web" exceeded its progress deadline'):
        rollout_status(upd.obj)
    early = dc.sync(d, [old, new], now=NOW - 200)
    assert early.requeue_after == pytest.approx(101)          # lastUpdate + 600 s - now, +1 s
    paused = deployment(2, 1, 0, status=status, paused=True, annotations={util.REVISION: "2"})
    (upd,) = dc.sync(paused, [old, new], now=NOW).of_type(UpdateStatus)
    c = next(c for c in upd.obj["status"]["conditions"] if c["type"] == "Progressing")
    assert (c["status"], c["reason"], c["message"]) == ("Unknown", "DeploymentPaused", "Deployment is paused")
    resumed = deployment(2, 1, 0, status=upd.obj["status"], annotations={util.REVISION: "2"})
    (upd2,) = dc.sync(resumed, [old, new], now=NOW + 10000).of_type(UpdateStatus)
    c = next(c for c in upd2.obj["status"]["conditions"] if c["type"] == "Progressing")
    assert c["reason"] == "DeploymentResumed"    # resumed: the deadline counts from now, not from before the pause


def test_paused_deployment_does_not_roll_out_a_new_template() -> None:
    d = deployment(2, paused=True)
    old = rs_for(d, "old", 2, image="v0", revision=1, desired=2, max_replicas=3)
    plan = dc.sync(d, [old], now=NOW)
    assert not plan.of_type(Create) and not plan.of_type(Update)


def test_recreate_scales_old_down_then_waits_for_their_pods_then_creates() -> None:
    d = deployment(2, strategy="Recreate")
    old = rs_for(d, "old", 2, image="v0", revision=1, desired=2, max_replicas=2)
    p1 = plan1 = dc.sync(d, [old], now=NOW)
    assert _updates(plan1) == {"old": 0} and not p1.of_type(Create)
    old0 = rs_for(d, "old", 0, image="v0", revision=1, desired=2, max_replicas=2)
    old0["status"] = {"replicas": 0, "observedGeneration": 1}
    running = pod("old-pod", owner=old0, phase="Running")
    assert not dc.sync(d, [old0], [running], now=NOW).of_type(Create)         # an old pod still runs
    unknown = pod("old-pod", owner=old0, phase="Unknown")
    assert not dc.sync(d, [old0], [unknown], now=NOW).of_type(Create)         # Unknown counts as running
    (create,) = dc.sync(d, [old0], [pod("done", owner=old0, phase="Succeeded")], now=NOW).of_type(Create)
    assert create.obj["spec"]["replicas"] == 2


# ---- kubectl's client-side readers, as kubectl implements them (polymorphichelpers) ----

class RolloutError(Exception):
    pass


def rollout_status(d: dict) -> str:
    """kubectl rollout status: DeploymentStatusViewer.Status."""
    st, name = d.get("status") or {}, d["metadata"]["name"]
    if d["metadata"].get("generation", 0) > st.get("observedGeneration", 0):
        return "Waiting for deployment spec update to be observed..."
    cond = next((c for c in st.get("conditions") or [] if c["type"] == "Progressing"), None)
    if cond and cond.get("reason") == "ProgressDeadlineExceeded":
        raise RolloutError(f'deployment "{name}" exceeded its progress deadline')
    want = d["spec"]["replicas"]
    if st.get("updatedReplicas", 0) < want:
        return f'Waiting for deployment "{name}" rollout to finish: {st.get("updatedReplicas", 0)} out of {want} new replicas have been updated...'
    if st.get("replicas", 0) > st.get("updatedReplicas", 0):
        return f'Waiting for deployment "{name}" rollout to finish: {st["replicas"] - st["updatedReplicas"]} old replicas are pending termination...'
    if st.get("availableReplicas", 0) < st.get("updatedReplicas", 0):
        return f'Waiting for deployment "{name}" rollout to finish: {st.get("availableReplicas", 0)} of {st["updatedReplicas"]} updated replicas are available...'
    return f'deployment "{name}" successfully rolled out'


def rollout_undo(d: dict, rss: list[dict], to_revision: int = 0) -> dict:
    """kubectl rollout undo: DeploymentRollbacker, client side, from ReplicaSets found by selector."""
    if d["spec"].get("paused"):
        raise RolloutError("you cannot rollback a paused deployment; resume it first with 'kubectl rollout resume' and try again")
    by_rev = {util.revision(rs): rs for rs in rss}
    if to_revision == 0:
        to_revision = util.last_revision(rss)
        if to_revision == 0:
            raise RolloutError("no rollout history found for deployment")
    target = by_rev[to_revision]
    if hashing.equal_ignore_hash(target["spec"]["template"], d["spec"]["template"]):
        raise RolloutError(f"skipped rollback (current template already matches revision {to_revision})")
    out = copy.deepcopy(d)
    out["spec"]["template"] = util.template_from_rs(target)
    ann = {k: v for k, v in (d["metadata"].get("annotations") or {}).items() if k in util.ANNOTATIONS_TO_SKIP}
    ann.update({k: v for k, v in (target["metadata"].get("annotations") or {}).items() if k not in util.ANNOTATIONS_TO_SKIP})
    out["metadata"]["annotations"] = ann
    out["metadata"]["generation"] = d["metadata"].get("generation", 1) + 1
    return out


# ---- a small cluster: the deployment decision, and ReplicaSets whose pods become available at random ----

class Sim:
    def __init__(self, d: dict) -> None:
        self.d = d
        self.rss: dict[str, dict] = {}
        self.pods: dict[str, list[bool]] = {}    # rs name -> availability of each of its pods
        self.now = NOW
        self.uids = 0

    def step(self) -> None:
        plan = dc.sync(self.d, list(self.rss.values()), now=self.now, names_taken=set(self.rss))
        for a in plan.actions:
            if isinstance(a, Create):
                rs = copy.deepcopy(a.obj)
                self.uids += 1
                rs["metadata"].update(uid=f"rs-{self.uids}", creationTimestamp=ts(self.now), generation=1)
                rs["status"] = {}
                self.rss[rs["metadata"]["name"]] = rs
                self.pods[rs["metadata"]["name"]] = []
            elif isinstance(a, Update):
                self.rss[a.obj["metadata"]["name"]] = copy.deepcopy(a.obj)
            elif isinstance(a, Delete):
                self.rss.pop(a.ref.name, None)
            elif isinstance(a, UpdateStatus):
                self.d["status"] = copy.deepcopy(a.obj["status"])
            elif isinstance(a, Patch):
                self.d["metadata"].setdefault("annotations", {}).update(a.patch["metadata"]["annotations"])
        self.now += 1
        for name, rs in self.rss.items():   # the ReplicaSet controller: unavailable pods are deleted first
            pods = self.pods[name]
            want = rs["spec"]["replicas"]
            while len(pods) < want:
                pods.append(False)
            pods.sort()
            del pods[: max(0, len(pods) - want)]
            rs["status"] = {"replicas": len(pods), "readyReplicas": sum(pods), "availableReplicas": sum(pods), "observedGeneration": 1}

    def available(self) -> int:
        return sum(sum(p) for p in self.pods.values())


@settings(max_examples=60, deadline=None)
@given(replicas=st.integers(1, 12), surge=st.sampled_from([0, 1, 2, "25%", "50%", "100%"]),
       unavailable=st.sampled_from([0, 1, 3, "25%", "50%"]), readiness=st.lists(st.floats(0, 1), min_size=40, max_size=40))
def test_rolling_update_never_drops_below_min_available(replicas, surge, unavailable, readiness) -> None:
    sim = Sim(deployment(replicas, surge, unavailable, image="v1"))
    for _ in range(4):
        sim.step()
        for pods in sim.pods.values():
            pods[:] = [True] * len(pods)
    sim.step()
    assert sim.available() == replicas
    sim.d = deployment(replicas, surge, unavailable, image="v2", generation=2, status=sim.d["status"], annotations=sim.d["metadata"].get("annotations"))
    floor = replicas - util.max_unavailable(sim.d)
    for i in range(200):
        sim.step()
        assert sim.available() >= floor, f"step {i}: {sim.available()} available < {floor}"
        total = sum(len(p) for p in sim.pods.values())
        assert total <= replicas + util.max_surge(sim.d)
        p = readiness[i % len(readiness)]
        for pods in sim.pods.values():
            for j in range(len(pods)):
                if not pods[j] and (p > 0.5 or i > 60):
                    pods[j] = True
    assert rollout_status(sim.d) == 'deployment "web" successfully rolled out'
    new = [rs for rs in sim.rss.values() if rs["spec"]["template"]["spec"]["containers"][0]["image"] == "v2"]
    assert len(new) == 1 and new[0]["spec"]["replicas"] == replicas and new[0]["metadata"]["annotations"][util.REVISION] == "2"


def test_undo_reuses_the_old_replica_set_with_the_next_revision() -> None:
    sim = Sim(deployment(3, 1, 0, image="v1"))
    for _d_img, gen in (("v1", 1), ("v2", 2)):
        if gen == 2:
            sim.d = deployment(3, 1, 0, image="v2", generation=2, status=sim.d["status"], annotations=sim.d["metadata"]["annotations"])
        for _ in range(30):
            sim.step()
            for pods in sim.pods.values():
                pods[:] = [True] * len(pods)
    assert sim.d["metadata"]["annotations"][util.REVISION] == "2"
    undone = rollout_undo(sim.d, list(sim.rss.values()))
    assert undone["spec"]["template"]["spec"]["containers"][0]["image"] == "v1"
    sim.d = {**undone, "status": sim.d["status"]}
    for _ in range(30):
        sim.step()
        for pods in sim.pods.values():
            pods[:] = [True] * len(pods)
    v1 = [rs for rs in sim.rss.values() if rs["spec"]["template"]["spec"]["containers"][0]["image"] == "v1"]
    assert len(sim.rss) == 2 and len(v1) == 1 and v1[0]["spec"]["replicas"] == 3
    assert v1[0]["metadata"]["annotations"][util.REVISION] == "3" and v1[0]["metadata"]["annotations"][util.REVISION_HISTORY] == "1"
    assert sim.d["metadata"]["annotations"][util.REVISION] == "3" and rollout_status(sim.d).endswith("successfully rolled out")
    with pytest.raises(RolloutError, match="skipped rollback"):
        rollout_undo(sim.d, list(sim.rss.values()), to_revision=3)


def test_empty_selector_is_refused() -> None:
    d = deployment(2)
    d["spec"]["selector"] = {}
    plan = dc.sync(d, [], now=NOW)
    assert [e.reason for e in plan.of_type(Event)] == ["SelectingAll"] and not plan.of_type(Create)
