"""GET `.../pods/<name>/log`: a container's log, proxied from the agent the pod is bound to, as
kube-apiserver's LogREST streams it from the kubelet.

    kubectl logs p [-c c] [--tail N] [-f] [--previous] [--limit-bytes N] [--since 5m] [--timestamps]

The pure part, table-tested: the query as PodLogOptions (kube's validation: 422 Invalid naming the
field), the container (upstream LogLocation's rules and messages: the only container by default, a
400 listing the names when there are several), the agent's query. The I/O: the pod and its Node
from the registry, the agent's URL (the Node's `nodeagent.io/api-url` annotation, else
InternalIP/Hostname at status.daemonEndpoints.kubeletEndpoint.Port, as the metrics scrape dials),
the server's credentials toward agents (metrics_api.AgentCredentials), and the body copied chunk by
chunk, so `follow` streams until the agent ends it or the client goes.

Two answers differ from kube-apiserver on purpose: a pod with no node yet is a 400 (`pod p does not
have a host assigned`, upstream's words for exec and attach) where upstream answers an empty log,
and a pod bound but not yet known to its agent is the kubelet's `is waiting to start` 400.
"""

from __future__ import annotations

import datetime
import ipaddress
import urllib.parse
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import aiohttp
import structlog
from aiohttp import web

from nodeagent.cluster.apiserver.metrics_api import AgentCredentials
from nodeagent.cluster.apiserver.requestinfo import RequestInfo
from nodeagent.cluster.apiserver.resources import ApiSettings
from nodeagent.cluster.autoscaling.metrics.scrape import agent_url
from nodeagent.cluster.registry import errors
from nodeagent.cluster.registry.catalog import Subresource
from nodeagent.cluster.registry.kinds.pods import PodStrategy
from nodeagent.cluster.registry.options import Context
from nodeagent.cluster.registry.registry import Registry
from nodeagent.cluster.registry.store import GenericStore
from nodeagent.core.errors import FieldError

log = structlog.get_logger(__name__)

CHUNK = 64 * 1024
_FALSE = ("0", "f", "false", "n", "no")  # apimachinery's Convert_Slice_string_To_bool: anything else is true


@dataclass(frozen=True)
class LogOptions:
    """core/v1 PodLogOptions, as the query gives them."""

    container: str = ""
    follow: bool = False
    previous: bool = False
    timestamps: bool = False
    since_seconds: int | None = None
    since_time: str | None = None
    tail_lines: int | None = None
    limit_bytes: int | None = None


def _query_int(query: Any, key: str) -> int | None:
    raw = query.get(key)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise errors.bad_request(f'strconv.ParseInt: parsing "{raw[:40]}": invalid syntax for {key}') from None


def _query_bool(query: Any, key: str) -> bool:
    raw = query.get(key)
    return raw is not None and raw.lower() not in _FALSE


def log_options(query: Any, name: str) -> LogOptions:
    """The query as PodLogOptions; malformed numbers or times are 400, kube's ValidatePodLogOptions
    failures 422 Invalid naming the field."""
    since_time = query.get("sinceTime") or None
    if since_time is not None:
        try:
            datetime.datetime.fromisoformat(since_time.replace("Z", "+00:00"))
        except ValueError:
            raise errors.bad_request(f'parsing time "{since_time[:40]}" as RFC 3339: invalid sinceTime') from None
    opts = LogOptions(container=query.get("container", ""), follow=_query_bool(query, "follow"),
                      previous=_query_bool(query, "previous"), timestamps=_query_bool(query, "timestamps"),
                      since_seconds=_query_int(query, "sinceSeconds"), since_time=since_time,
                      tail_lines=_query_int(query, "tailLines"), limit_bytes=_query_int(query, "limitBytes"))
    errs: list[FieldError] = []
    if opts.tail_lines is not None and opts.tail_lines < 0:
        errs.append(FieldError("tailLines", f"Invalid value: {opts.tail_lines}: must be greater than or equal to 0"))
    if opts.limit_bytes is not None and opts.limit_bytes < 1:
        errs.append(FieldError("limitBytes", f"Invalid value: {opts.limit_bytes}: must be greater than 0"))
    if opts.since_seconds is not None and opts.since_time is not None:
        errs.append(FieldError("", "Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified"))
    elif opts.since_seconds is not None and opts.since_seconds < 1:
        errs.append(FieldError("sinceSeconds", f"Invalid value: {opts.since_seconds}: must be greater than 0"))
    if errs:
        raise errors.invalid("PodLogOptions", "", name, errs)
    return opts


