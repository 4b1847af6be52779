"""tryUpdateNodeHealth and doNoScheduleTaintingPass over plain dicts.

The probe time is the controller's own clock reading when it last saw the Ready condition's
lastHeartbeatTime change or the node's Lease renewTime advance (a `NodeHealth` the loop keeps per
node); a node is stale once now > probe + grace (nodeMonitorGracePeriod 50 s since 1.32, or
nodeStartupGracePeriod 60 s for a node that never posted Ready)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nodeagent.cluster.controllers.common.meta import format_time, meta, parse_time, spec, status
from nodeagent.core.wellknown import (
    TAINT_DISK_PRESSURE,
    TAINT_MEMORY_PRESSURE,
    TAINT_NETWORK_UNAVAILABLE,
    TAINT_NOT_READY,
    TAINT_PID_PRESSURE,
    TAINT_UNREACHABLE,
    TAINT_UNSCHEDULABLE,
)

MONITOR_GRACE = 50.0
STARTUP_GRACE = 60.0
MONITOR_PERIOD = 5.0
CONDITIONS_SET_UNKNOWN = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")
CONDITION_TAINTS = {
    ("Ready", "False"): TAINT_NOT_READY,
    ("Ready", "Unknown"): TAINT_UNREACHABLE,
    ("MemoryPressure", "True"): TAINT_MEMORY_PRESSURE,
    ("DiskPressure", "True"): TAINT_DISK_PRESSURE,
    ("NetworkUnavailable", "True"): TAINT_NETWORK_UNAVAILABLE,
    ("PIDPressure", "True"): TAINT_PID_PRESSURE,
}
Obj = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class NodeHealth:
    probe: float
    ready_transition: float
    heartbeat: str | None = None  # the Ready condition's lastHeartbeatTime last seen
    transition: str | None = None  # and its lastTransitionTime
    lease_renew: float | None = None


def ready_condition(node: Obj) -> Mapping[str, Any] | None:
    return next((c for c in status(node).get("conditions") or [] if c.get("type") == "Ready"), None)


def observe(node: Obj, saved: NodeHealth | None, lease: Obj | None, now: float) -> NodeHealth:
    """The probe bookkeeping of tryUpdateNodeHealth."""
    cur = ready_condition(node)
    created = parse_time(meta(node).get("creationTimestamp")) or now
    hb = cur.get("lastHeartbeatTime") if cur else None
    tr = cur.get("lastTransitionTime") if cur else None
    if saved is None:
        h = NodeHealth(created if cur is None else now, created if cur is None else now, hb, tr)
    elif (saved.heartbeat is None) != (hb is None) or (hb is not None and hb != saved.heartbeat):
        transition = now if tr != saved.transition else saved.ready_transition
        h = NodeHealth(now, transition, hb, tr, saved.lease_renew)
    else:
        h = saved
    renew = parse_time(((lease or {}).get("spec") or {}).get("renewTime"))
    if renew is not None and (h.lease_renew is None or renew > h.lease_renew):
        h = NodeHealth(now, h.ready_transition, h.heartbeat, h.transition, renew)
    return h


def stale_status(
    node: Obj,
    health: NodeHealth,
    now: float,
    monitor_grace: float = MONITOR_GRACE,
    startup_grace: float = STARTUP_GRACE,
) -> dict[str, Any] | None:
    """The node status with Ready, MemoryPressure, DiskPressure and PIDPressure set Unknown when
    the node stopped reporting (None: nothing to write)."""
    grace = startup_grace if ready_condition(node) is None else monitor_grace
    if not now > health.probe + grace:
        return None
    st = copy.deepcopy(dict(status(node)))
    conds = st.setdefault("conditions", [])
    changed = False
    for ctype in CONDITIONS_SET_UNKNOWN:
        c = next((c for c in conds if c.get("type") == ctype), None)
        if c is None:
            conds.append(
                {
                    "type": ctype,
                    "status": "Unknown",
                    "reason": "NodeStatusNeverUpdated",
                    "message": "Kubelet never posted node status.",
                    "lastHeartbeatTime": meta(node).get("creationTimestamp"),
                    "lastTransitionTime": format_time(now),
                }
            )
            changed = True
        elif c.get("status") != "Unknown":
            c.update(
                status="Unknown",
                reason="NodeStatusUnknown",
                message="Kubelet stopped posting node status.",
                lastTransitionTime=format_time(now),
            )
            changed = True
    return st if changed else None


def condition_taints(node: Obj) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """doNoScheduleTaintingPass: (NoSchedule taints to add, to remove) for the node's conditions
    and spec.unschedulable."""
    want: list[dict[str, Any]] = []
    for c in status(node).get("conditions") or []:
        key = CONDITION_TAINTS.get((str(c.get("type")), str(c.get("status"))))
        if key:
            want.append({"key": key, "effect": "NoSchedule"})
    if spec(node).get("unschedulable"):
        want.append({"key": TAINT_UNSCHEDULABLE, "effect": "NoSchedule"})
    ours = set(CONDITION_TAINTS.values()) | {TAINT_UNSCHEDULABLE}
    have = [t for t in spec(node).get("taints") or [] if t.get("effect") == "NoSchedule" and t.get("key") in ours]
    add = [t for t in want if not any(h.get("key") == t["key"] for h in have)]
    remove = [dict(h) for h in have if not any(w["key"] == h.get("key") for w in want)]
    return add, remove


def swap_taints(
    node: Obj, add: list[Mapping[str, Any]], remove: list[Mapping[str, Any]], now: float
) -> list[dict[str, Any]]:
    """SwapNodeControllerTaint: the node's taints with `remove` gone and `add` stamped timeAdded."""
    out = [
        dict(t)
        for t in spec(node).get("taints") or []
        if not any(t.get("key") == r.get("key") and t.get("effect") == r.get("effect") for r in remove)
    ]
    for t in add:
        if not any(o.get("key") == t.get("key") and o.get("effect") == t.get("effect") for o in out):
            out.append({**t, "timeAdded": format_time(now)})
    return out


def not_ready_pod_status(pod: Obj, now: float) -> dict[str, Any] | None:
    """MarkPodsNotReady for one pod: Ready=False (None when already so)."""
    st = copy.deepcopy(dict(status(pod)))
    for c in st.get("conditions") or []:
        if c.get("type") == "Ready":
            if c.get("status") == "False":
                return None
            c["status"] = "False"
            c["lastTransitionTime"] = format_time(now)
            return st
    return None
