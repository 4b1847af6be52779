"""The PDB controller's trySync: expected pods from the controllers' scale (getExpectedScale:
ReplicaSets not owned by a Deployment, Deployments through their ReplicaSets, StatefulSets,
ReplicationControllers; `scales` gives the loop's lookups), desired healthy from minAvailable /
maxUnavailable (percentages round up), healthy = ready and not being deleted and not recently
disrupted (DeletionTimeout 2 min), disruptionsAllowed clamped at 0 and 0 while no pod is expected."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from nodeagent.cluster.controllers.common import conditions, selectors
from nodeagent.cluster.controllers.common.actions import Event, ObjectRef, Plan, UpdateStatus
from nodeagent.cluster.controllers.common.intstr import IntOrStringError, scaled_value
from nodeagent.cluster.controllers.common.meta import (
    being_deleted,
    controller_ref,
    format_time,
    generation,
    labels,
    name,
    parse_time,
    spec,
    status,
)
from nodeagent.cluster.controllers.common.pods import is_ready

DELETION_TIMEOUT = 120.0
API_VERSION, KIND = "policy/v1", "PodDisruptionBudget"
Obj = Mapping[str, Any]
ScaleLookup = Callable[[Mapping[str, Any], str], tuple[str, int] | None]  # (controllerRef, namespace) -> (uid, scale)


class SyncError(Exception):
    pass


def matching_pods(pdb: Obj, pods: Sequence[Obj]) -> list[Obj]:
    sel = spec(pdb).get("selector")
    return [p for p in pods if selectors.matches(sel, labels(p))]


def expected_scale(pods: Sequence[Obj], namespace: str, scale_of: ScaleLookup) -> tuple[int, list[str]]:
    scales: dict[str, int] = {}
    unmanaged: list[str] = []
    for p in pods:
        ref = controller_ref(p)
        if ref is None:
            unmanaged.append(name(p))
            continue
        if str(ref.get("uid")) in scales:
            continue
        found = scale_of(ref, namespace)
        if found is None:
            raise SyncError(f'found no controllers for pod "{name(p)}"')
        scales[found[0]] = found[1]
    return sum(scales.values()), unmanaged


def expected_and_desired(pdb: Obj, pods: Sequence[Obj], scale_of: ScaleLookup) -> tuple[int, int, list[str]]:
    sp, ns = spec(pdb), str((pdb.get("metadata") or {}).get("namespace") or "")
    try:
        if sp.get("maxUnavailable") is not None:
            expected, unmanaged = expected_scale(pods, ns, scale_of)
            return expected, max(0, expected - scaled_value(sp["maxUnavailable"], expected, True)), unmanaged
        if sp.get("minAvailable") is not None:
            ma = sp["minAvailable"]
            if isinstance(ma, int):
                return len(pods), ma, []
            expected, unmanaged = expected_scale(pods, ns, scale_of)
            return expected, scaled_value(ma, expected, True), unmanaged
    except IntOrStringError as e:
        raise SyncError(str(e)) from e
    return 0, 0, []


def sync(pdb: Obj, pods: Sequence[Obj], scale_of: ScaleLookup, *, now: float) -> Plan:
    plan = Plan()
    ref = ObjectRef.of(pdb, API_VERSION, KIND)
    pods = matching_pods(pdb, pods)
    if not pods:
        plan.add(Event(ref, "Normal", "NoPods", "No matching pods found"))
    try:
        expected, desired, unmanaged = expected_and_desired(pdb, pods, scale_of)
    except SyncError as e:
        plan.add(
            Event(
                ref,
                "Warning",
                "CalculateExpectedPodCountFailed",
                f"Failed to calculate the number of expected pods: {e}",
            )
        )
        return _fail_safe(pdb, str(e), now, plan)
    if unmanaged:
        plan.add(
            Event(
                ref,
                "Warning",
                "UnmanagedPods",
                f"Pods selected by this PodDisruptionBudget (selector: {spec(pdb).get('selector')}) "
                "were found to be unmanaged. As a result, the status of the PDB cannot be calculated correctly, which may result "  # noqa: E501  (upstream's text)
                'in undefined behavior. To account for these pods please set ".spec.minAvailable" field of the PDB to an integer value.',  # noqa: E501  (upstream's text)
            )
        )
    disrupted, recheck = _disrupted(pdb, pods, now)
    healthy = sum(1 for p in pods if not being_deleted(p) and name(p) not in disrupted and is_ready(p))
    allowed = healthy - desired
    if expected <= 0 or allowed <= 0:
        allowed = 0
    st = dict(status(pdb))
    new = {
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
        "disruptionsAllowed": allowed,
        "observedGeneration": generation(pdb),
        "conditions": st.get("conditions") or [],
    }
    if disrupted:
        new["disruptedPods"] = disrupted
    new["conditions"] = disruption_allowed_condition(new, now)
    if new != {k: st.get(k) for k in new} or (not disrupted and st.get("disruptedPods")):
        plan.add(UpdateStatus({**copy.deepcopy(dict(pdb)), "status": new}, reason="PDBStatus"))
    if recheck is not None:
        plan.requeue(recheck - now)
    return plan


def disruption_allowed_condition(st: Mapping[str, Any], now: float) -> list[dict[str, Any]]:
    """pdbhelper.UpdateDisruptionAllowedCondition."""
    if int(st.get("disruptionsAllowed") or 0) > 0:
        c = {
            "type": "DisruptionAllowed",
            "status": "True",
            "reason": "SufficientPods",
            "observedGeneration": st.get("observedGeneration", 0),
        }
    else:
        c = {
            "type": "DisruptionAllowed",
            "status": "False",
            "reason": "InsufficientPods",
            "observedGeneration": st.get("observedGeneration", 0),
        }
    return conditions.set_status_condition(st.get("conditions"), c, now)


def _disrupted(pdb: Obj, pods: Sequence[Obj], now: float) -> tuple[dict[str, str], float | None]:
    old = status(pdb).get("disruptedPods") or {}
    out: dict[str, str] = {}
    recheck: float | None = None
    for p in pods:
        if being_deleted(p) or name(p) not in old:
            continue
        t = parse_time(old[name(p)])
        if t is None or t + DELETION_TIMEOUT < now:
            continue  # the eviction did not delete it: it counts again
        out[name(p)] = old[name(p)]
        recheck = t + DELETION_TIMEOUT if recheck is None else min(recheck, t + DELETION_TIMEOUT)
    return out, recheck


def _fail_safe(pdb: Obj, message: str, now: float, plan: Plan) -> Plan:
    st = copy.deepcopy(dict(status(pdb)))
    st["disruptionsAllowed"] = 0
    st["conditions"] = conditions.set_status_condition(
        st.get("conditions"),
        {
            "type": "DisruptionAllowed",
            "status": "False",
            "reason": "SyncFailed",
            "message": message,
            "observedGeneration": st.get("observedGeneration", 0),
        },
        now,
    )
    plan.add(UpdateStatus({**copy.deepcopy(dict(pdb)), "status": st}, reason="PDBFailSafe"))
    return plan


__all__ = ["format_time", "sync"]
