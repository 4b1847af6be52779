"""In-place pod resize (KEP-1287) as the control plane sees it.

The decision, the conditions, the retry order and the API's checks are the agent's as much as
the control plane's, so they live in nodeagent.core.resize and are re-exported here; what is
the control plane's alone is the scheduler's accounting of a pod being resized.
"""

from __future__ import annotations

from collections.abc import Sequence

from nodeagent.core.resize import (
    IN_PROGRESS,
    NOT_REQUIRED,
    PENDING,
    PREFER_NO_RESTART,
    QOS,
    QOS_CHANGE_MESSAGE,
    RESIZABLE,
    RESTART_CONTAINER,
    ContainerAction,
    Node,
    Outcome,
    PendingResize,
    ResizeDecision,
    Resources,
    conditions,
    decide,
    qos_class,
    resource_change_errors,
    retry_order,
    validate_resize,
)

__all__ = [
    "IN_PROGRESS",
    "NOT_REQUIRED",
    "PENDING",
    "PREFER_NO_RESTART",
    "QOS",
    "QOS_CHANGE_MESSAGE",
    "RESIZABLE",
    "RESTART_CONTAINER",
    "ContainerAction",
    "Node",
    "Outcome",
    "PendingResize",
    "ResizeDecision",
    "Resources",
    "conditions",
    "decide",
    "qos_class",
    "resource_change_errors",
    "retry_order",
    "scheduler_requests",
    "validate_resize",
]


def scheduler_requests(
    desired: Sequence[Resources], allocated: Sequence[Resources], actual: Sequence[Resources], infeasible: bool = False
) -> dict[str, int]:
    """What the scheduler counts for the pod: per container max(desired, allocated, actual), summed."""
    alloc = {c.name: c for c in allocated}
    act = {c.name: c for c in actual}
    total = dict.fromkeys(RESIZABLE, 0)
    for c in desired:
        for r in RESIZABLE:
            values = [
                alloc[c.name].requests.get(r, 0) if c.name in alloc else 0,
                act[c.name].requests.get(r, 0) if c.name in act else 0,
            ]
            if not infeasible:
                values.append(c.requests.get(r, 0))
            total[r] += max(values)
    return total
