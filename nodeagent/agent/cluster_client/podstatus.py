"""Pod status for the control plane, as pure functions and one small tracker: what the agent sends
`pods/<name>/status` about a pod it runs for the server, and when it sends it.

The agent's own pod objects (worker.to_dict) are already in core/v1 shape; the server gets the
PodStatus keys only, as a JSON patch whose first operation tests `metadata.uid` (the kubelet puts
the uid in its patch for the same reason): the status of a pod deleted and re-created under the
same name is never written onto the new one. (A uid inside a merge patch is not checked by
`nodeagent server run`, so the test operation is what guards it.)

Coalescing: a pod's status is computed when the sync runs (on any change of the pod, at most
every few hundred ms, and every second for probe results) and sent only when it differs from the
last one the server accepted for that uid; a failed patch is retried with back-off (200 ms
doubling to 7 s) while newer changes replace the pending one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nodeagent.agent.cluster_client import bodies

STATUS_KEYS = ("phase", "conditions", "message", "reason", "hostIP", "hostIPs", "podIP", "podIPs",
               "startTime", "qosClass", "initContainerStatuses", "containerStatuses")
JSON_PATCH = "application/json-patch+json"
CLEARED_KEYS = ("message", "reason")  # null when unset: removed on the server if it has them
POD_SCHEDULED = "PodScheduled"


def server_status(local_pod: dict[str, Any]) -> dict[str, Any]:
    """The PodStatus keys of the agent's pod (worker.to_dict), nothing of nodeagent's own.

    A top-level key the pod no longer has is null (status_patch removes it on the server); a
    condition is sent whole (its old message goes with it)."""
    status = local_pod.get("status") or {}
    out = {k: status[k] for k in STATUS_KEYS if k in status}
    for key in CLEARED_KEYS:
        out.setdefault(key, None)
    return out


RESIZE_CONDITIONS = ("PodResizePending", "PodResizeInProgress")


def with_generation(status: dict[str, Any], generation: int | None) -> dict[str, Any]:
    """The status with `observedGeneration` (the pod generation whose spec the agent has taken
    in), also on the resize conditions, as the 1.35 kubelet writes them; unchanged when unknown."""
    if generation is None:
        return status
    out = {**status, "observedGeneration": generation}
    if isinstance(status.get("conditions"), list):
        out["conditions"] = [{**c, "observedGeneration": generation} if c.get("type") in RESIZE_CONDITIONS else c
                             for c in status["conditions"]]
    return out


def refused_status(reason: str, message: str) -> dict[str, Any]:
    """A pod refused at admission, as the kubelet reports it (rejectPod): Failed, the reason
    (OutOfmemory, OutOfcpu, Evicted, ...) and the message; it never runs here."""
    return {"phase": "Failed", "reason": reason, "message": message}


def status_patch(uid: str, status: dict[str, Any], current: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON patch for pods/<name>/status: first a `test` of metadata.uid (the server refuses
    the whole patch, 422, when the pod was deleted and re-created under the same name), then each
    key of ours: set, or removed when it is null and the server's copy (`current`, its status as
    last watched) has it. The conditions are the server's of types we do not report (PodScheduled
    from the scheduler, DisruptionTarget) with ours replacing or adding theirs by type, as the
    kubelet's status manager merges (the resize conditions are ours alone: one we no longer
    report goes); keys we do not report (nominatedNodeName, resize) stay.
    PodScheduled=True is added when neither side has it (a pod created with spec.nodeName), as
    the kubelet's generateAPIPodStatus does."""
    ops: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/uid", "value": uid}]
    for key, value in status.items():
        if key == "conditions":
            ours = {c.get("type"): {k: v for k, v in c.items() if v is not None} for c in value}
            theirs = [c for c in current.get("conditions") or []
                      if c.get("type") not in ours and c.get("type") not in RESIZE_CONDITIONS]
            if not any(c.get("type") == POD_SCHEDULED for c in theirs) and POD_SCHEDULED not in ours:
                theirs.append({"type": POD_SCHEDULED, "status": "True",
                               "lastTransitionTime": status.get("startTime")})
            ops.append({"op": "add", "path": "/status/conditions", "value": [*theirs, *ours.values()]})
        elif value is None:
            if key in current:
                ops.append({"op": "remove", "path": f"/status/{key}"})
        else:
            ops.append({"op": "add", "path": f"/status/{key}", "value": value})
    return ops


@dataclass
class _PodState:
    uid: str
    sent: dict[str, Any] | None = None  # the last status the server accepted
    failures: int = 0
    retry_at: float = 0.0


@dataclass
class StatusTracker:
    """What was sent per pod (key and uid) and the back-off of failed sends."""

    pods: dict[tuple[str, str], _PodState] = field(default_factory=dict)

    def due(self, key: tuple[str, str], uid: str, status: dict[str, Any], now: float) -> bool:
        """True when `status` should be sent now: new uid, changed, and not backing off."""
        state = self.pods.get(key)
        if state is None or state.uid != uid:
            state = self.pods[key] = _PodState(uid)
        if state.sent == status:
            return False
        return now >= state.retry_at

    def sent(self, key: tuple[str, str], uid: str, status: dict[str, Any]) -> None:
        self.pods[key] = _PodState(uid, sent=status)

    def failed(self, key: tuple[str, str], uid: str, now: float) -> float:
        """Record a failed send; the delay before the next try."""
        state = self.pods.get(key)
        if state is None or state.uid != uid:
            state = self.pods[key] = _PodState(uid)
        state.failures += 1
        delay = bodies.backoff_delay(state.failures)
        state.retry_at = now + delay
        return delay

    def forget(self, keep: set[tuple[str, str]]) -> None:
        """Drop what is known of pods no longer there (deleted on the server or here)."""
        for key in [k for k in self.pods if k not in keep]:
            del self.pods[key]

    def reset(self) -> None:
        """After a reconnect the server may hold anything: send every status again."""
        self.pods.clear()
