"""Taint-based eviction (tainteviction/taint_eviction.go processPodOnNode), level-triggered.

A pod on a node with NoExecute taints is deleted at once when one is not tolerated; otherwise
after the smallest tolerationSeconds of the tolerations used (none: never; <= 0: at once).
Upstream times this from when its in-memory timer first saw the taints; here the start is when the
oldest current NoExecute taint was added (its timeAdded, which the node lifecycle sets), or the
pod's creation if later, so a restarted controller neither restarts nor forgets the countdown.
Deletion first sets DisruptionTarget (DeletionByTaintManager), as upstream."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nodeagent.cluster.controllers.common import taints as tnt
from nodeagent.cluster.controllers.common.actions import Delete, Event, ObjectRef, Patch, Plan
from nodeagent.cluster.controllers.common.meta import being_deleted, creation_time, format_time, key, parse_time, spec

Obj = Mapping[str, Any]


def min_toleration(used: Sequence[Mapping[str, Any]]) -> float | None:
    """getMinTolerationTime: 0 for none given, None for forever."""
    if not used:
        return 0.0
    best: float | None = None
    for t in used:
        secs = t.get("tolerationSeconds")
        if secs is None:
            continue
        if int(secs) <= 0:
            return 0.0
        best = float(secs) if best is None else min(best, float(secs))
    return best


def eviction_time(pod: Obj, node: Obj, now: float) -> float | None:
    """When the pod must go (None: never, while the taints stay as they are)."""
    taints = [t for t in spec(node).get("taints") or [] if t.get("effect") == "NoExecute"]
    if not taints:
        return None
    ok, used = tnt.matching_tolerations(taints, spec(pod).get("tolerations") or [])
    if not ok:
        return now
    wait = min_toleration(used)
    if wait is None:
        return None
    added = [t for x in taints if (t := parse_time(x.get("timeAdded"))) is not None]
    start = min(added) if added else now
    created = creation_time(pod)
    if created is not None:
        start = max(start, created)
    return start + wait


def decide(node: Obj, pods: Sequence[Obj], now: float) -> Plan:
    plan = Plan()
    for p in pods:
        if being_deleted(p):
            continue
        at = eviction_time(p, node, now)
        if at is None:
            continue
        if at > now:
            plan.requeue(at - now)
            continue
        ref = ObjectRef.of(p, "v1", "Pod")
        plan.add(Event(ref, "Normal", "TaintManagerEviction", f"Marking for deletion Pod {key(p)}"))
        plan.add(
            Patch(
                ref,
                {
                    "status": {
                        "conditions": [
                            {
                                "type": "DisruptionTarget",
                                "status": "True",
                                "reason": "DeletionByTaintManager",
                                "message": "Taint manager: deleting due to NoExecute taint",
                                "lastTransitionTime": format_time(now),
                            }
                        ]
                    }
                },
                "strategic",
                subresource="status",
                reason="DisruptionTarget",
            )
        )
        plan.add(Delete(ref, reason="TaintManagerEviction"))
    return plan
