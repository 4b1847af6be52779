"""POST `.../pods/<name>/eviction`: the HTTP side of registry/eviction.py (201 + Status Success, or
the Status the eviction answered with its code: 429 while a budget forbids it, 500 for two budgets)."""

from __future__ import annotations

from aiohttp import web

from nodeagent.cluster.apiserver.encoding import json_response
from nodeagent.cluster.apiserver.requestinfo import RequestInfo
from nodeagent.cluster.apiserver.resources import ApiSettings, read_body
from nodeagent.cluster.registry import errors
from nodeagent.cluster.registry.catalog import Subresource
from nodeagent.cluster.registry.eviction import evict
from nodeagent.cluster.registry.kinds.disruption import PodDisruptionBudgetStrategy
from nodeagent.cluster.registry.kinds.pods import PodStrategy
from nodeagent.cluster.registry.options import Context
from nodeagent.cluster.registry.registry import Registry
from nodeagent.cluster.registry.store import GenericStore


def add_eviction(registry: Registry, settings: ApiSettings) -> None:
    """Serve pods/eviction (policy/v1 Eviction in discovery, POST only: what `kubectl drain` looks for)."""
    info = PodDisruptionBudgetStrategy.info
    pdbs = registry.resource(info.group, info.version, info.plural)

    async def handler(request: web.Request, pods: GenericStore, ri: RequestInfo, ctx: Context) -> web.Response:
        if ri.verb != "create":
            raise errors.StatusError(405, "MethodNotAllowed", "the server does not allow this method on the "
                                                              "requested resource")
        body = await read_body(request)
        status = await evict(pods, pdbs, ri.namespace, ri.name, body.value, ctx)
        return json_response(status, int(status.get("code") or 201), ctx.warnings)

    registry.catalog.add_subresource(PodStrategy.info, Subresource("eviction", "Eviction", ("create",), "policy", "v1"))
    settings.add_subresource("", "pods", "eviction", handler)
