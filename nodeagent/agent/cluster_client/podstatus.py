"""Pod status for the control plane, as pure functions and one small tracker: what the agent sends
`pods/<name>/status` about a pod it runs for the server, and when it sends it.

The agent's own pod objects (worker.to_dict) are already in core/v1 shape; the server gets the
PodStatus keys only, as a strategic merge patch (conditions merge by `type`, so the scheduler's
PodScheduled stays), with `metadata.uid` in the patch, as the kubelet's status manager sends it:
the server refuses a patch whose uid is not the stored pod's (409), so the status of a pod
deleted and re-created under the same name is never written onto the new one.

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
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


CLEARED_KEYS = ("message", "reason")  # sent as null when unset: a merge patch keeps what it does not name
CONDITION_KEYS = ("reason", "message")
POD_SCHEDULED = "PodScheduled"


def server_status(local_pod: dict[str, Any]) -> dict[str, Any]:
    """The PodStatus keys of the agent's pod (worker.to_dict), nothing of nodeagent's own.

    A key the pod no longer has is sent as null (a strategic merge patch keeps what it does not
    name: a condition's old message would stay); PodScheduled=True is added when the pod has
    none (a pod created with spec.nodeName, as the kubelet's generateAPIPodStatus does)."""
    status = local_pod.get("status") or {}
    out = {k: status[k] for k in STATUS_KEYS if k in status}
    for key in CLEARED_KEYS:
        out.setdefault(key, None)
    conditions = [{**dict.fromkeys(CONDITION_KEYS), **c} for c in out.get("conditions") or []]
    if not any(c.get("type") == POD_SCHEDULED for c in conditions):
        start = status.get("startTime")
        conditions.append({"type": POD_SCHEDULED, "status": "True", "lastTransitionTime": start,
                           "reason": None, "message": None})
    out["conditions"] = conditions
    return out


def refused_status(reason: str, message: str) -> dict[str, Any]:
    """A pod refused at admission, as the kubelet reports it (rejectPod): Failed, the reason
    (OutOfmemory, OutOfcpu, Evicted, ...) and the message; it never runs here."""
    return {"phase": "Failed", "reason": reason, "message": message}


def status_patch(uid: str, status: dict[str, Any]) -> dict[str, Any]:
    """The strategic merge patch for pods/<name>/status; `metadata.uid` makes it a precondition."""
    return {"metadata": {"uid": uid}, "status": status}


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
