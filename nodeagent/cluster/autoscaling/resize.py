"""In-place pod resize (KEP-1287) as the control plane sees it.

The decision, the conditions, the retry order and the API's checks are the agent's as much as
the control plane's, so they live in nodeagent.core.resize and are re-exported here (the
scheduler's accounting of a pod being resized is the scheduler's: cluster/scheduler/requests).
"""

from __future__ import annotations

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
    "validate_resize",
]
