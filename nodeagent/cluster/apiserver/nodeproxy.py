"""`GET /api/v1/nodes/<name>/proxy/<path>`: kube-apiserver's node proxy, to the node's agent API
(`kubectl get --raw /api/v1/nodes/N/proxy/healthz`, `/metrics/resource`, `/stats/summary`, ...).

Authorized as `get` on `nodes/proxy` (RBAC, the request's own attributes); the server dials the
agent with its agent credentials (those of pods/log, podlog.AgentProxy), passes the path and query
through and relays the status, content type and body as they come (streamed). GET only: the
agent's writes have their own API objects, and a proxy that writes would let `nodes/proxy` do what
RBAC on pods forbids.
"""

from __future__ import annotations

import aiohttp
import structlog
from aiohttp import web

from nodeagent.cluster.apiserver.podlog import AgentProxy
from nodeagent.cluster.apiserver.requestinfo import RequestInfo
from nodeagent.cluster.apiserver.resources import ApiSettings
from nodeagent.cluster.autoscaling.metrics.scrape import agent_url
from nodeagent.cluster.registry import errors
from nodeagent.cluster.registry.catalog import Subresource
from nodeagent.cluster.registry.kinds.nodes import NodeStrategy
from nodeagent.cluster.registry.options import Context
from nodeagent.cluster.registry.store import GenericStore

log = structlog.get_logger(__name__)
_RELAYED = ("Content-Type", "Content-Encoding")


def proxied_path(raw_path: str, name: str) -> str:
    """The part of the (still escaped) path after `/nodes/<name>/proxy`, "/" when none."""
    marker = f"/nodes/{name}/proxy"
    i = raw_path.find(marker)
    rest = raw_path[i + len(marker):] if i >= 0 else ""
    return rest if rest.startswith("/") else "/" + rest


def add_node_proxy(settings: ApiSettings, proxy: AgentProxy) -> None:
    """Serve nodes/proxy (GET; in discovery as NodeProxyOptions with the verb it serves)."""
    proxy.registry.catalog.add_subresource(NodeStrategy.info, Subresource("proxy", "NodeProxyOptions", ("get",)))

    async def handler(request: web.Request, nodes: GenericStore, ri: RequestInfo, ctx: Context) -> web.StreamResponse:
        if request.method not in ("GET", "HEAD"):
            raise errors.StatusError(405, "MethodNotAllowed", "the server does not allow this method on the "
                                                              "requested resource")
        node = await nodes.get(None, ri.name)
        base = agent_url(node)
        if base is None:
            raise errors.unavailable(f'no address of node "{ri.name}"\'s agent is known')
        url = base + proxied_path(request.rel_url.raw_path, ri.name)
        query = request.rel_url.raw_query_string
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=proxy.credentials.timeout,
                                        sock_read=proxy.credentials.timeout)
        try:
            upstream = await proxy.session().get(url + (f"?{query}" if query else ""), headers=proxy.headers(url),
                                                 timeout=timeout, allow_redirects=False)
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            log.warning("node_proxy_agent_unreachable", node=ri.name, url=base, error=f"{type(e).__name__}: {e}")
            raise errors.unavailable(f'the agent of node "{ri.name}" cannot be reached: {type(e).__name__}') from None
        async with upstream:
            resp = web.StreamResponse(status=upstream.status,
                                      headers={k: upstream.headers[k] for k in _RELAYED if k in upstream.headers})
            return await proxy.relay_body(request, upstream, resp)

    settings.add_subresource("", "nodes", "proxy", handler)
