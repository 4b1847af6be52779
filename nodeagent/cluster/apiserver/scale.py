"""`.../<resource>/<name>/scale`: an autoscaling/v1 Scale over a workload's spec.replicas.

What kube-apiserver's ScaleREST does for deployments, replicasets and statefulsets: GET builds the
Scale from the object (spec.replicas, status.replicas, the selector as a string); PUT and PATCH
(JSON, merge and strategic merge patches apply to the Scale, not to the object) change
spec.replicas only, through a compare-and-swap, so `kubectl scale` and autoscalers never overwrite
a concurrent spec change. A resourceVersion in the Scale is a precondition (409 when stale).
"""

from __future__ import annotations

import copy
from typing import Any

from aiohttp import web

from nodeagent.cluster.apiserver.encoding import json_response
from nodeagent.cluster.apiserver.negotiation import choose_output
from nodeagent.cluster.apiserver.requestinfo import RequestInfo
from nodeagent.cluster.apiserver.resources import include_object, read_body, request_context
from nodeagent.cluster.registry import errors
from nodeagent.cluster.registry.catalog import ResourceInfo
from nodeagent.cluster.registry.kinds.workloads import MAX_INT32, is_int, selector_string
from nodeagent.cluster.registry.options import Context
from nodeagent.cluster.registry.plugins import PATCH_CONTENT_TYPES, ApplyConflict, PatchError
from nodeagent.cluster.registry.store import GenericStore
from nodeagent.cluster.registry.strategy import Obj
from nodeagent.cluster.registry.table import AGE, Column, IncludeObject, age, row, table
from nodeagent.core.errors import FieldError
from nodeagent.core.names import invalid

SCALE_INFO = ResourceInfo("autoscaling", "v1", "Scale", "scale", "scale", True)  # the patcher's schema lookup
SCALE_PATCHES = ("json", "merge", "strategic")
SCALE_COLUMNS = (Column("Name", description="Name must be unique within a namespace."),
                 Column("Desired", type="integer", description="replicas is the desired number of instances for the "
                                                               "scaled object."),
                 Column("Available", type="integer", description="replicas is the actual number of observed instances "
                                                                 "of the scaled object."), AGE)


def manager_or_user_agent(ctx: Context, request: web.Request) -> None:
    """managerOrUserAgent: without ?fieldManager the writer is named by its User-Agent's prefix
    (`kubectl` for kubectl scale), printable characters only, at most 128."""
    if not ctx.field_manager:
        prefix = request.headers.get("User-Agent", "").split("/", 1)[0]
        ctx.field_manager = "".join(c for c in prefix if c.isprintable())[:128]


def to_scale(obj: Obj) -> Obj:
    """scaleFromDeployment & co: the object's identity, desired and observed replicas, selector."""
    meta, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
    replicas, observed = spec.get("replicas"), status.get("replicas")
    out_status: dict[str, Any] = {"replicas": observed if is_int(observed) else 0}
    if selector := selector_string(spec.get("selector")):
        out_status["selector"] = selector
    return {"kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                         if k in meta},
            "spec": {"replicas": replicas if is_int(replicas) else 0}, "status": out_status}


def scale_table(scale: Obj, now_wall: float, include: IncludeObject, version: str = "v1") -> Obj:
    """printScale: NAME DESIRED AVAILABLE AGE."""
    cells = [scale["metadata"]["name"], scale["spec"]["replicas"], scale["status"]["replicas"], age(scale, now_wall)]
    out = table(SCALE_COLUMNS, [row(scale, cells, include)], scale["metadata"].get("resourceVersion", ""))
    if version != "v1":
        out["apiVersion"] = f"meta.k8s.io/{version}"
    return out


