"""metrics.k8s.io/v1beta1 in the server's own API: NodeMetrics and PodMetrics from the scrape
(autoscaling/metrics/scrape.py), served as metrics-server serves them, so `kubectl top` works with
no extra process and no APIService.

    GET /apis/metrics.k8s.io/v1beta1/nodes[/<name>]                         ?labelSelector= (Node labels)
    GET /apis/metrics.k8s.io/v1beta1[/namespaces/<ns>]/pods[/<name>]        ?labelSelector= (Pod labels)

Only get and list (no watch: metrics-server has none either). Authentication and RBAC apply as to
any resource (the security middleware sees group metrics.k8s.io, resource nodes or pods). Labels come
from the Node and Pod objects in the store: a pod the agent runs but the store does not hold (a
pod posted to the agent directly) has metrics with no labels, so a non-empty labelSelector leaves it
out. Discovery lists the two resources through `MetricsCatalog`, the registry's catalog plus them.
"""

from __future__ import annotations

import asyncio
import math
import ssl
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
from aiohttp import web

from nodeagent.cluster.apiserver.encoding import json_response
from nodeagent.cluster.apiserver.requestinfo import RequestInfo
from nodeagent.cluster.auth.files import write_private
from nodeagent.cluster.auth.pki import issue_client_certificate, load_ca
from nodeagent.cluster.autoscaling.hpa.fast import FastConfig
from nodeagent.cluster.autoscaling.metrics.objects import Usage, metrics_list, node_metrics, pod_metrics
from nodeagent.cluster.autoscaling.metrics.scrape import AgentFetcher, MetricsStore, Scraper
from nodeagent.cluster.registry import errors
from nodeagent.cluster.registry.catalog import Catalog, ResourceInfo, Subresource
from nodeagent.cluster.registry.options import ListOptions
from nodeagent.cluster.registry.registry import Registry
from nodeagent.cluster.serverconfig import ServerConfig
from nodeagent.core.clock import Clock
from nodeagent.core.selectors import LabelSelector, SelectorError, parse_label_selector
from nodeagent.daemonkit.tasks import GuardedTasks

log = structlog.get_logger(__name__)

GROUP, VERSION = "metrics.k8s.io", "v1beta1"
NODES = ResourceInfo(GROUP, VERSION, "NodeMetrics", "nodes", "", namespaced=False, verbs=("get", "list"))
PODS = ResourceInfo(GROUP, VERSION, "PodMetrics", "pods", "", namespaced=True, verbs=("get", "list"))
SCRAPER_USER = "system:nodeagent-metrics-scraper"  # the client certificate's CN toward the agents


class MetricsCatalog(Catalog):
    """The registry's catalog (live: kinds added later show) plus the metrics resources, for discovery."""

    def __init__(self, base: Catalog, extra: tuple[ResourceInfo, ...] = (NODES, PODS)) -> None:
        super().__init__()
        self.base = base
        for info in extra:
            super().add(info)

    def _all(self) -> list[ResourceInfo]:
        return [*self.base, *self._by_path.values()]

    def add(self, info: ResourceInfo) -> None:
        self.base.add(info)

    def add_subresource(self, info: ResourceInfo, sub: Subresource) -> None:
        self.base.add_subresource(info, sub)

    def subresources(self, info: ResourceInfo) -> list[Subresource]:
        return [] if info.group.endswith(GROUP) else self.base.subresources(info)  # every metrics group

    def get(self, group: str, version: str, plural: str) -> ResourceInfo | None:
        return self.base.get(group, version, plural) or self._by_path.get((group, version, plural))

    def __iter__(self) -> Iterator[ResourceInfo]:
        return iter(self._all())

    def group_versions(self) -> list[tuple[str, str]]:
        seen: dict[tuple[str, str], None] = {}
        for info in self._all():
            seen.setdefault(info.group_version, None)
        return sorted(seen, key=lambda gv: gv[0] != "")

    def resources(self, group: str, version: str) -> list[ResourceInfo]:
        return [i for i in self._all() if i.group_version == (group, version)]


