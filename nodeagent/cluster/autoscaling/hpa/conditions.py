"""HPA status conditions: AbleToScale, ScalingActive, ScalingLimited, set as upstream's setCondition.

A condition keeps its place in the list; its lastTransitionTime changes only when its status does.
The reasons and messages the controller uses are upstream's (horizontal.go).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nodeagent.core.timefmt import rfc3339

ABLE_TO_SCALE = "AbleToScale"
SCALING_ACTIVE = "ScalingActive"
SCALING_LIMITED = "ScalingLimited"

Condition = dict[str, Any]


def set_condition(
    conditions: Sequence[Mapping[str, Any]], kind: str, status: str, reason: str, message: str, now: float
) -> list[Condition]:
    """A copy of `conditions` with `kind` set (added at the end when absent)."""
    out = [dict(c) for c in conditions]
    for c in out:
        if c.get("type") == kind:
            existing = c
            break
    else:
        existing = {"type": kind}
        out.append(existing)
    if existing.get("status") != status:
        existing["lastTransitionTime"] = rfc3339(now)
    existing["status"] = status
    existing["reason"] = reason
    existing["message"] = message
    return out


def get_condition(conditions: Sequence[Mapping[str, Any]], kind: str) -> Mapping[str, Any] | None:
    return next((c for c in conditions if c.get("type") == kind), None)