def parse_scale(body: Any, name: str) -> tuple[int, str]:
    """(spec.replicas, resourceVersion precondition or "") of a Scale body; 400/422 as kube-apiserver."""
    if not isinstance(body, dict):
        raise errors.bad_request("the body of the request must be a Scale object")
    if body.get("kind") not in (None, "", "Scale") or body.get("apiVersion") not in (None, "", "autoscaling/v1"):
        raise errors.bad_request(f"the kind in the data ({str(body.get('kind'))[:40]}) does not match the expected "
                                 "kind (Scale)")
    meta = body.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    given = meta.get("name")
    if given and given != name:
        raise errors.bad_request(f"the name of the object ({str(given)[:60]}) does not match the name on the URL "
                                 f"({name})")
    spec = body.get("spec")
    replicas = spec.get("replicas", 0) if isinstance(spec, dict) else 0
    if spec is not None and not isinstance(spec, dict):
        raise errors.invalid("Scale", "autoscaling", name, [FieldError("spec", invalid(str(spec)[:60],
                                                                                       "must be an object"))])
    if not is_int(replicas) or not 0 <= replicas <= MAX_INT32:
        message = "must be greater than or equal to 0" if is_int(replicas) and replicas < 0 else \
            "must be a 32-bit integer"
        raise errors.invalid("Scale", "autoscaling", name,
                             [FieldError("spec.replicas", invalid(str(replicas)[:60], message))])
    rv = meta.get("resourceVersion")
    return int(replicas), rv if isinstance(rv, str) else ""


def _with_replicas(gs: GenericStore, old: Obj, replicas: int, precondition: str) -> Obj:
    name = old["metadata"]["name"]
    if precondition and precondition != old["metadata"].get("resourceVersion"):
        raise errors.stale(gs.info.plural, gs.info.group, name)
    new = copy.deepcopy(old)
    if not isinstance(new.get("spec"), dict):
        new["spec"] = {}
    new["spec"]["replicas"] = replicas
    return new


async def scale_handler(request: web.Request, gs: GenericStore, ri: RequestInfo, _: Context) -> web.Response:
    namespace = ri.namespace or None
    if ri.verb == "get":
        scale = to_scale(await gs.get(namespace, ri.name, request.query.get("resourceVersion", "")))
        output = choose_output(request.headers.get("Accept"))
        if output.table:  # kubectl get <kind> <name> --subresource=scale
            return json_response(scale_table(scale, gs.clock.wall(), include_object(request.query, output),
                                             output.table_version))
        return json_response(scale)
    if ri.verb == "update":
        ctx = request_context(request, "UpdateOptions")
        manager_or_user_agent(ctx, request)
        replicas, rv = parse_scale((await read_body(request)).value, ri.name)
        obj = await gs.guaranteed_update(namespace, ri.name, lambda old: _with_replicas(gs, old, replicas, rv), ctx,
                                         subresource="scale")
        return json_response(to_scale(obj), 200, ctx.warnings)
    if ri.verb == "patch":
        return await _patch(request, gs, ri, namespace)
    raise errors.StatusError(405, "MethodNotAllowed", "the server does not allow this method on the requested "
                                                      "resource")


async def _patch(request: web.Request, gs: GenericStore, ri: RequestInfo, namespace: str | None) -> web.Response:
    ctype = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
    patch_type = PATCH_CONTENT_TYPES.get(ctype)
    patcher = gs.plugins.patcher
    if patch_type not in SCALE_PATCHES or patcher is None:
        raise errors.unsupported_media_type(ctype, [t for t, p in PATCH_CONTENT_TYPES.items() if p in SCALE_PATCHES])
    ctx = request_context(request, "PatchOptions")
    manager_or_user_agent(ctx, request)
    patch = (await read_body(request, media="json")).value

    def mutate(old: Obj) -> Obj:
        try:
            patched = patcher.patch(patch_type, to_scale(old), patch, SCALE_INFO, field_manager=ctx.field_manager,
                                    force=False, subresource="scale")
        except ApplyConflict as e:  # not raised by the patch types served here; kept total
            raise errors.StatusError(409, "Conflict", str(e)) from None
        except PatchError as e:
            if e.malformed:
                raise errors.bad_request(str(e)) from None
            raise errors.invalid("Scale", "autoscaling", ri.name, [FieldError("", str(e))]) from None
        replicas, rv = parse_scale(patched, ri.name)
        return _with_replicas(gs, old, replicas, rv)

    obj = await gs.guaranteed_update(namespace, ri.name, mutate, ctx, subresource="scale")
    return json_response(to_scale(obj), 200, ctx.warnings)