def _selector(request: web.Request) -> LabelSelector:
    try:
        return parse_label_selector(request.query.get("labelSelector", ""))
    except SelectorError as e:
        raise errors.bad_request(f"unable to parse requirement: {e}") from None


def _labels(obj: dict[str, Any] | None) -> dict[str, str]:
    return dict(((obj or {}).get("metadata") or {}).get("labels") or {})


GroupHandler = Callable[[web.Request, RequestInfo], Awaitable[web.StreamResponse]]


class MetricsAPI:
    """The handler of /apis/metrics.k8s.io/v1beta1 over one MetricsStore, and of the other metrics
    groups added to it (custom_metrics_api: custom.metrics.k8s.io, external.metrics.k8s.io)."""

    group = GROUP

    def __init__(self, registry: Registry, store: MetricsStore, clock: Clock) -> None:
        self.registry, self.store, self.clock = registry, store, clock
        self.groups: dict[str, GroupHandler] = {GROUP: self.handle}
        self.resources: tuple[ResourceInfo, ...] = (NODES, PODS)  # what discovery lists

    def add_group(self, group: str, handler: GroupHandler, resources: tuple[ResourceInfo, ...]) -> None:
        """Serve another metrics group's resource paths through `handler`; discovery lists `resources`."""
        self.groups[group] = handler
        self.resources = (*self.resources, *resources)

    async def _objects(self, plural: str, namespace: str | None) -> dict[tuple[str, str], dict[str, Any]]:
        listed = await self.registry.resource("", "v1", plural).list(namespace, ListOptions())
        out: dict[tuple[str, str], dict[str, Any]] = {}
        for obj in listed.items:
            meta = obj.get("metadata") or {}
            out[(str(meta.get("namespace") or ""), str(meta.get("name") or ""))] = obj
        return out

    async def handle(self, request: web.Request, ri: RequestInfo) -> web.StreamResponse:
        if ri.version != VERSION or ri.resource not in ("nodes", "pods") or ri.subresource:
            raise errors.path_not_found()
        info = NODES if ri.resource == "nodes" else PODS
        if ri.verb not in info.verbs:
            raise errors.method_not_supported(info.plural, GROUP, ri.verb)
        if ri.resource == "nodes" and ri.namespace:
            raise errors.path_not_found()
        selector = _selector(request)
        now = self.clock.wall()
        if ri.resource == "nodes":
            items = await self._nodes(ri.name or None, selector, now)
        else:
            items = await self._pods(ri.namespace or None, ri.name or None, selector, now)
        if ri.name:
            if not items:
                shown = f"{ri.namespace}/{ri.name}" if ri.namespace else ri.name
                raise errors.not_found(info.kind.lower(), GROUP, shown)
            return json_response(items[0])
        return json_response(metrics_list(info.kind, items))

    async def _nodes(self, name: str | None, selector: LabelSelector, now: float) -> list[dict[str, Any]]:
        nodes = await self._objects("nodes", None)
        out = []
        for node, point in sorted(self.store.nodes.items()):
            if name is not None and node != name:
                continue
            labels = _labels(nodes.get(("", node)))
            if not selector.matches(labels):
                continue
            out.append(node_metrics(node, Usage(point.cpu_cores, point.memory_bytes), point.timestamp,
                                    point.window, created=now, labels=labels))
        return out

    async def _pods(self, namespace: str | None, name: str | None, selector: LabelSelector,
                    now: float) -> list[dict[str, Any]]:
        pods = await self._objects("pods", namespace)
        out = []
        for (ns, pod), point in sorted(self.store.pods.items()):
            if (namespace is not None and ns != namespace) or (name is not None and pod != name):
                continue
            labels = _labels(pods.get((ns, pod)))
            if not selector.matches(labels):
                continue
            containers = [(c, Usage(p.cpu_cores, p.memory_bytes)) for c, p in point.containers]
            out.append(pod_metrics(ns, pod, containers, point.timestamp, point.window, created=now, labels=labels))
        return out


