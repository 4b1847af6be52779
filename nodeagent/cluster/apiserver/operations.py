"""What the cluster API does to objects: admission (namespace, priority, quota), create, delete.

Errors are ApiError with the API server's code, reason and wording, e.g.
403 `pods "web" is forbidden: exceeded quota: compute, requested: ..., used: ..., limited: ...`.
Each operation changes memory synchronously (so two requests cannot both pass a quota check that
only one fits), then awaits its store write before the handler answers.
"""

from __future__ import annotations

import asyncio
import copy
import secrets
import uuid
from typing import Any

from nodeagent.cluster.admission.priority import SYSTEM_PRIORITY_CLASSES, parse_priority_class
from nodeagent.cluster.admission.quota import check, parse_resource_quota
from nodeagent.cluster.apiserver.backend import ClusterBackend
from nodeagent.cluster.controllers.common.hashing import NAME_ALPHABET
from nodeagent.cluster.objects import SYSTEM_NAMESPACES, PodRecord, namespace_object, new_pod, parse_namespace
from nodeagent.core.errors import FieldError, ValidationErrors
from nodeagent.core.timefmt import rfc3339
from nodeagent.daemonkit.status import StatusError, invalid, status_body

PRIORITY_GROUP = "priorityclasses.scheduling.k8s.io"


class ApiError(StatusError):
    """An API failure of the scheduler's API: a Status whose details carry `kind` also without a name."""

    def __init__(self, code: int, message: str, reason: str, kind: str = "", name: str = "",
                 causes: list[dict[str, str]] | None = None) -> None:
        super().__init__(code, message, reason, causes or [], name or None, kind)
        self.name: str | None = name

    def body(self) -> dict[str, Any]:
        body = status_body(self.code, self.message, self.reason, self.causes, self.name or None, self.kind)
        if self.kind and not self.name:
            body["details"] = {**body.get("details", {}), "kind": self.kind}
        return body


def not_found(kind: str, name: str) -> ApiError:
    return ApiError(404, f'{kind} "{name}" not found', "NotFound", kind, name)


def forbidden(kind: str, name: str, why: str) -> ApiError:
    return ApiError(403, f'{kind} "{name}" is forbidden: {why}', "Forbidden", kind, name)


def invalid_object(kind_title: str, kind: str, name: str, errors: list[FieldError]) -> ApiError:
    status = invalid(kind_title, name, errors, kind=kind)
    return ApiError(status.code, status.message, status.reason, kind, name, status.causes)


def _errors(e: ValueError) -> list[FieldError]:
    if isinstance(e, ValidationErrors):
        return list(e.errors)
    if isinstance(e, FieldError):
        return [e]
    return [FieldError("", str(e))]


