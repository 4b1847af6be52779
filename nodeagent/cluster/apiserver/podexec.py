"""`.../pods/<name>/exec` and `/attach`: `kubectl exec` and `kubectl attach` through the server,
relayed to the pod's agent over WebSocket.

kubectl 1.37 first asks for a WebSocket upgrade (GET, `Sec-WebSocket-Protocol: v5.channel.k8s.io`,
v4 ...) and falls back to SPDY (POST, `Upgrade: SPDY/3.1`) when the upgrade is refused. The server
checks what it can from the store (the options, the pod, the container by kube-apiserver's rules,
its node; the errors a client must see), then dials the agent's exec endpoint with the server's
agent credentials and the protocol the client chose, accepts the client's upgrade with the same
protocol, and relays the binary messages both ways until either side closes (the agent ends a
session with the exit Status on the error channel, core/remotecommand.py). Whatever the agent
refuses after the upgrade reaches the client on that channel too.

SPDY is not spoken: a POST gets the same checks, so kubectl's fallback shows the real error (a
missing pod, a bad container), and otherwise a 400 saying to use WebSocket.
"""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import quote

import aiohttp
import structlog
from aiohttp import WSMsgType, web

from nodeagent.cluster.apiserver.podlog import AgentProxy, choose_container
from nodeagent.cluster.apiserver.requestinfo import RequestInfo
from nodeagent.cluster.apiserver.resources import ApiSettings
from nodeagent.cluster.autoscaling.metrics.scrape import agent_url
from nodeagent.cluster.registry import errors
from nodeagent.cluster.registry.catalog import Subresource
from nodeagent.cluster.registry.kinds.pods import PodStrategy
from nodeagent.cluster.registry.options import Context
from nodeagent.cluster.registry.store import GenericStore
from nodeagent.core import remotecommand as rc

log = structlog.get_logger(__name__)


async def exec_handler(proxy: AgentProxy, request: web.Request, pods: GenericStore, ri: RequestInfo,
                       ctx: Context, subresource: str = "exec") -> web.StreamResponse:
    """pods/exec, or pods/attach (the same relay to the agent's endpoint of that name, PodAttachOptions:
    no command)."""
    if request.method not in ("GET", "POST"):
        raise errors.StatusError(405, "MethodNotAllowed", "the server does not allow this method on the "
                                                          "requested resource")
    try:
        opts = rc.exec_options(request.query) if subresource == "exec" else rc.attach_options(request.query)
    except ValueError as e:
        raise errors.bad_request(str(e)) from None
    pod = await pods.get(ri.namespace, ri.name)
    container = choose_container(pod, opts.container)
    node_name = (pod.get("spec") or {}).get("nodeName")
    if not node_name:
        raise errors.bad_request(f"pod {ri.name} does not have a host assigned")
    phase = (pod.get("status") or {}).get("phase")
    if phase in ("Succeeded", "Failed"):
        doing = "exec into" if subresource == "exec" else "attach to"
        raise errors.bad_request(f"cannot {doing} a container in a completed pod; current phase is {phase}")
    node = await proxy.registry.resource("", "v1", "nodes").get(None, node_name)
    base = agent_url(node)
    if base is None:
        raise errors.unavailable(f'no address of node "{node_name}"\'s agent is known')
    client_ws = web.WebSocketResponse(protocols=rc.PROTOCOLS, autoping=True)
    ready = client_ws.can_prepare(request)
    if request.method == "POST" or not ready.ok:
        # kubectl falls back to SPDY after any failed WebSocket upgrade, so this answer is the one
        # the user sees: when the agent is what failed, say so rather than blame the protocol
        await proxy.check_agent(base, ri.namespace, ri.name, node_name)
        raise errors.bad_request("Upgrade request required: this server speaks the WebSocket remote command "
                                 f"protocol ({rc.V5}), not SPDY")
    if ready.protocol is None:
        raise errors.bad_request(f"none of the offered WebSocket protocols is supported: use {rc.V5}")
    url = f"{base}/api/v1/namespaces/{quote(ri.namespace, safe='')}/pods/{quote(ri.name, safe='')}/{subresource}"
    query = rc.query_of(rc.ExecOptions(opts.command, container, opts.stdin, opts.stdout, opts.stderr, opts.tty))
    try:
        agent_ws = await proxy.session().ws_connect(
            url, params=query, protocols=(ready.protocol,), headers=proxy.headers(url),
            timeout=aiohttp.ClientWSTimeout(ws_close=5.0), heartbeat=30.0)
    except aiohttp.WSServerHandshakeError as e:
        if e.status in (401, 403):
            raise proxy.refused(node_name, e.status) from None
        raise errors.unavailable(f'the agent of node "{node_name}" refused the {subresource} stream: '
                                 f"HTTP {e.status}") from None
    except (aiohttp.ClientError, TimeoutError, OSError) as e:
        log.warning("pod_stream_agent_unreachable", subresource=subresource, node=node_name, url=base,
                    error=f"{type(e).__name__}: {e}")
        raise errors.unavailable(f'the agent of node "{node_name}" cannot be reached: {type(e).__name__}') from None
    try:
        await client_ws.prepare(request)
        await _relay(client_ws, agent_ws)
    finally:
        await agent_ws.close()
        with contextlib.suppress(ConnectionResetError):
            await client_ws.close()
    return client_ws


async def _relay(client: web.WebSocketResponse, agent: aiohttp.ClientWebSocketResponse) -> None:
    """Copy binary messages both ways until either side closes."""

    async def agent_to_client() -> None:
        async for msg in agent:
            if msg.type == WSMsgType.BINARY:
                await client.send_bytes(msg.data)

    async def client_to_agent() -> None:
        async for msg in client:
            if msg.type == WSMsgType.BINARY:
                await agent.send_bytes(msg.data)

    tasks = [asyncio.ensure_future(agent_to_client()), asyncio.ensure_future(client_to_agent())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def add_pod_exec(settings: ApiSettings, proxy: AgentProxy) -> None:
    """Serve pods/exec (listed in discovery as kube-apiserver lists it: create and get)."""
    proxy.registry.catalog.add_subresource(PodStrategy.info, Subresource("exec", "PodExecOptions", ("create", "get")))

    async def handler(request: web.Request, pods: GenericStore, ri: RequestInfo, ctx: Context) -> web.StreamResponse:
        return await exec_handler(proxy, request, pods, ri, ctx)

    settings.add_subresource("", "pods", "exec", handler)


def add_pod_attach(settings: ApiSettings, proxy: AgentProxy) -> None:
    """Serve pods/attach (create and get, as kube-apiserver lists it)."""
    proxy.registry.catalog.add_subresource(PodStrategy.info,
                                           Subresource("attach", "PodAttachOptions", ("create", "get")))

    async def handler(request: web.Request, pods: GenericStore, ri: RequestInfo, ctx: Context) -> web.StreamResponse:
        return await exec_handler(proxy, request, pods, ri, ctx, "attach")

    settings.add_subresource("", "pods", "attach", handler)
