"""The cluster API: Kubernetes API server paths over aiohttp, JSON in and out (YAML accepted in).

    GET              /healthz
    GET/POST         /api/v1/namespaces                     GET/DELETE /api/v1/namespaces/{ns}
    GET              /api/v1/pods                           (every namespace)
    GET/POST         /api/v1/namespaces/{ns}/pods           GET/DELETE .../pods/{name}?gracePeriodSeconds=
    GET              /api/v1/nodes                          GET/PATCH/DELETE /api/v1/nodes/{name}
    POST             /api/v1/nodes/{name}/cordon            POST /api/v1/nodes/{name}/uncordon
    POST/PUT         /api/v1/nodes/{name}/status            (an agent's status report: registration)
    GET/POST         /apis/scheduling.k8s.io/v1/priorityclasses     GET/DELETE .../{name}
    GET              /api/v1/resourcequotas                 (every namespace)
    GET/POST         /api/v1/namespaces/{ns}/resourcequotas  GET/PUT/DELETE .../{name}
    GET              /api/v1/scheduler                      (queue and counters, for operators)

PATCH on a node takes a merge patch and honours `spec.unschedulable` only (cordon/uncordon, as
`kubectl cordon` sends it). Auth is the agent's (nodeagent/api/auth.py): reads from loopback are
open, writes need the bearer token (or `authentication: none`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from nodeagent.cluster.apiserver.backend import ClusterBackend
from nodeagent.cluster.apiserver.operations import ApiError, Operations, invalid_object, not_found
from nodeagent.core.errors import ValidationErrors
from nodeagent.daemonkit.body import decode_body
from nodeagent.daemonkit.status import status_middleware

SERVICE: web.AppKey[ClusterBackend] = web.AppKey("service", ClusterBackend)
OPS: web.AppKey[Operations] = web.AppKey("ops", Operations)


async def _body(request: web.Request) -> Any:
    raw = await request.read()
    try:
        return await asyncio.to_thread(decode_body, raw, request.content_type)
    except ValueError as e:
        raise ApiError(400, str(e), "BadRequest") from None


async def _object(request: web.Request, kind: str) -> dict[str, Any]:
    data = await _body(request)
    if not isinstance(data, dict):
        raise ApiError(400, f"the body must be a {kind} object", "BadRequest")
    return data


def _grace(request: web.Request) -> int | None:
    raw = request.query.get("gracePeriodSeconds")
    if raw is None or raw == "":
        return None
    if not raw.isascii() or not raw.isdigit() or len(raw) > 9:
        raise ApiError(400, f"gracePeriodSeconds must be an integer >= 0, got {raw!r}", "BadRequest")
    return int(raw)


def _list(kind: str, items: list[dict[str, Any]], api_version: str = "v1") -> web.Response:
    return web.json_response({"apiVersion": api_version, "kind": kind, "metadata": {}, "items": items})


def _ops(request: web.Request) -> Operations:
    return request.app[OPS]


def _svc(request: web.Request) -> ClusterBackend:
    return request.app[SERVICE]


async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok")


# ---- namespaces ----
async def list_namespaces(request: web.Request) -> web.Response:
    return _list("NamespaceList", [v for _, v in sorted(_svc(request).state.namespaces.items())])


async def create_namespace(request: web.Request) -> web.Response:
    return web.json_response(await _ops(request).create_namespace(await _body(request)), status=201)


async def get_namespace(request: web.Request) -> web.Response:
    return web.json_response(_ops(request).namespace(request.match_info["ns"]))


async def delete_namespace(request: web.Request) -> web.Response:
    return web.json_response(await _ops(request).delete_namespace(request.match_info["ns"]))


# ---- pods ----
async def list_pods(request: web.Request) -> web.Response:
    ns = request.match_info.get("ns")
    pods = _svc(request).state.pods
    items = [r.obj for k, r in sorted(pods.items()) if ns is None or r.pod.metadata.namespace == ns]
    return _list("PodList", items)


async def create_pod(request: web.Request) -> web.Response:
    body = await _object(request, "Pod")
    return web.json_response(await _ops(request).create_pod(request.match_info["ns"], body), status=201)


async def get_pod(request: web.Request) -> web.Response:
    return web.json_response(_ops(request).pod(request.match_info["ns"], request.match_info["name"]).obj)


async def delete_pod(request: web.Request) -> web.Response:
    m = request.match_info
    return web.json_response(await _ops(request).delete_pod(m["ns"], m["name"], _grace(request)))


# ---- nodes ----
def _node_name(request: web.Request) -> str:
    name = request.match_info["name"]
    if _svc(request).node_state(name) is None:
        raise not_found("nodes", name)
    return name


async def list_nodes(request: web.Request) -> web.Response:
    svc = _svc(request)
    return _list("NodeList", [svc.node_object(n) for n in sorted(svc.state.nodes)])


async def get_node(request: web.Request) -> web.Response:
    return web.json_response(_svc(request).node_object(_node_name(request)))


async def patch_node(request: web.Request) -> web.Response:
    name = _node_name(request)
    patch = await _object(request, "Node patch")
    spec = patch.get("spec")
    unknown = sorted(set(patch) - {"spec", "apiVersion", "kind", "metadata"})
    if unknown or not isinstance(spec, dict) or set(spec) - {"unschedulable"}:
        raise ApiError(422, "only spec.unschedulable can be changed on a node (cordon/uncordon)", "Invalid",
                       "nodes", name)
    value = spec.get("unschedulable")
    if not isinstance(value, bool) and value is not None:
        raise ApiError(422, f"spec.unschedulable: Invalid value: {value!r}: must be a boolean", "Invalid",
                       "nodes", name)
    return web.json_response(await _svc(request).set_unschedulable(name, bool(value)))


async def cordon(request: web.Request) -> web.Response:
    return web.json_response(await _svc(request).set_unschedulable(_node_name(request), True))


async def uncordon(request: web.Request) -> web.Response:
    return web.json_response(await _svc(request).set_unschedulable(_node_name(request), False))


async def delete_node(request: web.Request) -> web.Response:
    name = _node_name(request)
    obj = _svc(request).node_object(name)
    await _svc(request).forget_node(name)
    return web.json_response(obj)


async def node_status(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    body = await _body(request)
    try:
        return web.json_response(await _svc(request).report_node(name, body))
    except ValidationErrors as e:
        raise invalid_object("Node", "nodes", name, e.errors) from None


# ---- priority classes ----
async def list_priority_classes(request: web.Request) -> web.Response:
    return _list("PriorityClassList", _ops(request).priority_classes(), "scheduling.k8s.io/v1")


async def create_priority_class(request: web.Request) -> web.Response:
    return web.json_response(await _ops(request).create_priority_class(await _body(request)), status=201)


async def get_priority_class(request: web.Request) -> web.Response:
    return web.json_response(_ops(request).priority_class(request.match_info["name"]))


async def delete_priority_class(request: web.Request) -> web.Response:
    return web.json_response(await _ops(request).delete_priority_class(request.match_info["name"]))


# ---- resource quotas ----
async def list_quotas(request: web.Request) -> web.Response:
    return _list("ResourceQuotaList", _ops(request).quotas(request.match_info.get("ns")))


async def create_quota(request: web.Request) -> web.Response:
    body = await _body(request)
    return web.json_response(await _ops(request).create_quota(request.match_info["ns"], body), status=201)


async def replace_quota(request: web.Request) -> web.Response:
    m = request.match_info
    return web.json_response(await _ops(request).create_quota(m["ns"], await _body(request), replace=m["name"]))


async def get_quota(request: web.Request) -> web.Response:
    return web.json_response(_ops(request).quota(request.match_info["ns"], request.match_info["name"]))


async def delete_quota(request: web.Request) -> web.Response:
    m = request.match_info
    return web.json_response(await _ops(request).delete_quota(m["ns"], m["name"]))


async def scheduler_info(request: web.Request) -> web.Response:
    svc = _svc(request)
    return web.json_response({"queue": svc.binder.queue.counts(), "counters": svc.binder.counters,
                              "nominations": svc.state.nominations, "pods": len(svc.state.pods),
                              "nodes": len(svc.state.nodes)})


def create_app(service: ClusterBackend, *, auth: bool = True) -> web.Application:
    middlewares = [status_middleware, *([service.auth.middleware] if auth else [])]
    app = web.Application(middlewares=middlewares, client_max_size=service.config.max_request_body_bytes)
    app[SERVICE] = service
    app[OPS] = Operations(service)
    r = app.router
    r.add_get("/healthz", healthz)
    r.add_get("/api/v1/namespaces", list_namespaces)
    r.add_post("/api/v1/namespaces", create_namespace)
    r.add_get("/api/v1/namespaces/{ns}", get_namespace)
    r.add_delete("/api/v1/namespaces/{ns}", delete_namespace)
    r.add_get("/api/v1/pods", list_pods)
    r.add_get("/api/v1/namespaces/{ns}/pods", list_pods)
    r.add_post("/api/v1/namespaces/{ns}/pods", create_pod)
    r.add_get("/api/v1/namespaces/{ns}/pods/{name}", get_pod)
    r.add_delete("/api/v1/namespaces/{ns}/pods/{name}", delete_pod)
    r.add_get("/api/v1/nodes", list_nodes)
    r.add_get("/api/v1/nodes/{name}", get_node)
    r.add_patch("/api/v1/nodes/{name}", patch_node)
    r.add_delete("/api/v1/nodes/{name}", delete_node)
    r.add_post("/api/v1/nodes/{name}/cordon", cordon)
    r.add_post("/api/v1/nodes/{name}/uncordon", uncordon)
    r.add_post("/api/v1/nodes/{name}/status", node_status)
    r.add_put("/api/v1/nodes/{name}/status", node_status)
    pcs = "/apis/scheduling.k8s.io/v1/priorityclasses"
    r.add_get(pcs, list_priority_classes)
    r.add_post(pcs, create_priority_class)
    r.add_get(pcs + "/{name}", get_priority_class)
    r.add_delete(pcs + "/{name}", delete_priority_class)
    r.add_get("/api/v1/resourcequotas", list_quotas)
    r.add_get("/api/v1/namespaces/{ns}/resourcequotas", list_quotas)
    r.add_post("/api/v1/namespaces/{ns}/resourcequotas", create_quota)
    r.add_get("/api/v1/namespaces/{ns}/resourcequotas/{name}", get_quota)
    r.add_put("/api/v1/namespaces/{ns}/resourcequotas/{name}", replace_quota)
    r.add_delete("/api/v1/namespaces/{ns}/resourcequotas/{name}", delete_quota)
    r.add_get("/api/v1/scheduler", scheduler_info)
    return app
