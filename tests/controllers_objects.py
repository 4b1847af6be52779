"""Builders of plain-dict API objects for the controller decision tests (shaped like the JSON the
API server stores), and a fixed epoch the tests count from."""

from __future__ import annotations

import itertools
from typing import Any

from nodeagent.core.timefmt import rfc3339

NOW = 1_700_000_000.0  # the tests' "now": whole seconds, like metav1.Time
_uids = itertools.count(1)


def ts(t: float | None) -> str | None:
    return None if t is None else rfc3339(t)


def new_uid(prefix: str = "uid") -> str:
    return f"{prefix}-{next(_uids):06d}"


def meta(name: str, namespace: str | None = "default", *, uid: str | None = None, labels: dict[str, str] | None = None,
         annotations: dict[str, str] | None = None, created: float | None = NOW - 3600, owners: list[dict[str, Any]] | None = None,
         deleting: float | None = None, finalizers: list[str] | None = None, generation: int | None = None) -> dict[str, Any]:
    m: dict[str, Any] = {"name": name, "uid": uid if uid is not None else new_uid(name)}
    if namespace:
        m["namespace"] = namespace
    if labels:
        m["labels"] = labels
    if annotations:
        m["annotations"] = annotations
    if created is not None:
        m["creationTimestamp"] = ts(created)
    if owners:
        m["ownerReferences"] = owners
    if deleting is not None:
        m["deletionTimestamp"] = ts(deleting)
    if finalizers:
        m["finalizers"] = finalizers
    if generation is not None:
        m["generation"] = generation
    return m


def owner_ref(obj: dict[str, Any], *, controller: bool = True, block: bool = True) -> dict[str, Any]:
    r = {"apiVersion": obj.get("apiVersion", "v1"), "kind": obj["kind"], "name": obj["metadata"]["name"], "uid": obj["metadata"]["uid"]}
    if controller:
        r["controller"] = True
    if block:
        r["blockOwnerDeletion"] = True
    return r


def pod(name: str, *, node: str = "node-a", phase: str = "Running", ready: bool = True, ready_since: float | None = NOW - 600,
        restarts: int = 0, labels: dict[str, str] | None = None, owner: dict[str, Any] | None = None, namespace: str = "default",
        created: float | None = NOW - 3600, annotations: dict[str, str] | None = None, uid: str | None = None,
        deleting: float | None = None, finalizers: list[str] | None = None, conditions: list[dict[str, Any]] | None = None,
        container_statuses: list[dict[str, Any]] | None = None, tolerations: list[dict[str, Any]] | None = None,
        spec: dict[str, Any] | None = None) -> dict[str, Any]:
    conds = list(conditions or [])
    if phase in ("Running", "Pending", "Unknown") and not any(c["type"] == "Ready" for c in conds):
        conds.append({"type": "Ready", "status": "True" if ready else "False",
                      **({"lastTransitionTime": ts(ready_since)} if ready_since is not None else {})})
    cs = container_statuses if container_statuses is not None else [{"name": "c", "restartCount": restarts}]
    sp: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox"}], **(spec or {})}
    if node:
        sp["nodeName"] = node
    if tolerations:
        sp["tolerations"] = tolerations
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": meta(name, namespace, uid=uid, labels=labels if labels is not None else {"app": "web"}, annotations=annotations,
                             created=created, owners=[owner_ref(owner)] if owner else None, deleting=deleting, finalizers=finalizers),
            "spec": sp, "status": {"phase": phase, "conditions": conds, "containerStatuses": cs}}


def template(labels: dict[str, str] | None = None, image: str = "busybox", **spec: Any) -> dict[str, Any]:
    return {"metadata": {"labels": labels or {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": image}], **spec}}


def replicaset(name: str = "web", replicas: int = 3, *, labels: dict[str, str] | None = None, min_ready: int = 0,
               owner: dict[str, Any] | None = None, generation: int = 1, status: dict[str, Any] | None = None,
               annotations: dict[str, str] | None = None, created: float = NOW - 7200, tmpl: dict[str, Any] | None = None,
               deleting: float | None = None, uid: str | None = None) -> dict[str, Any]:
    lbls = labels or {"app": "web"}
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": meta(name, labels=lbls, annotations=annotations, created=created, generation=generation,
                             owners=[owner_ref(owner)] if owner else None, deleting=deleting, uid=uid),
            "spec": {"replicas": replicas, "minReadySeconds": min_ready, "selector": {"matchLabels": lbls},
                     "template": tmpl or template(lbls)},
            "status": status or {}}


def node(name: str, *, ready: str | None = "True", labels: dict[str, str] | None = None, taints: list[dict[str, Any]] | None = None,
         heartbeat: float | None = NOW, created: float = NOW - 86400, unschedulable: bool = False,
         conditions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    conds = list(conditions or [])
    if ready is not None:
        conds.insert(0, {"type": "Ready", "status": ready, "reason": "KubeletReady", "lastHeartbeatTime": ts(heartbeat),
                         "lastTransitionTime": ts(created)})
    sp: dict[str, Any] = {}
    if taints:
        sp["taints"] = taints
    if unschedulable:
        sp["unschedulable"] = True
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": meta(name, None, labels={"kubernetes.io/hostname": name, **(labels or {})}, created=created),
            "spec": sp, "status": {"conditions": conds}}
