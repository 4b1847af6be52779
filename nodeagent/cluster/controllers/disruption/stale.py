"""Stale DisruptionTarget conditions (disruption.go's syncStalePodDisruption): a pod marked as the
target of a disruption (by an eviction or a preemption) that is still not being deleted after
2 minutes was not disrupted after all, so its condition goes back to False."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodeagent.cluster.controllers.common.actions import ObjectRef, Patch, Plan
from nodeagent.cluster.controllers.common.meta import being_deleted, format_time, parse_time, resource_version
from nodeagent.cluster.controllers.common.pods import condition, is_terminal

STALE_POD_DISRUPTION_TIMEOUT = 120.0
TERMINATION_BY_KUBELET = "TerminationByKubelet"


def stale_in(pod: Mapping[str, Any], now: float) -> float | None:
    """nonTerminatingPodHasStaleDisruptionCondition: None when the pod has no condition to reset
    (none, not True, the kubelet's own, a terminating or terminal pod), else the seconds until it
    is stale (0: now)."""
    if being_deleted(pod):
        return None
    cond = condition(pod, "DisruptionTarget")
    if cond is None or cond.get("status") != "True" or cond.get("reason") == TERMINATION_BY_KUBELET or is_terminal(pod):
        return None
    since = parse_time(cond.get("lastTransitionTime"))
    return max(0.0, STALE_POD_DISRUPTION_TIMEOUT - (now - (since if since is not None else now)))


def reset(pod: Mapping[str, Any], now: float) -> Plan:
    """The status patch that sets DisruptionTarget False (on the pod as read: its resourceVersion),
    or a look again when the condition is not stale yet."""
    plan = Plan()
    wait = stale_in(pod, now)
    if wait is None:
        return plan
    if wait > 0:
        plan.requeue(wait)
        return plan
    plan.add(Patch(ObjectRef.of(pod, "v1", "Pod"),
                   {"metadata": {"resourceVersion": resource_version(pod)},
                    "status": {"conditions": [{"type": "DisruptionTarget", "status": "False",
                                               "lastTransitionTime": format_time(now)}]}},
                   "strategic", "status", reason="StaleDisruptionTarget"))
    return plan
