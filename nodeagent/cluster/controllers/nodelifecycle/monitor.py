"""The per-node decisions of one monitor pass (node_lifecycle_controller.go processTaintBaseEviction,
markNodeAsReachable, doNoExecuteTaintingPass, doNoScheduleTaintingPass, MarkPodsNotReady) as actions.

A taint write is a merge patch of the whole `spec.taints` list carrying the node's resourceVersion,
as upstream's PatchNodeTaints: taints have no merge key, so a patch built on a stale read must fail
with a conflict (and be retried) rather than drop a taint someone else added meanwhile.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from nodeagent.cluster.controllers.common.actions import ObjectRef, Patch, UpdateStatus
from nodeagent.cluster.controllers.common.meta import being_deleted, resource_version, spec
from nodeagent.cluster.controllers.common.taints import has_taint
from nodeagent.cluster.controllers.nodelifecycle import health
from nodeagent.core.wellknown import TAINT_NOT_READY, TAINT_UNREACHABLE

Obj = Mapping[str, Any]
NOT_READY_NO_EXECUTE: dict[str, Any] = {"key": TAINT_NOT_READY, "effect": "NoExecute"}
UNREACHABLE_NO_EXECUTE: dict[str, Any] = {"key": TAINT_UNREACHABLE, "effect": "NoExecute"}
QueueOp = Literal["enqueue", "dequeue", "keep"]


def ready_status(node: Obj) -> str | None:
    """The Ready condition's status (None: the node never posted one)."""
    c = health.ready_condition(node)
    return None if c is None else str(c.get("status"))


def taint_patch(node: Obj, add: Sequence[Mapping[str, Any]], remove: Sequence[Mapping[str, Any]], now: float,
                reason: str) -> Patch | None:
    """SwapNodeControllerTaint as a patch; None when the taints would not change."""
    old = [dict(t) for t in spec(node).get("taints") or []]
    new = health.swap_taints(node, list(add), list(remove), now)
    if new == old:
        return None
    body: dict[str, Any] = {"spec": {"taints": new}}
    if resource_version(node):
        body["metadata"] = {"resourceVersion": resource_version(node)}
    return Patch(ObjectRef.of(node, "v1", "Node"), body, "merge", reason=reason)


def taint_based_eviction(node: Obj, now: float) -> tuple[QueueOp, Patch | None]:
    """processTaintBaseEviction: a NotReady node whose unreachable taint is there swaps it for the
    not-ready one at once (and vice versa), else it is queued for the rate-limited tainter; a
    Ready node loses both NoExecute taints and leaves the queue (markNodeAsReachable)."""
    taints = spec(node).get("taints") or []
    ready = ready_status(node)
    if ready == "False":
        if has_taint(taints, TAINT_UNREACHABLE, "NoExecute"):
            return "keep", taint_patch(node, [NOT_READY_NO_EXECUTE], [UNREACHABLE_NO_EXECUTE], now, "NotReady")
        return "enqueue", None
    if ready == "Unknown":
        if has_taint(taints, TAINT_NOT_READY, "NoExecute"):
            return "keep", taint_patch(node, [UNREACHABLE_NO_EXECUTE], [NOT_READY_NO_EXECUTE], now, "Unreachable")
        return "enqueue", None
    if ready == "True":
        return "dequeue", reachable_patch(node, now)
    return "keep", None


def reachable_patch(node: Obj, now: float) -> Patch | None:
    """markNodeAsReachable: both NoExecute taints off."""
    return taint_patch(node, [], [NOT_READY_NO_EXECUTE, UNREACHABLE_NO_EXECUTE], now, "Reachable")


def no_execute_taint(node: Obj, now: float) -> Patch | None:
    """doNoExecuteTaintingPass for one node the zone's limiter let through: the NoExecute taint of
    its Ready status in place of the opposite one; None when it is Ready again (or never posted)."""
    ready = ready_status(node)
    if ready == "False":
        return taint_patch(node, [NOT_READY_NO_EXECUTE], [UNREACHABLE_NO_EXECUTE], now, "NoExecuteNotReady")
    if ready == "Unknown":
        return taint_patch(node, [UNREACHABLE_NO_EXECUTE], [NOT_READY_NO_EXECUTE], now, "NoExecuteUnreachable")
    return None


def condition_taint_patch(node: Obj, now: float) -> Patch | None:
    """doNoScheduleTaintingPass: the NoSchedule taints of the node's conditions and unschedulable."""
    add, remove = health.condition_taints(node)
    if not add and not remove:
        return None
    return taint_patch(node, add, remove, now, "NoScheduleConditions")


def pods_not_ready(pods: Sequence[Obj], now: float) -> list[UpdateStatus]:
    """MarkPodsNotReady: Ready=False on the node's pods (not the ones being deleted)."""
    out: list[UpdateStatus] = []
    for pod in pods:
        if being_deleted(pod):
            continue
        st = health.not_ready_pod_status(pod, now)
        if st is None:
            continue
        obj = copy.deepcopy(dict(pod))
        obj["status"] = st
        out.append(UpdateStatus(obj, reason="MarkPodsNotReady"))
    return out
