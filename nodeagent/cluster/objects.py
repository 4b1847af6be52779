"""The API objects the scheduler keeps: pods (with binding and status), namespaces, quotas (pure).

A stored pod is the Kubernetes-shaped object clients see: the manifest as admitted (uid,
creationTimestamp, resolved priority, `spec.preemptionPolicy` from its PriorityClass), then
`spec.nodeName` once bound and a `status` (phase, conditions, nominatedNodeName, and what the
agent reports). `PodScheduled=True` is set only once the agent has accepted the pod: a pod with a
nodeName but without it is a binding in flight (see service.py for what a restart does with one).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nodeagent.cluster.admission.priority import PREEMPT_LOWER_PRIORITY
from nodeagent.cluster.scheduler.framework import PodInfo
from nodeagent.core.errors import FieldError, ValidationErrors
from nodeagent.core.model import Pod, Toleration, parse_pod
from nodeagent.core.names import dns1123_label_errors, invalid
from nodeagent.core.qos import qos_class
from nodeagent.core.timefmt import rfc3339
from nodeagent.core.wellknown import DISRUPTION_TARGET as DISRUPTION_TARGET
from nodeagent.core.wellknown import POD_SCHEDULED as POD_SCHEDULED
from nodeagent.core.wellknown import TAINT_MEMORY_PRESSURE

TERMINAL = frozenset({"Succeeded", "Failed"})
# what the scheduler copies from the agent's pod status (conditions and nomination are ours)
AGENT_STATUS_FIELDS = ("phase", "qosClass", "startTime", "containerStatuses", "reason", "message",
                       "hostIP")
# status changes worth a store write (container restarts and times are re-read on every poll)
PERSISTED_STATUS_FIELDS = ("phase", "reason", "message")


@dataclass(eq=False)
class PodRecord:
    """One pod: the served/stored object, its parsed spec and the scheduler's view of it."""

    obj: dict[str, Any]
    pod: Pod
    info: PodInfo
    busy: int = 0  # agent calls in flight for it (bind, delete): reconcile leaves it alone
    changed_at: float = field(default=0.0)  # monotonic time of the last binding change
    reservation: PodInfo | None = None  # its nomination's table entry (made once, reused)

    @property
    def key(self) -> str:
        return self.info.key

    @property
    def uid(self) -> str:
        return str(self.obj["metadata"]["uid"])

    @property
    def node(self) -> str | None:
        node = self.obj["spec"].get("nodeName")
        return str(node) if node else None

    @property
    def status(self) -> dict[str, Any]:
        status: dict[str, Any] = self.obj.setdefault("status", {})
        return status

    @property
    def phase(self) -> str:
        return str(self.status.get("phase", "Pending"))

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL

    @property
    def deleting(self) -> bool:
        return "deletionTimestamp" in self.obj["metadata"]

    @property
    def confirmed(self) -> bool:
        return any(c.get("type") == POD_SCHEDULED and c.get("status") == "True"
                   for c in self.status.get("conditions") or [])

    @property
    def nominated(self) -> str | None:
        return self.status.get("nominatedNodeName")

    @property
    def grace(self) -> int:
        return self.pod.spec.termination_grace_period_seconds


def record_from(obj: dict[str, Any]) -> PodRecord:
    """A record from a stored object (at load): the spec is parsed again, as it was admitted."""
    pod = parse_pod(agent_manifest(obj))
    info = PodInfo.from_pod(pod, preemption_policy=obj["spec"].get("preemptionPolicy",
                                                                    PREEMPT_LOWER_PRIORITY))
    return PodRecord(obj, pod, info)


