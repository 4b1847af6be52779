"""What the scheduler knows about each node, and what follows from it (pure: time is passed in).

A node is known from the scheduler's config (`nodes`), from an agent registering itself
(POST /api/v1/nodes/<name>/status), or from a pod the store has bound to it. It is Ready while
the agent said Ready within `nodeMonitorGracePeriod`; after that its Ready condition becomes
Unknown ("Kubelet stopped posting node status.", as the node lifecycle controller words it), it
gets the not-ready taint and no new pods. The agent's pressure conditions and a cordon reach the
scheduling core as taints (NodeSpec does the folding; see cluster.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nodeagent.cluster.scheduler.node_table import NodeSpec, Taint
from nodeagent.core.errors import FieldError, ValidationErrors
from nodeagent.core.names import dns1123_subdomain_errors, invalid
from nodeagent.core.quantity import Quantity, coerce_quantity
from nodeagent.core.timefmt import rfc3339
from nodeagent.core.wellknown import (
    API_URL,
    LABEL_HOSTNAME,
    NODE_DISK_PRESSURE,
    NODE_MEMORY_PRESSURE,
    NODE_PID_PRESSURE,
)

URL_ANNOTATION = API_URL  # the annotation an agent's report carries its API's URL in

NOT_POSTING = "Kubelet stopped posting node status."
NEVER_POSTED = "Kubelet never posted node status."


@dataclass
class NodeState:
    name: str
    url: str | None = None
    configured: bool = False  # listed in the scheduler's config (its url wins)
    registered: bool = False  # the agent registered itself (persisted)
    unschedulable: bool = False  # cordoned (persisted)
    report: dict[str, Any] | None = None  # the last Node object the agent sent
    heard_at: float | None = None  # monotonic time of that report
    heard_wall: float | None = None
    not_ready_since: float | None = None  # monotonic; set while not Ready

    def record(self) -> dict[str, Any]:
        """What the store keeps about the node (the rest is reported again by the agent)."""
        return {"metadata": {"name": self.name}, "url": self.url, "registered": self.registered,
                "unschedulable": self.unschedulable}


def conditions_of(report: Mapping[str, Any] | None) -> dict[str, str]:
    """type -> status ("True"/"False"/"Unknown") from a Node object."""
    if not report:
        return {}
    out = {}
    for c in (report.get("status") or {}).get("conditions") or []:
        if isinstance(c, Mapping) and isinstance(c.get("type"), str):
            out[c["type"]] = str(c.get("status", "Unknown"))
    return out


def is_ready(state: NodeState, now: float, grace: float) -> bool:
    """Heard from within the grace period, and the agent itself said Ready."""
    if state.heard_at is None or now - state.heard_at > grace:
        return False
    return conditions_of(state.report).get("Ready") == "True"


def allocatable_of(report: Mapping[str, Any] | None) -> dict[str, Quantity]:
    if not report:
        return {}
    raw = (report.get("status") or {}).get("allocatable") or {}
    return {str(k): coerce_quantity(v) for k, v in raw.items()}


def reported_taints(report: Mapping[str, Any] | None) -> tuple[Taint, ...]:
    """Taints the agent put in its Node's spec (none today; honoured if present)."""
    if not report:
        return ()
    out = []
    for t in (report.get("spec") or {}).get("taints") or []:
        if isinstance(t, Mapping) and t.get("key"):
            out.append(Taint(str(t["key"]), str(t.get("value") or ""),
                             str(t.get("effect") or "NoSchedule")))
    return tuple(out)


def node_spec(state: NodeState, now: float, grace: float) -> NodeSpec:
    """The scheduling core's view of the node: allocatable, labels, condition taints, cordon."""
    report = state.report or {}
    cond = conditions_of(report)
    labels = dict((report.get("metadata") or {}).get("labels") or {})
    labels.setdefault(LABEL_HOSTNAME, state.name)
    return NodeSpec(state.name, allocatable_of(report), labels=labels,
                    taints=reported_taints(report), unschedulable=state.unschedulable,
                    ready=is_ready(state, now, grace),
                    memory_pressure=cond.get(NODE_MEMORY_PRESSURE) == "True",
                    disk_pressure=cond.get(NODE_DISK_PRESSURE) == "True",
                    pid_pressure=cond.get(NODE_PID_PRESSURE) == "True")


