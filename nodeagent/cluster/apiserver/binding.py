"""POST `.../pods/<name>/binding`: the HTTP side of registry/binding.py (201 + Status Success)."""

from __future__ import annotations

from aiohttp import web

from nodeagent.cluster.apiserver.encoding import json_response
from nodeagent.cluster.apiserver.requestinfo import RequestInfo
from nodeagent.cluster.apiserver.resources import ApiSettings, read_body
from nodeagent.cluster.registry import errors
from nodeagent.cluster.registry.binding import bind
from nodeagent.cluster.registry.catalog import Subresource
from nodeagent.cluster.registry.kinds.pods import PodStrategy
from nodeagent.cluster.registry.options import Context
from nodeagent.cluster.registry.registry import Registry
from nodeagent.cluster.registry.store import GenericStore


async def binding_handler(request: web.Request, pods: GenericStore, ri: RequestInfo, ctx: Context) -> web.Response:
    if ri.verb != "create":
        raise errors.StatusError(405, "MethodNotAllowed", "the server does not allow this method on the requested "
                                                          "resource")
    body = await read_body(request)
    await bind(pods, ri.namespace, ri.name, body.value, ctx)
    return json_response({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201},
                         201, ctx.warnings)


def add_binding(registry: Registry, settings: ApiSettings) -> None:
    """Serve pods/binding (listed in discovery, POST only)."""
    registry.catalog.add_subresource(PodStrategy.info, Subresource("binding", "Binding", ("create",)))
    settings.add_subresource("", "pods", "binding", binding_handler)
