"""`pods/binding`: a scheduler's decision written onto the pod (kube's BindingREST.Create).

The pod is updated through a compare-and-swap on its revision, so two binders can never both
win: the second finds spec.nodeName set and gets 409 Conflict `Operation cannot be fulfilled on
pods/binding "x": pod x is already assigned to node "n"` (a pod being deleted: `pod x is being
deleted, cannot be assigned to a host`). The binding sets spec.nodeName, PodScheduled=True and
copies the Binding's annotations, as upstream's assignPod does. As upstream (BindingREST writes the
pod through the storage's GuaranteedUpdate, not the update handler), the write leaves the pod's
metadata.managedFields as they are: no entry for the binder (PodStrategy.unmanaged_subresources).
"""

from __future__ import annotations

from typing import Any

from nodeagent.cluster.registry import errors
from nodeagent.cluster.registry.options import Context
from nodeagent.cluster.registry.store import GenericStore
from nodeagent.cluster.registry.strategy import Obj
from nodeagent.core.errors import FieldError
from nodeagent.core.names import dns1123_subdomain_errors, invalid
from nodeagent.core.timefmt import rfc3339
from nodeagent.core.wellknown import POD_SCHEDULED


def parse_binding(body: Any, name: str) -> tuple[str, str | None, dict[str, str]]:
    """(target node, uid precondition, annotations) of a Binding body; 400/422 as kube-apiserver."""
    if not isinstance(body, dict):
        raise errors.bad_request("the body of the request must be a Binding object")
    if body.get("kind") not in (None, "", "Binding") or body.get("apiVersion") not in (None, "", "v1"):
        raise errors.bad_request(f"the kind in the data ({body.get('kind')}) does not match the expected kind "
                                 "(Binding)")
    meta: dict[str, Any] = body["metadata"] if isinstance(body.get("metadata"), dict) else {}
    given = meta.get("name")
    if given and given != name:
        raise errors.bad_request(f"the name of the object ({given}) does not match the name on the URL ({name})")
    target = body.get("target")
    errs: list[FieldError] = []
    node = target.get("name") if isinstance(target, dict) else None
    if not isinstance(target, dict):
        errs.append(FieldError("target", "Required value"))
    elif target.get("kind") not in (None, "", "Node"):
        errs.append(FieldError("target.kind", f"Not supported: {target.get('kind')!r}: must be empty or 'Node'"))
    if isinstance(target, dict) and (not isinstance(node, str) or not node):
        errs.append(FieldError("target.name", "Required value"))
    elif isinstance(node, str):
        errs += [FieldError("target.name", invalid(node, e)) for e in dns1123_subdomain_errors(node)]
    annotations = meta.get("annotations") or {}
    if not isinstance(annotations, dict) or not all(isinstance(v, str) for v in annotations.values()):
        errs.append(FieldError("metadata.annotations", "Invalid value: must be a map of strings"))
    if errs:
        raise errors.invalid("Binding", "", name, errs)
    uid = meta.get("uid")
    return str(node), str(uid) if uid else None, dict(annotations)


async def bind(pods: GenericStore, namespace: str, name: str, body: Any, ctx: Context) -> Obj:
    """Bind the pod to the Binding's target node; the pod as written."""
    node, uid, annotations = parse_binding(body, name)

    def assign(old: Obj) -> Obj:
        meta, spec = old["metadata"], old.get("spec") or {}
        if uid is not None and meta.get("uid") != uid:
            raise errors.conflict("pods", "", name, f"Precondition failed: UID in precondition: {uid}, UID in "
                                                    f"object meta: {meta.get('uid')}")
        if meta.get("deletionTimestamp"):
            raise errors.conflict("pods/binding", "", name,
                                  f"pod {name} is being deleted, cannot be assigned to a host")
        if spec.get("nodeName"):
            raise errors.conflict("pods/binding", "", name,
                                  f'pod {name} is already assigned to node "{spec["nodeName"]}"')
        # copies of the parts it changes only: `old` is this write's own decode, nothing else holds it
        new = {**old, "metadata": dict(meta), "spec": {**spec, "nodeName": node}}
        if annotations:
            new["metadata"]["annotations"] = {**(meta.get("annotations") or {}), **annotations}
        status = dict(old.get("status") or {})
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != POD_SCHEDULED]
        conditions.append({"type": POD_SCHEDULED, "status": "True", "lastProbeTime": None,
                           "lastTransitionTime": rfc3339(pods.clock.wall())})
        status["conditions"] = conditions
        new["status"] = status
        return new

    return await pods.guaranteed_update(namespace, name, assign, ctx, subresource="binding")