def node_object(state: NodeState, spec: NodeSpec, now: float, grace: float) -> dict[str, Any]:
    """The Node as the API serves it: the agent's report, our spec (cordon, the taints the
    conditions give), and a Ready condition of Unknown once the agent is silent past the grace."""
    report = state.report or {}
    meta = dict(report.get("metadata") or {})
    meta["name"] = state.name
    annotations = dict(meta.get("annotations") or {})
    if state.url:
        annotations[URL_ANNOTATION] = state.url
    meta["annotations"] = annotations
    meta.setdefault("labels", {LABEL_HOSTNAME: state.name})
    status = dict(report.get("status") or {})
    conditions = [dict(c) for c in status.get("conditions") or []]
    if state.heard_at is None or now - state.heard_at > grace:
        message = NEVER_POSTED if state.heard_at is None else NOT_POSTING
        conditions = [c for c in conditions if c.get("type") != "Ready"]
        for c in conditions:
            c.update(status="Unknown", reason="NodeStatusUnknown", message=message)
        ready: dict[str, Any] = {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                                 "message": message}
        if state.heard_wall is not None:
            ready["lastHeartbeatTime"] = rfc3339(state.heard_wall)
            ready["lastTransitionTime"] = rfc3339(state.heard_wall + grace)
        conditions.append(ready)
    status["conditions"] = conditions
    out_spec: dict[str, Any] = {}
    if state.unschedulable:
        out_spec["unschedulable"] = True
    taints = [{"key": t.key, "effect": t.effect, **({"value": t.value} if t.value else {})}
              for t in spec.effective_taints()]
    if taints:
        out_spec["taints"] = taints
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta, "spec": out_spec, "status": status}


def check_report(name: str, body: Any) -> dict[str, Any]:
    """A Node status report from an agent, checked enough to be used; ValidationErrors if not."""
    errs: list[FieldError] = []
    if not isinstance(body, dict):
        raise ValidationErrors([FieldError("", "the body must be a Node object")])
    if body.get("kind") != "Node":
        errs.append(FieldError("kind", f"Unsupported value: {body.get('kind')!r}: supported values: 'Node'"))
    meta = _v if isinstance(_v := body.get("metadata"), dict) else {}
    if meta.get("name") != name:
        errs.append(FieldError("metadata.name", invalid(meta.get("name"),
                                                        f"must match the name in the URL ({name})")))
    errs += [FieldError("metadata.name", invalid(name, e)) for e in dns1123_subdomain_errors(name)]
    status = body.get("status")
    if not isinstance(status, dict):
        errs.append(FieldError("status", "Required value"))
    else:
        alloc = status.get("allocatable")
        if not isinstance(alloc, dict):
            errs.append(FieldError("status.allocatable", "Required value"))
        else:
            for k, v in alloc.items():
                try:
                    coerce_quantity(v)
                except ValueError as e:
                    errs.append(FieldError(f"status.allocatable.{k}", invalid(v, str(e))))
        if not isinstance(status.get("conditions", []), list):
            errs.append(FieldError("status.conditions", "must be a list"))
    url = ann.get(URL_ANNOTATION) if isinstance(ann := meta.get("annotations"), dict) else None
    if url is not None and (not isinstance(url, str) or not url.startswith(("http://", "https://"))):
        errs.append(FieldError(f"metadata.annotations[{URL_ANNOTATION}]", invalid(url, "must be an http(s) URL")))
    if errs:
        raise ValidationErrors(errs)
    return body


def node_spec_of(node: Mapping[str, Any]) -> NodeSpec:
    """The scheduling core's view of a Node object as the API stores it (the new control plane):
    status.allocatable (capacity when absent), labels, spec.taints, spec.unschedulable; a Ready
    condition of False or Unknown and the pressure conditions fold into taints as the node
    lifecycle controller would put them (no Ready condition yet: Ready, as a node just created by
    hand or by a test). Quantities that do not parse are left out (the Node strategy refuses them)."""
    meta, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
    name = str(meta.get("name") or "")
    raw = status.get("allocatable") or status.get("capacity") or {}
    alloc: dict[str, Quantity] = {}
    for k, v in raw.items() if isinstance(raw, Mapping) else ():
        try:
            alloc[str(k)] = coerce_quantity(v)
        except (ValueError, TypeError):
            continue
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    labels.setdefault(LABEL_HOSTNAME, name)
    taints = tuple(Taint(str(t["key"]), str(t.get("value") or ""), str(t.get("effect") or "NoSchedule"))
                   for t in spec.get("taints") or () if isinstance(t, Mapping) and t.get("key"))
    cond = conditions_of(node)
    return NodeSpec(name, alloc, labels=labels, taints=taints, unschedulable=bool(spec.get("unschedulable")),
                    ready=cond.get("Ready", "True") == "True",
                    memory_pressure=cond.get(NODE_MEMORY_PRESSURE) == "True",
                    disk_pressure=cond.get(NODE_DISK_PRESSURE) == "True",
                    pid_pressure=cond.get(NODE_PID_PRESSURE) == "True")