def _names(containers: Any) -> list[str]:
    return [str(c.get("name", "")) for c in containers or [] if isinstance(c, dict)]


def choose_container(pod: dict[str, Any], container: str) -> str:
    """The container whose log is read (kube-apiserver's LogLocation): the named one, which must be
    one of the pod's (init, app or ephemeral), else the only app container."""
    spec = pod.get("spec") or {}
    name = (pod.get("metadata") or {}).get("name", "")
    apps, inits = _names(spec.get("containers")), _names(spec.get("initContainers"))
    if container:
        if container not in apps + inits + _names(spec.get("ephemeralContainers")):
            raise errors.bad_request(f"container {container} is not valid for pod {name}")
        return container
    if len(apps) == 1:
        return apps[0]
    if not apps:
        raise errors.bad_request(f"a container name must be specified for pod {name}")
    message = f"a container name must be specified for pod {name}, choose one of: [{' '.join(apps)}]"
    if inits:
        message += f" or one of the init containers: [{' '.join(inits)}]"
    raise errors.bad_request(message)


def agent_query(opts: LogOptions, container: str) -> dict[str, str]:
    """The agent's query: the kubelet's containerLogs parameters, only those set."""
    out = {"container": container}
    for key, on in (("follow", opts.follow), ("previous", opts.previous), ("timestamps", opts.timestamps)):
        if on:
            out[key] = "true"
    for key, value in (("sinceSeconds", opts.since_seconds), ("tailLines", opts.tail_lines),
                       ("limitBytes", opts.limit_bytes)):
        if value is not None:
            out[key] = str(value)
    if opts.since_time is not None:
        out["sinceTime"] = opts.since_time
    return out


def waiting_reason(pod: dict[str, Any], container: str) -> str:
    """Why a container's log is not there yet, from the pod's status (ContainerCreating if unsaid)."""
    status = pod.get("status") or {}
    for key in ("containerStatuses", "initContainerStatuses"):
        for cs in status.get(key) or []:
            if isinstance(cs, dict) and cs.get("name") == container:
                reason = ((cs.get("state") or {}).get("waiting") or {}).get("reason")
                if reason:
                    return str(reason)
    return "ContainerCreating"


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