class Operations:
    def __init__(self, service: ClusterBackend) -> None:
        self.svc = service
        self.state = service.state

    # ---- namespaces --------------------------------------------------------------------------
    def namespace(self, name: str) -> dict[str, Any]:
        obj = self.state.namespaces.get(name)
        if obj is None:
            raise not_found("namespaces", name)
        return obj

    async def create_namespace(self, body: Any) -> dict[str, Any]:
        try:
            name, labels = parse_namespace(body)
            obj = namespace_object(name, self.svc.clock.wall(), labels)
        except ValueError as e:
            raise invalid_object("Namespace", "namespaces", _name_of(body), _errors(e)) from None
        if name in self.state.namespaces:
            raise ApiError(409, f'namespaces "{name}" already exists', "AlreadyExists", "namespaces", name)
        self.state.namespaces[name] = obj
        await self.svc.store.put("namespaces", name, obj)
        return obj

    async def delete_namespace(self, name: str) -> dict[str, Any]:
        obj = self.namespace(name)
        if name in SYSTEM_NAMESPACES:
            raise forbidden("namespaces", name, "this namespace may not be deleted")
        if obj["status"].get("phase") == "Terminating":
            return obj
        obj["status"] = {"phase": "Terminating"}
        obj["metadata"]["deletionTimestamp"] = rfc3339(self.svc.clock.wall())
        writes = [self.svc.store.put("namespaces", name, obj)]
        for rec in [r for r in self.state.pods.values() if r.pod.metadata.namespace == name]:
            writes.append(self.svc.binder.delete(rec, None))
        for key, _quota in self.state.quotas_in(name):
            writes.append(self.state.remove_quota(key))
        await asyncio.gather(*writes)
        return obj

    def _active_namespace(self, ns: str, kind: str, name: str) -> None:
        obj = self.state.namespaces.get(ns)
        if obj is None:
            raise not_found("namespaces", ns)
        if obj["status"].get("phase") == "Terminating":
            raise forbidden(kind, name, f"unable to create new content in namespace {ns} because "
                                        "it is being terminated")

    # ---- pods --------------------------------------------------------------------------------
    def pod(self, ns: str, name: str) -> PodRecord:
        rec = self.state.pods.get(f"{ns}/{name}")
        if rec is None:
            raise not_found("pods", name)
        return rec

    async def create_pod(self, ns: str, body: dict[str, Any]) -> dict[str, Any]:
        meta = body.get("metadata")
        if not isinstance(meta, dict):
            raise invalid_object("Pod", "pods", "", [FieldError("metadata", "Required value")])
        body_ns = meta.get("namespace")
        if body_ns not in (None, "", ns):
            raise ApiError(400, f"the namespace of the provided object ({body_ns}) does not match "
                                f"the namespace sent on the request ({ns})", "BadRequest")
        name = meta.get("name") or ""
        if not name and isinstance(meta.get("generateName"), str) and meta["generateName"]:
            name = meta["generateName"] + "".join(secrets.choice(NAME_ALPHABET) for _ in range(5))
        self._active_namespace(ns, "pods", str(name))
        spec = _v if isinstance(_v := body.get("spec"), dict) else {}
        try:
            resolved = self.state.priority.resolve(spec.get("priorityClassName"))
        except FieldError as e:
            raise forbidden("pods", str(name), e.message.removeprefix("Forbidden: ")) from None
        if "priority" in spec and spec["priority"] != resolved.value:
            raise forbidden("pods", str(name), f"the integer value of priority ({spec['priority']}) "
                            "must not be provided in pod spec; priority admission controller "
                            f"computed {resolved.value} from the given PriorityClass name")
        if spec.get("nodeName"):  # binding is the scheduler's job (and its agent's admission)
            raise invalid_object("Pod", "pods", str(name), [FieldError(
                "spec.nodeName", "Forbidden: set by the scheduler; to pin a pod to a node use "
                "nodeSelector {kubernetes.io/hostname: <node>}")])
        manifest = {**body, "metadata": {**meta, "name": name, "namespace": ns}}
        try:
            rec = new_pod(manifest, priority=resolved.value, class_name=resolved.class_name,
                          preemption_policy=resolved.preemption_policy, now_wall=self.svc.clock.wall())
        except ValueError as e:
            raise invalid_object("Pod", "pods", str(name), _errors(e)) from None
        if rec.key in self.state.pods:
            raise ApiError(409, f'pods "{name}" already exists', "AlreadyExists", "pods", str(name))
        for key, quota in self.state.quotas_in(ns):
            refused = check(quota, self.state.quota_used[key], rec.pod)
            if refused is not None:
                raise forbidden("pods", str(name), refused.message)
        written = self.state.add_pod(rec)
        created = copy.deepcopy(rec.obj)  # the answer is the pod as created, not as it is by then
        self.svc.binder.enqueue(rec)
        await written
        return created

    async def delete_pod(self, ns: str, name: str, grace: int | None) -> dict[str, Any]:
        rec = self.pod(ns, name)
        written = self.svc.binder.delete(rec, grace)
        deleted = copy.deepcopy(rec.obj)
        await written
        return deleted

    # ---- priority classes --------------------------------------------------------------------
    def priority_classes(self) -> list[dict[str, Any]]:
        return [self.priority_class(pc.name) for pc in self.state.priority]

    def priority_class(self, name: str) -> dict[str, Any]:
        stored = self.state.priority_objects.get(name)
        if stored is not None:
            return stored
        pc = self.state.priority.get(name)
        if pc is None:
            raise not_found(PRIORITY_GROUP, name)
        return pc.to_dict()

    async def create_priority_class(self, body: Any) -> dict[str, Any]:
        name = _name_of(body)
        try:
            pc = parse_priority_class(body)
        except ValueError as e:
            raise invalid_object("PriorityClass.scheduling.k8s.io", PRIORITY_GROUP, name, _errors(e)) from None
        if self.state.priority.get(pc.name) is not None:
            raise ApiError(409, f'{PRIORITY_GROUP} "{pc.name}" already exists', "AlreadyExists",
                           PRIORITY_GROUP, pc.name)
        try:
            self.state.priority.add(pc)
        except FieldError as e:
            raise forbidden(PRIORITY_GROUP, pc.name, e.message.removeprefix("Forbidden: ")) from None
        obj = pc.to_dict()
        obj["metadata"].update(uid=_uid(), creationTimestamp=rfc3339(self.svc.clock.wall()))
        self.state.priority_objects[pc.name] = obj
        await self.svc.store.put("priorityclasses", pc.name, obj)
        return obj

    async def delete_priority_class(self, name: str) -> dict[str, Any]:
        obj = self.priority_class(name)
        if name in SYSTEM_PRIORITY_CLASSES:
            raise forbidden(PRIORITY_GROUP, name, f"{name} is a system priority class and may not be deleted")
        self.state.priority.remove(name)
        self.state.priority_objects.pop(name, None)
        await self.svc.store.delete("priorityclasses", name)
        return obj

    # ---- resource quotas ---------------------------------------------------------------------
    def quota(self, ns: str, name: str) -> dict[str, Any]:
        key = f"{ns}/{name}"
        obj = self.state.quota_objects.get(key)
        if obj is None:
            raise not_found("resourcequotas", name)
        return self.quota_view(key)

    def quota_view(self, key: str) -> dict[str, Any]:
        """The stored quota with status.hard and a current status.used."""
        obj = self.state.quota_objects[key]
        quota = self.state.quotas[key]
        used = self.state.quota_used[key]
        return {**obj, "status": {"hard": {k: str(v) for k, v in quota.hard.items()},
                                  "used": {k: str(used[k]) for k in quota.hard}}}

    def quotas(self, ns: str | None) -> list[dict[str, Any]]:
        return [self.quota_view(k) for k, q in sorted(self.state.quotas.items())
                if ns is None or q.namespace == ns]

    async def create_quota(self, ns: str, body: Any, replace: str | None = None) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise ApiError(400, "the body must be a ResourceQuota object", "BadRequest")
        meta = _v if isinstance(_v := body.get("metadata"), dict) else {}
        if meta.get("namespace") not in (None, "", ns):
            raise ApiError(400, f"the namespace of the provided object ({meta.get('namespace')}) "
                                f"does not match the namespace sent on the request ({ns})", "BadRequest")
        name = str(meta.get("name") or "")
        self._active_namespace(ns, "resourcequotas", name)
        if replace is not None and replace != name:
            raise ApiError(400, f"the name of the object ({name}) does not match the name on the URL "
                                f"({replace})", "BadRequest")
        bare_meta: dict[str, Any] = {"name": name, "namespace": ns}
        bare = {"apiVersion": body.get("apiVersion"), "kind": body.get("kind"),
                "metadata": bare_meta, "spec": body.get("spec") or {}}
        try:
            quota = parse_resource_quota(bare)
        except ValueError as e:
            raise invalid_object("ResourceQuota", "resourcequotas", name, _errors(e)) from None
        key = f"{ns}/{name}"
        old = self.state.quota_objects.get(key)
        if replace is None and old is not None:
            raise ApiError(409, f'resourcequotas "{name}" already exists', "AlreadyExists",
                           "resourcequotas", name)
        if replace is not None and old is None:
            raise not_found("resourcequotas", name)
        obj: dict[str, Any] = {**bare, "metadata": {**bare_meta,
                                    "uid": old["metadata"]["uid"] if old else _uid(),
                                    "creationTimestamp": old["metadata"]["creationTimestamp"] if old
                                    else rfc3339(self.svc.clock.wall())}}
        for k in ("labels", "annotations"):
            if isinstance(meta.get(k), dict):
                obj["metadata"][k] = meta[k]
        await self.state.add_quota(key, quota, obj)
        return self.quota_view(key)

    async def delete_quota(self, ns: str, name: str) -> dict[str, Any]:
        obj = self.quota(ns, name)
        await self.state.remove_quota(f"{ns}/{name}")
        return obj


def _name_of(body: Any) -> str:
    meta = body.get("metadata") if isinstance(body, dict) else None
    return str(meta.get("name") or "") if isinstance(meta, dict) else ""


def _uid() -> str:
    return str(uuid.uuid4())
