"""One ReplicaSet sync (syncReplicaSet), split so the loop can run the manage actions and feed their
outcome to the status (upstream's manageReplicasErr becomes the ReplicaFailure condition).

Inputs: the ReplicaSet, the candidate pods (every pod of its namespace that matches its selector or
is controlled by it: an informer index serves both), the pods of its sibling ReplicaSets (same
controlling owner) for co-location ranks, whether its expectations are satisfied, and now.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nodeagent.cluster.controllers.common import conditions, ownership
from nodeagent.cluster.controllers.common.actions import Create, Delete, ObjectRef, Plan, SlowStart, UpdateStatus
from nodeagent.cluster.controllers.common.meta import (
    being_deleted,
    generation,
    int_field,
    key,
    labels,
    new_controller_ref,
    resource_version,
    spec,
    status,
)
from nodeagent.cluster.controllers.common.pods import available_at, is_active, is_available, is_ready
from nodeagent.cluster.controllers.common.podtemplate import pod_from_template
from nodeagent.cluster.controllers.common.selectors import labels_match
from nodeagent.cluster.controllers.replicaset.victims import pods_to_delete

BURST_REPLICAS = 500
API_VERSION, KIND = "apps/v1", "ReplicaSet"
REPLICA_FAILURE = "ReplicaFailure"
Obj = Mapping[str, Any]


def replicas(rs: Obj) -> int:
    return int_field(spec(rs).get("replicas"), 1)


@dataclass(slots=True)
class Manage:
    """The manage half of a sync: what to run, and what to tell the expectations first."""

    plan: Plan
    claimed: list[Obj]  # active pods that are the ReplicaSet's after this pass
    expect_creations: int = 0
    expect_deletions: list[str] = field(default_factory=list)  # pod keys
    error: str | None = None  # a manage error known before running (no labels)


def manage(
    rs: Obj,
    candidates: Sequence[Obj],
    *,
    now: float,
    satisfied: bool,
    related: Sequence[Obj] = (),
    burst: int = BURST_REPLICAS,
) -> Manage:
    plan = Plan()
    active = [p for p in candidates if is_active(p)]
    result = ownership.claim(rs, API_VERSION, KIND, spec(rs).get("selector"), active)
    plan.actions.extend(ownership.claim_actions(rs, API_VERSION, KIND, result, "v1", "Pod"))
    out = Manage(plan, result.claimed)
    if not satisfied or being_deleted(rs):
        return out
    diff = len(result.claimed) - replicas(rs)
    template = spec(rs).get("template") or {}
    if diff < 0:
        count = min(-diff, burst)
        tlabels = (template.get("metadata") or {}).get("labels") or {}
        if not tlabels:
            out.error = "unable to create pods, no labels"
            return out
        ref = new_controller_ref(rs, API_VERSION, KIND)
        pod = pod_from_template(template, rs, ref)
        out.expect_creations = count
        plan.add(SlowStart(tuple(Create(copy.deepcopy(pod), reason="SuccessfulCreate") for _ in range(count))))
    elif diff > 0:
        count = min(diff, burst)
        victims = pods_to_delete(result.claimed, related, count, now)
        out.expect_deletions = [key(p) for p in victims]
        for p in victims:
            plan.add(Delete(ObjectRef.of(p, "v1", "Pod"), reason="SuccessfulDelete"))
    return out


def calculate_status(rs: Obj, pods: Sequence[Obj], now: float, manage_error: str | None) -> dict[str, Any]:
    """calculateStatus: counts over the claimed active pods, and ReplicaFailure from the manage error."""
    st = status(rs)
    tlabels = ((spec(rs).get("template") or {}).get("metadata") or {}).get("labels") or {}
    mrs = int_field(spec(rs).get("minReadySeconds"))
    fully = sum(1 for p in pods if labels_match(tlabels, labels(p)))
    ready = sum(1 for p in pods if is_ready(p))
    available = sum(1 for p in pods if is_available(p, mrs, now))
    conds = [dict(c) for c in st.get("conditions") or []]
    failure = conditions.find(conds, REPLICA_FAILURE)
    if manage_error is not None and failure is None:
        diff = len(pods) - replicas(rs)
        reason = "FailedCreate" if diff < 0 else "FailedDelete" if diff > 0 else ""
        cond = conditions.new_condition(REPLICA_FAILURE, "True", reason, manage_error, now)
        conds = conditions.set_condition(conds, cond)
    elif manage_error is None and failure is not None:
        conds = conditions.remove_condition(conds, REPLICA_FAILURE)
    out: dict[str, Any] = {
        "replicas": len(pods),
        "fullyLabeledReplicas": fully,
        "readyReplicas": ready,
        "availableReplicas": available,
        "observedGeneration": generation(rs),
    }
    if conds:
        out["conditions"] = conds
    return out


def _same(st: Mapping[str, Any], new: Mapping[str, Any], rs: Obj) -> bool:
    for f in ("replicas", "fullyLabeledReplicas", "readyReplicas", "availableReplicas"):
        if int_field(st.get(f)) != new[f]:
            return False
    return generation(rs) == int_field(st.get("observedGeneration")) and (st.get("conditions") or []) == (
        new.get("conditions") or []
    )


def status_plan(rs: Obj, claimed: Sequence[Obj], now: float, manage_error: str | None) -> Plan:
    """The status write (skipped when nothing changed: the steady state) and the requeue that
    catches pods becoming available after minReadySeconds."""
    plan = Plan()
    new = calculate_status(rs, claimed, now, manage_error)
    if not _same(status(rs), new, rs):
        obj = {**copy.deepcopy(dict(rs)), "status": new}
        if resource_version(rs):
            obj["metadata"]["resourceVersion"] = resource_version(rs)
        plan.add(UpdateStatus(obj))
    mrs = int_field(spec(rs).get("minReadySeconds"))
    if manage_error is None and mrs > 0:
        waits = [
            t - now
            for p in claimed
            if is_ready(p) and not is_available(p, mrs, now) and (t := available_at(p, mrs)) is not None
        ]
        if waits:
            plan.requeue(max(0.0, min(waits)) + 1.0)  # +1 s against clock skew, as updatePod does
    return plan


def reconcile(
    rs: Obj,
    candidates: Sequence[Obj],
    *,
    now: float,
    satisfied: bool = True,
    related: Sequence[Obj] = (),
    burst: int = BURST_REPLICAS,
) -> tuple[Manage, Plan]:
    """manage, then the status as if every manage action succeeds (the loop recomputes the status
    with `status_plan` when one fails)."""
    m = manage(rs, candidates, now=now, satisfied=satisfied, related=related, burst=burst)
    return m, status_plan(rs, m.claimed, now, m.error)