def agent_manifest(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The pod as the agent takes it: no status, no fields the agent's model does not know."""
    spec = {k: v for k, v in obj["spec"].items() if k != "preemptionPolicy"}
    meta = {k: v for k, v in obj["metadata"].items()
            if k not in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds")}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def new_pod(manifest: dict[str, Any], *, priority: int, class_name: str | None,
            preemption_policy: str, now_wall: float) -> PodRecord:
    """Admit a manifest (namespace and name already settled): server fields, priority, parse.
    ValidationErrors names every bad field."""
    meta = dict(manifest.get("metadata") or {})
    meta["uid"] = str(uuid.uuid4())  # the server's, never the client's
    meta["creationTimestamp"] = rfc3339(now_wall)
    spec = dict(manifest.get("spec") or {}) if isinstance(manifest.get("spec"), dict) else manifest.get("spec")
    if isinstance(spec, dict):
        spec.pop("preemptionPolicy", None)
        spec["priority"] = priority
        if class_name:
            spec["priorityClassName"] = class_name
    body = {k: v for k, v in manifest.items() if k != "status"}
    pod = with_default_tolerations(parse_pod({**body, "metadata": meta, "spec": spec}))
    obj = pod.to_dict()
    obj["spec"]["preemptionPolicy"] = preemption_policy
    obj["status"] = {"phase": "Pending", "qosClass": qos_class(pod)}
    info = PodInfo.from_pod(pod, preemption_policy=preemption_policy)
    return PodRecord(obj, pod, info)


MEMORY_PRESSURE_TOLERATION = Toleration(key=TAINT_MEMORY_PRESSURE, operator="Exists",
                                        effect="NoSchedule")


def with_default_tolerations(pod: Pod) -> Pod:
    """The PodTolerationRestriction admission plugin: Guaranteed and Burstable pods tolerate the
    memory-pressure taint (they can cope with it), so a node under memory pressure only refuses
    new BestEffort pods, as the kubelet's own admission does."""
    if qos_class(pod) == "BestEffort" or MEMORY_PRESSURE_TOLERATION in pod.spec.tolerations:
        return pod
    spec = pod.spec.model_copy(update={"tolerations": [*pod.spec.tolerations, MEMORY_PRESSURE_TOLERATION]})
    return pod.model_copy(update={"spec": spec})


def condition(type_: str, status: bool, now_wall: float, reason: str = "",
              message: str = "") -> dict[str, Any]:
    c: dict[str, Any] = {"type": type_, "status": "True" if status else "False",
                         "lastProbeTime": None, "lastTransitionTime": rfc3339(now_wall)}
    if reason:
        c["reason"] = reason
    if message:
        c["message"] = message
    return c


def set_condition(status: dict[str, Any], cond: dict[str, Any]) -> bool:
    """Put `cond` in status.conditions; keeps the transition time when the status is unchanged.
    Returns whether anything changed."""
    conditions = list(status.get("conditions") or [])
    for i, old in enumerate(conditions):
        if old.get("type") == cond["type"]:
            same = all(old.get(k) == cond.get(k) for k in ("status", "reason", "message"))
            if same:
                return False
            if old.get("status") == cond["status"]:
                cond = {**cond, "lastTransitionTime": old.get("lastTransitionTime")}
            conditions[i] = cond
            break
    else:
        conditions.append(cond)
    status["conditions"] = conditions
    return True


def merge_agent_status(rec: PodRecord, agent_pod: Mapping[str, Any]) -> bool:
    """Copy the agent's view of the pod into ours; True when a persisted field changed."""
    theirs = agent_pod.get("status") or {}
    ours = rec.status
    changed = any(ours.get(k) != theirs.get(k) for k in PERSISTED_STATUS_FIELDS)
    for k in AGENT_STATUS_FIELDS:
        if k in theirs:
            ours[k] = theirs[k]
        elif k in ("reason", "message"):
            ours.pop(k, None)
    return changed


# ---- namespaces and quotas ----

SYSTEM_NAMESPACES = ("default", "kube-system")


def namespace_object(name: str, now_wall: float, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    if errs := dns1123_label_errors(name):
        raise ValidationErrors([FieldError("metadata.name", invalid(name, e)) for e in errs])
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "uid": str(uuid.uuid4()), "creationTimestamp": rfc3339(now_wall),
                         "labels": {"kubernetes.io/metadata.name": name, **(labels or {})}},
            "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}


def parse_namespace(manifest: Any) -> tuple[str, dict[str, str]]:
    """(name, labels) of a Namespace manifest; ValidationErrors otherwise."""
    if not isinstance(manifest, dict):
        raise ValidationErrors([FieldError("", "the body must be a Namespace object")])
    errs = []
    if manifest.get("apiVersion", "v1") != "v1":
        errs.append(FieldError("apiVersion",
                               f"Unsupported value: {manifest.get('apiVersion')!r}: supported values: 'v1'"))
    if manifest.get("kind", "Namespace") != "Namespace":
        errs.append(FieldError("kind", f"Unsupported value: {manifest.get('kind')!r}: supported values: 'Namespace'"))
    meta = _v if isinstance(_v := manifest.get("metadata"), dict) else {}
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        errs.append(FieldError("metadata.name", "Required value: name or generateName is required"))
    labels = meta.get("labels") or {}
    if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
        errs.append(FieldError("metadata.labels", "must be a map of strings"))
    if errs:
        raise ValidationErrors(errs)
    return str(name), dict(labels)
