"""ttlSecondsAfterFinished (pkg/controller/ttlafterfinished): a finished Job is deleted, with
foreground propagation and its uid as precondition, ttl seconds after its Complete/Failed
condition's lastTransitionTime; until then, requeue at the expiry."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodeagent.cluster.controllers.common.actions import Delete, Event, ObjectRef, Plan
from nodeagent.cluster.controllers.common.meta import being_deleted, parse_time, spec
from nodeagent.cluster.controllers.job.reconcile import API_VERSION, KIND, finished_condition


def decide(job: Mapping[str, Any], now: float) -> Plan:
    plan = Plan()
    ttl = spec(job).get("ttlSecondsAfterFinished")
    cond = finished_condition(job)
    if ttl is None or cond is None or being_deleted(job):
        return plan
    finished_at = parse_time(cond.get("lastTransitionTime"))
    ref = ObjectRef.of(job, API_VERSION, KIND)
    if finished_at is None:
        plan.add(
            Event(
                ref, "Warning", "TTLError", f"unable to find the time when the Job {ref.namespace}/{ref.name} finished"
            )
        )
        return plan
    left = finished_at + int(ttl) - now
    if left > 0:
        plan.requeue(left)
        return plan
    plan.add(Delete(ref, propagation="Foreground", reason="TTLAfterFinished"))
    return plan
