"""Status conditions, in the three flavours upstream uses.

- `set_condition` (Deployment/ReplicaSet SetXCondition): nothing changes when status and reason are
  the same; lastTransitionTime kept when only the reason changes; the condition moves to the end.
- `set_status_condition` (apimachinery meta.SetStatusCondition, metav1.Condition: PDBs): in place,
  lastTransitionTime changes only with the status.
- `ensure_job_condition` (Job ensureJobConditionStatus): never adds a False condition.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nodeagent.cluster.controllers.common.meta import format_time

Cond = dict[str, Any]


def find(conditions: Sequence[Mapping[str, Any]] | None, ctype: str) -> Mapping[str, Any] | None:
    for c in conditions or []:
        if c.get("type") == ctype:
            return c
    return None


def new_condition(
    ctype: str,
    status: str,
    reason: str,
    message: str,
    now: float,
    *,
    update_time: bool = False,
    probe_time: bool = False,
) -> Cond:
    t = format_time(now)
    c: Cond = {"type": ctype, "status": status}
    if update_time:
        c["lastUpdateTime"] = t
    if probe_time:
        c["lastProbeTime"] = t
    c["lastTransitionTime"] = t
    if reason:
        c["reason"] = reason
    if message:
        c["message"] = message
    return c


def set_condition(conditions: Sequence[Mapping[str, Any]] | None, cond: Cond) -> list[Cond]:
    current = find(conditions, cond["type"])
    if current is not None and current.get("status") == cond["status"] and current.get("reason") == cond.get("reason"):
        return [dict(c) for c in conditions or []]
    if current is not None and current.get("status") == cond["status"] and "lastTransitionTime" in current:
        cond = {**cond, "lastTransitionTime": current["lastTransitionTime"]}
    return [dict(c) for c in conditions or [] if c.get("type") != cond["type"]] + [cond]


def remove_condition(conditions: Sequence[Mapping[str, Any]] | None, ctype: str) -> list[Cond]:
    return [dict(c) for c in conditions or [] if c.get("type") != ctype]


def set_status_condition(conditions: Sequence[Mapping[str, Any]] | None, cond: Cond, now: float) -> list[Cond]:
    out = [dict(c) for c in conditions or []]
    for c in out:
        if c.get("type") == cond["type"]:
            if c.get("status") != cond["status"]:
                c["status"] = cond["status"]
                c["lastTransitionTime"] = format_time(now)
            c["reason"] = cond.get("reason", "")
            c["message"] = cond.get("message", "")
            if "observedGeneration" in cond:
                c["observedGeneration"] = cond["observedGeneration"]
            return out
    new = {"type": cond["type"], "status": cond["status"]}
    if "observedGeneration" in cond:
        new["observedGeneration"] = cond["observedGeneration"]
    new.update(
        {"lastTransitionTime": format_time(now), "reason": cond.get("reason", ""), "message": cond.get("message", "")}
    )
    out.append(new)
    return out


def ensure_job_condition(
    conditions: Sequence[Mapping[str, Any]] | None, ctype: str, status: str, reason: str, message: str, now: float
) -> tuple[list[Cond], bool]:
    out = [dict(c) for c in conditions or []]
    for c in out:
        if c.get("type") == ctype:
            if c.get("status") != status or c.get("reason") != reason or c.get("message") != message:
                c.update(new_condition(ctype, status, reason, message, now, probe_time=True))
                if not reason:
                    c.pop("reason", None)
                if not message:
                    c.pop("message", None)
                return out, True
            return out, False
    if status == "True":
        out.append(new_condition(ctype, status, reason, message, now, probe_time=True))
        return out, True
    return out, False