def scrape_ssl_context(ca_file: str | None, insecure: bool, client_cert: tuple[str, str] | None) -> ssl.SSLContext:
    """How the server dials agents over HTTPS: their serving certificates checked against `ca_file`
    (or the system's CAs), or not at all when `insecure` (metrics-server's --kubelet-insecure-tls);
    the server's client certificate presented when it has one."""
    ctx = ssl.create_default_context(cafile=ca_file)
    if insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if client_cert is not None:
        ctx.load_cert_chain(client_cert[0], client_cert[1])
    return ctx


def _scraper_certificate(tls_dir: Path, clock: Clock) -> tuple[str, str]:
    """A client certificate for the scrape from the server's client CA (made on first start),
    renewed at each start: the agents that trust client-ca.crt accept it (blocking: in a thread)."""
    ca = load_ca(tls_dir / "client-ca.crt", tls_dir / "client-ca.key")
    pair = issue_client_certificate(ca, SCRAPER_USER, (), clock)
    cert, key = tls_dir / "metrics-scraper.crt", tls_dir / "metrics-scraper.key"
    write_private(key, pair.key_pem, 0o600)
    write_private(cert, pair.cert_pem, 0o644)
    return str(cert), str(key)


async def _run(scraper: Scraper, fetcher: AgentFetcher) -> None:
    try:
        await scraper.run()
    finally:
        await fetcher.close()


@dataclass(frozen=True)
class AgentCredentials:
    """How the server dials agents (the metrics scrape, pods/log): TLS context (the agents' CA,
    the server's client certificate when security is on) and the bearer token of metricsScrape."""

    ssl_context: ssl.SSLContext
    token: str | None
    timeout: float


async def agent_credentials(config: ServerConfig, clock: Clock) -> AgentCredentials:
    """Read and make them once at start (the certificate is issued, the token file read)."""
    scrape = config.metrics_scrape
    client_cert = None
    if config.security is not None:
        client_cert = await asyncio.to_thread(_scraper_certificate, config.tls_dir, clock)
    token = None
    if scrape.token_file:
        token = (await asyncio.to_thread(Path(scrape.token_file).read_text)).strip() or None
    ctx = scrape_ssl_context(scrape.ca_file, scrape.insecure_skip_tls_verify, client_cert)
    return AgentCredentials(ctx, token, scrape.timeout)


async def start_metrics(registry: Registry, config: ServerConfig, clock: Clock, tasks: GuardedTasks,
                        credentials: AgentCredentials | None = None) -> MetricsAPI:
    """The scrape loop as a guarded task and the API over its store (controlplane.py calls this)."""
    scrape = config.metrics_scrape
    creds = credentials or await agent_credentials(config, clock)
    capacity = 8
    if config.horizontal_pod_autoscaler.fast:  # the fast HPA reads 30 s windows of the samples
        capacity = max(capacity, math.ceil(FastConfig().steady_metric_window / config.metric_resolution) + 2)
    store = MetricsStore(config.metric_resolution, capacity=capacity)
    fetcher = AgentFetcher(creds.ssl_context, creds.token, request_timeout=scrape.timeout)
    nodes = registry.resource("", "v1", "nodes")

    async def list_nodes() -> list[dict[str, Any]]:
        return (await nodes.list(None, ListOptions())).items

    scraper = Scraper(list_nodes, fetcher, store, timeout=min(scrape.timeout, 0.8 * config.metric_resolution),
                      clock=clock)
    tasks.start(_run(scraper, fetcher), name="metrics-scraper", forever=True)
    log.info("metrics_scraper_started", resolution=config.metric_resolution,
             client_certificate=config.security is not None, token=creds.token is not None,
             ca_file=scrape.ca_file, insecure=scrape.insecure_skip_tls_verify)
    return MetricsAPI(registry, store, clock)
