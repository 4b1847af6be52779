"""One Deployment sync (syncDeployment and what it calls), as a plan.

Inputs: the Deployment; the ReplicaSets of its namespace that match its selector or are controlled
by it; its pods (those controlled by its ReplicaSets: Recreate waits for old ones to stop); the
names of every ReplicaSet in the namespace (a new ReplicaSet's name taken by another object is a
hash collision: collisionCount goes up, as on upstream's AlreadyExists); and now.

Upstream writes as it goes (ReplicaSet updates, status updates between steps) and reads its own
writes from the returned objects; here the sync works on copies, and the plan holds, in order, the
ReplicaSet creates/updates/deletes, the revision annotation patch, then one status write. A
ReplicaSet update carries its resourceVersion: a stale cache gets a 409 and a requeue.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from nodeagent.cluster.controllers.common import conditions, hashing, ownership, selectors
from nodeagent.cluster.controllers.common.actions import (
    Create,
    Delete,
    Event,
    ObjectRef,
    Patch,
    Plan,
    Update,
    UpdateStatus,
)
from nodeagent.cluster.controllers.common.meta import (
    annotations_of,
    being_deleted,
    controller_ref,
    format_time,
    generation,
    int_field,
    name,
    namespace,
    new_controller_ref,
    parse_time,
    spec,
    status,
    uid,
)
from nodeagent.cluster.controllers.deployment import util
from nodeagent.cluster.controllers.deployment.util import replicas

API_VERSION, KIND = "apps/v1", "Deployment"
RS_API, RS_KIND = "apps/v1", "ReplicaSet"
Obj = dict[str, Any]


class _Sync:
    def __init__(self, d: Mapping[str, Any], now: float, names_taken: Collection[str]) -> None:
        self.d: Obj = util.set_defaults(copy.deepcopy(dict(d)))  # type: ignore[assignment]
        self.orig_status = copy.deepcopy(dict(status(d)))
        self.orig_revision = annotations_of(d).get(util.REVISION)
        self.now = now
        self.names_taken = names_taken
        self.plan = Plan()
        self.ref = ObjectRef.of(self.d, API_VERSION, KIND)
        self.status_written = False

    # ---- writes ----
    def event(self, type_: str, reason: str, message: str) -> None:
        self.plan.add(Event(self.ref, type_, reason, message))  # type: ignore[arg-type]

    def _dstatus(self) -> dict[str, Any]:
        st: dict[str, Any] = self.d.setdefault("status", {})
        return st

    def set_condition(self, cond: dict[str, Any]) -> None:
        st = self._dstatus()
        st["conditions"] = conditions.set_condition(st.get("conditions"), cond)

    def scale(self, rs: Obj, new_scale: int, operation: str | None = None) -> Obj:
        """scaleReplicaSet: size and replicas annotations in one update; the event on a size change."""
        old = util.rs_replicas(rs)
        size_changes = old != new_scale
        desired, max_r = replicas(self.d), replicas(self.d) + util.max_surge(self.d)
        if not size_changes and not util.replicas_annotations_need_update(rs, desired, max_r):
            return rs
        new = copy.deepcopy(rs)
        new["spec"]["replicas"] = new_scale
        util.set_replicas_annotations(new, desired, max_r)
        self.plan.add(Update(new, reason="ScalingReplicaSet"))
        if size_changes:
            op = operation or ("up" if old < new_scale else "down")
            self.event("Normal", "ScalingReplicaSet", f"Scaled {op} replica set {name(rs)} to {new_scale} from {old}")
        return new

    def scale_and_record(self, rs: Obj, new_scale: int) -> Obj:
        if util.rs_replicas(rs) == new_scale:
            return rs
        return self.scale(rs, new_scale)

    # ---- getNewReplicaSet ----
    def get_new_rs(self, rss: list[Obj], old_rss: list[Obj], create: bool) -> Obj | None:
        existing = util.find_new_rs(self.d, rss)
        new_revision = str(util.max_revision(old_rss) + 1)
        if existing is not None:
            rs = copy.deepcopy(existing)
            changed = util.set_new_rs_annotations(self.d, rs, new_revision, True)
            mrs = int_field(spec(self.d).get("minReadySeconds"))
            if changed or int_field(spec(rs).get("minReadySeconds")) != mrs:
                rs["spec"]["minReadySeconds"] = mrs
                self.plan.add(Update(rs, reason="SyncRevision"))
                self._replace(rss, rs)
                return rs
            self._set_revision(annotations_of(rs).get(util.REVISION, ""))
            if (
                util.has_progress_deadline(self.d)
                and conditions.find(self._dstatus().get("conditions"), "Progressing") is None
            ):
                self.set_condition(
                    util.progressing_condition(
                        "True", util.FOUND_NEW_RS, f'Found new replica set "{name(rs)}"', self.now
                    )
                )
            return rs
        if not create:
            return None
        tmpl = copy.deepcopy(dict(spec(self.d).get("template") or {}))
        collision = status(self.d).get("collisionCount")
        h = hashing.compute_hash(tmpl, int_field(collision) if collision is not None else None)
        tmeta = tmpl.setdefault("metadata", {})
        tmeta["labels"] = {**(tmeta.get("labels") or {}), hashing.POD_TEMPLATE_HASH_LABEL: h}
        rs_name = f"{name(self.d)}-{h}"
        if rs_name in self.names_taken:
            st = self._dstatus()
            st["collisionCount"] = int_field(st.get("collisionCount")) + 1
            self.plan.requeue(0)
            return None
        new_rs: Obj = {
            "apiVersion": RS_API,
            "kind": RS_KIND,
            "metadata": {
                "name": rs_name,
                "namespace": namespace(self.d),
                "labels": dict(tmeta["labels"]),
                "ownerReferences": [new_controller_ref(self.d, API_VERSION, KIND)],
                "creationTimestamp": format_time(self.now),
            },
            "spec": {
                "replicas": 0,
                "minReadySeconds": int_field(spec(self.d).get("minReadySeconds")),
                "selector": selectors.with_label(spec(self.d).get("selector"), hashing.POD_TEMPLATE_HASH_LABEL, h),
                "template": tmpl,
            },
        }
        new_rs["spec"]["replicas"] = util.new_rs_new_replicas(self.d, [*old_rss, new_rs], new_rs)
        util.set_new_rs_annotations(self.d, new_rs, new_revision, False)
        body = copy.deepcopy(new_rs)
        del body["metadata"]["creationTimestamp"]
        self.plan.add(Create(body, reason="NewReplicaSet"))
        count = util.rs_replicas(new_rs)
        if count > 0:
            self.event("Normal", "ScalingReplicaSet", f"Scaled up replica set {rs_name} to {count}")
        self._set_revision(new_revision)
        if util.has_progress_deadline(self.d):
            self.set_condition(
                util.progressing_condition(
                    "True", util.NEW_REPLICA_SET, f'Created new replica set "{rs_name}"', self.now
                )
            )
        rss.append(new_rs)
        return new_rs

    def _set_revision(self, revision: str) -> None:
        ann = self.d["metadata"].setdefault("annotations", {})
        ann[util.REVISION] = revision

    @staticmethod
    def _replace(rss: list[Obj], rs: Obj) -> None:
        for i, r in enumerate(rss):
            if uid(r) == uid(rs):
                rss[i] = rs

    def all_rss_and_sync_revision(self, rss: list[Obj], create: bool) -> tuple[Obj | None, list[Obj]]:
        new_rs = util.find_new_rs(self.d, rss)
        _, all_old = util.find_old_rss(self.d, rss, new_rs)
        new_rs = self.get_new_rs(rss, all_old, create)
        _, all_old = util.find_old_rss(self.d, rss, new_rs)
        return new_rs, all_old

    # ---- sync (scaling events, paused) ----
    def proportional_scale(self, new_rs: Obj | None, old_rss: list[Obj]) -> None:
        rss_list = [*old_rss, *([new_rs] if new_rs else [])]
        active_or_latest = self._active_or_latest(new_rs, old_rss)
        if active_or_latest is not None:
            if util.rs_replicas(active_or_latest) != replicas(self.d):
                self.scale_and_record(active_or_latest, replicas(self.d))
            return
        if util.is_saturated(self.d, new_rs):
            for old in util.filter_active(old_rss):
                self.scale_and_record(old, 0)
            return
        if not util.is_rolling(self.d):
            return
        active = util.filter_active(rss_list)
        current = util.total_replicas(active)
        allowed = replicas(self.d) + util.max_surge(self.d) if replicas(self.d) > 0 else 0
        to_add = allowed - current
        op = None
        if to_add > 0:
            active, op = util.by_size_newer(active), "up"
        elif to_add < 0:
            active, op = util.by_size_older(active), "down"
        added = 0
        sizes: dict[str, int] = {}
        for rs in active:
            if to_add != 0:
                p = util.get_proportion(rs, self.d, to_add, added)
                sizes[name(rs)] = util.rs_replicas(rs) + p
                added += p
            else:
                sizes[name(rs)] = util.rs_replicas(rs)
        for i, rs in enumerate(active):
            if i == 0 and to_add != 0:
                sizes[name(rs)] = max(0, sizes[name(rs)] + to_add - added)
            self.scale(rs, sizes[name(rs)], op)

    @staticmethod
    def _active_or_latest(new_rs: Obj | None, old_rss: list[Obj]) -> Obj | None:
        if new_rs is None and not old_rss:
            return None
        olds = list(reversed(util.by_creation(old_rss)))
        active = util.filter_active([*olds, new_rs])
        if not active:
            return new_rs if new_rs is not None else olds[0]
        return active[0] if len(active) == 1 else None

    def cleanup(self, old_rss: list[Obj]) -> None:
        if not util.has_revision_history_limit(self.d):
            return
        cleanable = [rs for rs in old_rss if not being_deleted(rs)]
        diff = len(cleanable) - int(spec(self.d)["revisionHistoryLimit"])
        if diff <= 0:
            return
        for rs in util.by_revision(cleanable)[:diff]:
            st = status(rs)
            if (
                int_field(st.get("replicas")) != 0
                or util.rs_replicas(rs) != 0
                or int_field((rs.get("metadata") or {}).get("generation")) > int_field(st.get("observedGeneration"))
            ):
                continue
            self.plan.add(Delete(ObjectRef.of(rs, RS_API, RS_KIND), reason="RevisionHistoryLimit"))

    # ---- status ----
    def calculate_status(self, all_rss: list[Obj], new_rs: Obj | None) -> dict[str, Any]:
        available = util.total_status(all_rss, "availableReplicas")
        total = util.total_replicas(all_rss)
        st: dict[str, Any] = {
            "observedGeneration": generation(self.d),
            "replicas": util.total_status(all_rss, "replicas"),
            "updatedReplicas": util.total_status([new_rs], "replicas"),
            "readyReplicas": util.total_status(all_rss, "readyReplicas"),
            "availableReplicas": available,
            "unavailableReplicas": max(0, total - available),
        }
        if self._dstatus().get("collisionCount") is not None:
            st["collisionCount"] = self._dstatus()["collisionCount"]
        conds = [dict(c) for c in self._dstatus().get("conditions") or []]
        if available >= replicas(self.d) - util.max_unavailable(self.d):
            c = conditions.new_condition(
                "Available",
                "True",
                util.MIN_AVAILABLE,
                "Deployment has minimum availability.",
                self.now,
                update_time=True,
            )
        else:
            c = conditions.new_condition(
                "Available",
                "False",
                util.MIN_UNAVAILABLE,
                "Deployment does not have minimum availability.",
                self.now,
                update_time=True,
            )
        st["conditions"] = conditions.set_condition(conds, c)
        return st

    def sync_rollout_status(self, all_rss: list[Obj], new_rs: Obj | None) -> None:
        new = self.calculate_status(all_rss, new_rs)
        if not util.has_progress_deadline(self.d):
            new["conditions"] = conditions.remove_condition(new["conditions"], "Progressing")
        current = conditions.find(self._dstatus().get("conditions"), "Progressing")
        is_complete = (
            new["replicas"] == new["updatedReplicas"]
            and current is not None
            and current.get("reason") == util.NEW_RS_AVAILABLE
        )
        if util.has_progress_deadline(self.d) and not is_complete:
            base = {**self.d, "status": self.orig_status}
            subject = f'ReplicaSet "{name(new_rs)}"' if new_rs is not None else f'Deployment "{name(self.d)}"'
            if util.complete(self.d, new):
                new["conditions"] = conditions.set_condition(
                    new["conditions"],
                    util.progressing_condition(
                        "True", util.NEW_RS_AVAILABLE, f"{subject} has successfully progressed.", self.now
                    ),
                )
            elif util.progressing(base, new):
                cond = util.progressing_condition(
                    "True", util.REPLICA_SET_UPDATED, f"{subject} is progressing.", self.now
                )
                if current is not None:
                    if current.get("status") == "True" and "lastTransitionTime" in current:
                        cond["lastTransitionTime"] = current["lastTransitionTime"]
                    new["conditions"] = conditions.remove_condition(new["conditions"], "Progressing")
                new["conditions"] = conditions.set_condition(new["conditions"], cond)
            elif util.timed_out(self.d, new, self.now):
                new["conditions"] = conditions.set_condition(
                    new["conditions"],
                    util.progressing_condition(
                        "False", util.TIMED_OUT, f"{subject} has timed out progressing.", self.now
                    ),
                )
        failures = self._replica_failures(all_rss, new_rs)
        if failures:
            new["conditions"] = conditions.set_condition(new["conditions"], failures[0])
        else:
            new["conditions"] = conditions.remove_condition(new["conditions"], "ReplicaFailure")
        self._write_status(new)
        # upstream requeues only when the status is unchanged, counting on the watch event of its
        # own status write for the next look; asking for it here as well costs one spare sync
        self._requeue_stuck(new)

    def sync_deployment_status(self, all_rss: list[Obj], new_rs: Obj | None) -> None:
        self._write_status(self.calculate_status(all_rss, new_rs))

    @staticmethod
    def _replica_failures(all_rss: list[Obj], new_rs: Obj | None) -> list[dict[str, Any]]:
        def conv(rs: Obj) -> list[dict[str, Any]]:
            out = []
            for c in status(rs).get("conditions") or []:
                if c.get("type") == "ReplicaFailure":
                    t = c.get("lastTransitionTime")
                    out.append(
                        {
                            "type": "ReplicaFailure",
                            "status": c.get("status"),
                            "lastUpdateTime": t,
                            "lastTransitionTime": t,
                            "reason": c.get("reason", ""),
                            "message": c.get("message", ""),
                        }
                    )
            return out

        if new_rs is not None and (found := conv(new_rs)):
            return found
        return [c for rs in all_rss for c in conv(rs)]

    def _requeue_stuck(self, new: Mapping[str, Any]) -> None:
        current = conditions.find(self.orig_status.get("conditions"), "Progressing")
        if not util.has_progress_deadline(self.d) or current is None:
            return
        if util.complete(self.d, new) or current.get("reason") == util.TIMED_OUT:
            return
        since = parse_time(current.get("lastUpdateTime"))
        if since is None:
            return
        after = since + int(spec(self.d)["progressDeadlineSeconds"]) - self.now
        self.plan.requeue(0 if after < 1 else after + 1)

    def _write_status(self, new: dict[str, Any]) -> None:
        self.d["status"] = new
        self.status_written = True

    def finish(self) -> Plan:
        rev = annotations_of(self.d).get(util.REVISION)
        if rev is not None and rev != self.orig_revision:
            self.plan.add(
                Patch(self.ref, {"metadata": {"annotations": {util.REVISION: rev}}}, "merge", reason="SyncRevision")
            )
        if self._dstatus() != self.orig_status:
            obj = copy.deepcopy(self.d)
            self.plan.add(UpdateStatus(obj, reason="DeploymentStatus"))
        return self.plan


def sync(
    d: Mapping[str, Any],
    replica_sets: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]] = (),
    *,
    now: float,
    names_taken: Collection[str] = (),
) -> Plan:
    s = _Sync(d, now, names_taken)
    sel = spec(s.d).get("selector")
    if selectors.is_empty(sel):
        s.event("Warning", "SelectingAll", "This deployment is selecting all pods. A non-empty selector is required.")
        if int_field(status(s.d).get("observedGeneration")) < generation(s.d):
            s._dstatus()["observedGeneration"] = generation(s.d)
        return s.finish()
    claim = ownership.claim(s.d, API_VERSION, KIND, sel, replica_sets)
    s.plan.actions.extend(ownership.claim_actions(s.d, API_VERSION, KIND, claim, RS_API, RS_KIND))
    rss: list[Obj] = [copy.deepcopy(dict(rs)) for rs in claim.claimed]
    if being_deleted(s.d):
        new_rs, old = s.all_rss_and_sync_revision(rss, False)
        s.sync_deployment_status([*old, *([new_rs] if new_rs else [])], new_rs)
        return s.finish()
    _check_paused(s)
    if spec(s.d).get("paused"):
        return _sync_scale(s, rss, paused=True)
    new_rs, old = s.all_rss_and_sync_revision(rss, False)
    if _is_scaling_event(s.d, [*old, *([new_rs] if new_rs else [])]):
        return _sync_scale(s, rss, paused=False)
    if not util.is_rolling(s.d):
        return _rollout_recreate(s, rss, pods)
    return _rollout_rolling(s, rss)


def _check_paused(s: _Sync) -> None:
    if not util.has_progress_deadline(s.d):
        return
    cond = conditions.find(s._dstatus().get("conditions"), "Progressing")
    if cond is not None and cond.get("reason") == util.TIMED_OUT:
        return
    paused_cond = cond is not None and cond.get("reason") == util.PAUSED
    if spec(s.d).get("paused") and not paused_cond:
        s.set_condition(util.progressing_condition("Unknown", util.PAUSED, "Deployment is paused", s.now))
    elif not spec(s.d).get("paused") and paused_cond:
        s.set_condition(util.progressing_condition("Unknown", util.RESUMED, "Deployment is resumed", s.now))


def _is_scaling_event(d: Obj, all_rss: list[Obj]) -> bool:
    for rs in util.filter_active(all_rss):
        try:
            desired = int(annotations_of(rs)[util.DESIRED_REPLICAS], 10)
        except (KeyError, ValueError):
            continue
        if desired != replicas(d):
            return True
    return False


def _sync_scale(s: _Sync, rss: list[Obj], paused: bool) -> Plan:
    new_rs, old = s.all_rss_and_sync_revision(rss, False)
    s.proportional_scale(new_rs, old)
    if paused:
        s.cleanup(old)
    s.sync_deployment_status([*old, *([new_rs] if new_rs else [])], new_rs)
    return s.finish()


def _rollout_rolling(s: _Sync, rss: list[Obj]) -> Plan:
    new_rs, old = s.all_rss_and_sync_revision(rss, True)
    all_rss = [*old, *([new_rs] if new_rs else [])]
    if new_rs is None:  # a hash collision: collisionCount bumped, try again
        s.sync_rollout_status(all_rss, None)
        return s.finish()
    if _reconcile_new(s, all_rss, new_rs):
        s.sync_rollout_status(all_rss, new_rs)
        return s.finish()
    if _reconcile_old(s, all_rss, util.filter_active(old), new_rs):
        s.sync_rollout_status(all_rss, new_rs)
        return s.finish()
    if util.complete(s.d, s.orig_status):
        s.cleanup(old)
    s.sync_rollout_status(all_rss, new_rs)
    return s.finish()


def _reconcile_new(s: _Sync, all_rss: list[Obj], new_rs: Obj) -> bool:
    want = replicas(s.d)
    if util.rs_replicas(new_rs) == want:
        return False
    if util.rs_replicas(new_rs) > want:
        return s.scale_and_record(new_rs, want) is not new_rs
    count = util.new_rs_new_replicas(s.d, all_rss, new_rs)
    return s.scale_and_record(new_rs, count) is not new_rs and count != util.rs_replicas(new_rs)


def _reconcile_old(s: _Sync, all_rss: list[Obj], old_rss: list[Obj], new_rs: Obj) -> bool:
    if util.total_replicas(old_rss) == 0:
        return False
    all_count = util.total_replicas(all_rss)
    min_available = replicas(s.d) - util.max_unavailable(s.d)
    new_unavailable = util.rs_replicas(new_rs) - util.rs_available(new_rs)
    max_scaled_down = all_count - min_available - new_unavailable
    if max_scaled_down <= 0:
        return False
    old_rss, cleaned = _cleanup_unhealthy(s, old_rss, max_scaled_down)
    scaled = _scale_down_old(s, [*old_rss, new_rs], old_rss)
    return cleaned + scaled > 0


def _cleanup_unhealthy(s: _Sync, old_rss: list[Obj], max_cleanup: int) -> tuple[list[Obj], int]:
    """Unhealthy old pods go first: they cost no availability (kubernetes#16737)."""
    old_rss = util.by_creation(old_rss)
    total = 0
    for i, rs in enumerate(old_rss):
        if total >= max_cleanup:
            break
        have, avail = util.rs_replicas(rs), util.rs_available(rs)
        if have == 0 or have == avail:
            continue
        down = min(max_cleanup - total, have - avail)
        old_rss[i] = s.scale_and_record(rs, have - down)
        total += down
    return old_rss, total


def _scale_down_old(s: _Sync, all_rss: list[Obj], old_rss: list[Obj]) -> int:
    min_available = replicas(s.d) - util.max_unavailable(s.d)
    available = util.total_available(all_rss)
    if available <= min_available:
        return 0
    total, target = 0, available - min_available
    for rs in util.by_creation(old_rss):
        if total >= target:
            break
        have = util.rs_replicas(rs)
        if have == 0:
            continue
        down = min(have, target - total)
        s.scale_and_record(rs, have - down)
        total += down
    return total


def _rollout_recreate(s: _Sync, rss: list[Obj], pods: Sequence[Mapping[str, Any]]) -> Plan:
    new_rs, old = s.all_rss_and_sync_revision(rss, False)
    all_rss = [*old, *([new_rs] if new_rs else [])]
    scaled = False
    for rs in util.filter_active(old):
        s.scale_and_record(rs, 0)
        scaled = True
    if scaled:
        s.sync_rollout_status(all_rss, new_rs)
        return s.finish()
    if _old_pods_running(new_rs, old, pods):
        s.sync_rollout_status(all_rss, new_rs)
        return s.finish()
    if new_rs is None:
        new_rs, old = s.all_rss_and_sync_revision(rss, True)
        all_rss = [*old, *([new_rs] if new_rs else [])]
    if new_rs is not None:
        s.scale_and_record(new_rs, replicas(s.d))
    if util.complete(s.d, s.orig_status):
        s.cleanup(old)
    s.sync_rollout_status(all_rss, new_rs)
    return s.finish()


def _old_pods_running(new_rs: Obj | None, old_rss: list[Obj], pods: Sequence[Mapping[str, Any]]) -> bool:
    """oldPodsRunning: old ReplicaSets still report pods, or a pod of one is not terminal (Unknown
    counts as running: its node may only be unreachable)."""
    if util.total_status(old_rss, "replicas") > 0:
        return True
    old_uids = {uid(rs) for rs in old_rss}
    new_uid = uid(new_rs) if new_rs is not None else None
    for p in pods:
        ref = controller_ref(p)
        if ref is None:
            continue
        owner = str(ref.get("uid") or "")
        if owner == new_uid or owner not in old_uids:
            continue
        if status(p).get("phase") not in ("Failed", "Succeeded"):
            return True
    return False