class AgentProxy:
    """One client session toward the agents with the server's credentials, and the pods/log
    handler over it (pods/exec, podexec.py, shares it)."""

    def __init__(self, registry: Registry, credentials: AgentCredentials) -> None:
        self.registry, self.credentials = registry, credentials
        self._session: aiohttp.ClientSession | None = None

    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=self.credentials.ssl_context))
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def headers(self, url: str) -> dict[str, str]:
        """The bearer token, never in clear to another host (plain HTTP is for a loopback agent)."""
        parts = urllib.parse.urlsplit(url)
        token = self.credentials.token
        if token and (parts.scheme == "https" or _loopback(parts.hostname or "")):
            return {"Authorization": f"Bearer {token}"}
        return {}

    @staticmethod
    def refused(node_name: str, code: int, message: str = "") -> errors.StatusError:
        """The agent turned the server's own credentials away. Relayed as is, a 401 would make
        kubectl say "You must be logged in to the server", blaming the user's credentials."""
        said = f": {message}" if message else ""
        return errors.unavailable(
            f'the agent of node "{node_name}" refused the server\'s credentials (HTTP {code}{said}); give the '
            "server the agents' token (metricsScrape.tokenFile) or a client certificate the agents trust "
            "(docs/control-plane.md, Metrics)")

    async def check_agent(self, base: str, namespace: str, name: str, node_name: str) -> None:
        """Reach the agent with the server's credentials (a GET of the pod), raising what a stream
        to it would meet: unreachable, or the credentials refused."""
        url = f"{base}/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}"
        timeout = aiohttp.ClientTimeout(total=self.credentials.timeout)
        try:
            async with self.session().get(url, headers=self.headers(url), timeout=timeout) as upstream:
                if upstream.status in (401, 403):
                    raise self.refused(node_name, upstream.status)
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            raise errors.unavailable(f'the agent of node "{node_name}" cannot be reached: {type(e).__name__}') \
                from None

    async def handle(self, request: web.Request, pods: GenericStore, ri: RequestInfo,
                     ctx: Context) -> web.StreamResponse:
        if ri.verb != "get":
            raise errors.StatusError(405, "MethodNotAllowed", "the server does not allow this method on the "
                                                              "requested resource")
        opts = log_options(request.query, ri.name)
        pod = await pods.get(ri.namespace, ri.name)
        container = choose_container(pod, opts.container)
        node_name = (pod.get("spec") or {}).get("nodeName")
        if not node_name:
            raise errors.bad_request(f"pod {ri.name} does not have a host assigned")
        node = await self.registry.resource("", "v1", "nodes").get(None, node_name)
        base = agent_url(node)
        if base is None:
            raise errors.unavailable(f'no address of node "{node_name}"\'s agent is known (its Node has neither the '
                                     "nodeagent.io/api-url annotation nor an address and daemonEndpoints port)")
        url = f"{base}/api/v1/namespaces/{quote(ri.namespace, safe='')}/pods/{quote(ri.name, safe='')}/log"
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.credentials.timeout,
                                        sock_read=None if opts.follow else self.credentials.timeout)
        try:
            upstream = await self.session().get(url, params=agent_query(opts, container), headers=self.headers(url),
                                           timeout=timeout)
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            log.warning("pod_log_agent_unreachable", node=node_name, url=base, error=f"{type(e).__name__}: {e}")
            raise errors.unavailable(f'the agent of node "{node_name}" cannot be reached: {type(e).__name__}') \
                from None
        async with upstream:
            if upstream.status != 200:
                raise await self._agent_error(upstream, pod, container, node_name)
            return await self.relay_body(request, upstream, web.StreamResponse(headers={"Content-Type": "text/plain"}))

    @staticmethod
    async def relay_body(request: web.Request, upstream: aiohttp.ClientResponse,
                         resp: web.StreamResponse) -> web.StreamResponse:
        """Copy the agent's body to the client chunk by chunk (pods/log, nodes/proxy) until it ends
        or either side goes (`kubectl logs -f` ended, or the agent's run was cut short)."""
        try:
            await resp.prepare(request)
            async for chunk in upstream.content.iter_chunked(CHUNK):
                await resp.write(chunk)
            await resp.write_eof()
        except (ConnectionResetError, aiohttp.ClientPayloadError, aiohttp.ClientConnectionError):
            pass
        return resp

    async def _agent_error(self, upstream: aiohttp.ClientResponse, pod: dict[str, Any], container: str,
                           node_name: str) -> errors.StatusError:
        """The agent's refusal as the client's Status: 404 (the agent has no such pod yet) is the
        kubelet's `waiting to start`; another 4xx is relayed; 5xx means the agent failed."""
        try:
            body = await upstream.json(content_type=None)
        except (ValueError, aiohttp.ClientError):
            body = None
        message = str(body.get("message")) if isinstance(body, dict) and body.get("message") else ""
        name = (pod.get("metadata") or {}).get("name", "")
        if upstream.status == 404:
            return errors.bad_request(f'container "{container}" in pod "{name}" is waiting to start: '
                                      f"{waiting_reason(pod, container)}")
        if upstream.status in (401, 403):
            return self.refused(node_name, upstream.status, message)
        if 400 <= upstream.status < 500:
            reason = str(body.get("reason") or "BadRequest") if isinstance(body, dict) else "BadRequest"
            return errors.StatusError(upstream.status, reason, message or f"HTTP {upstream.status} from the agent")
        log.warning("pod_log_agent_failed", node=node_name, code=upstream.status, message=message)
        return errors.unavailable(f'the agent of node "{node_name}" failed to read the log: HTTP {upstream.status}')


def add_pod_log(registry: Registry, settings: ApiSettings, credentials: AgentCredentials) -> AgentProxy:
    """Serve pods/log (listed in discovery, get only); the caller closes the proxy at shutdown."""
    proxy = AgentProxy(registry, credentials)
    registry.catalog.add_subresource(PodStrategy.info, Subresource("log", "Pod", ("get",)))
    settings.add_subresource("", "pods", "log", proxy.handle)
    return proxy
