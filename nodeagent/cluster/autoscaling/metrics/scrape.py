"""The server's scrape of the agents' /metrics/resource into the sample window, as metrics-server does.

Every `resolution` seconds: list the Nodes, pick each Ready node's agent URL (the
`nodeagent.io/api-url` annotation the agent writes, else https://<InternalIP>:<kubelet port>),
fetch /metrics/resource from all of them at once (bounded concurrency, a timeout per node), parse
the kubelet's families, and add the cumulative CPU counters and working sets to one SampleWindow.
Each series then has a *point*: the CPU rate over its latest samples (at most `resolution + slack`
back, so the last two scrapes, metrics-server's rule; the slack absorbs the agents' own 1 s sampling
tick) with the latest working set, the
time of that sample and the window the rate covers. A node whose scrape fails keeps its last good
points; a node that is gone or not Ready, or a pod the agent no longer reports, loses them.

The I/O is injected (a node lister and a fetch function) so this module stays below the API layers
(the autoscaling room imports core only); controlplane.py wires the registry and an aiohttp fetch.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import math
import re
import ssl
import urllib.parse
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import structlog

from nodeagent.cluster.autoscaling.metrics.window import SampleWindow
from nodeagent.core.clock import Clock, SystemClock
from nodeagent.core.waits import wait_for

log = structlog.get_logger(__name__)

API_URL_ANNOTATION = "nodeagent.io/api-url"
DEFAULT_RESOLUTION = 15.0  # metrics-server's --metric-resolution default
SLACK = 2.0  # seconds added to the rate window: agents sample on their own 1 s tick

NodeKey = tuple[str, str]  # ("node", name)
PodKey = tuple[str, str, str]  # ("pod", namespace, name)
ContainerKey = tuple[str, str, str, str]  # ("container", namespace, pod, container)


# ---- the node's agent URL -------------------------------------------------------------------------


def _condition(node: Mapping[str, Any], kind: str) -> str | None:
    for c in (node.get("status") or {}).get("conditions") or ():
        if isinstance(c, dict) and c.get("type") == kind:
            return str(c.get("status"))
    return None


def node_ready(node: Mapping[str, Any]) -> bool:
    return _condition(node, "Ready") == "True"


def agent_url(node: Mapping[str, Any]) -> str | None:
    """Where the node's agent serves its API: its own annotation, else the kubelet's endpoint
    (first InternalIP, then Hostname, at status.daemonEndpoints.kubeletEndpoint.Port, over HTTPS
    as metrics-server dials kubelets). None when neither is known."""
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    url = annotations.get(API_URL_ANNOTATION)
    if isinstance(url, str) and url.startswith(("http://", "https://")):
        return url.rstrip("/")
    status = node.get("status") or {}
    port = ((status.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port")
    by_type: dict[str, str] = {}
    for a in reversed(status.get("addresses") or []):
        if isinstance(a, dict) and a.get("address"):
            by_type[str(a.get("type"))] = str(a["address"])
    host = by_type.get("InternalIP") or by_type.get("Hostname")
    if not host or not isinstance(port, int) or not 0 < port < 65536:
        return None
    try:
        if ipaddress.ip_address(host).version == 6:
            host = f"[{host}]"
    except ValueError:
        pass  # a host name
    return f"https://{host}:{port}"


# ---- /metrics/resource parsing --------------------------------------------------------------------

_LINE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?"
                   r"\s+(?P<value>\S+)(?:\s+(?P<ts>-?\d+))?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


class ParseError(ValueError):
    """The body is not the Prometheus text format (a line says where)."""


def _labels(text: str, lineno: int) -> dict[str, str]:
    out: dict[str, str] = {}
    pos = 0
    while pos < len(text):
        m = _LABEL.match(text, pos)
        if m is None or m.end() == pos:
            if text[pos:].strip():
                raise ParseError(f"line {lineno}: bad labels {text!r}")
            break
        out[m.group(1)] = re.sub(r"\\[\\\"n]", lambda e: _UNESCAPE[e.group(0)], m.group(2))
        pos = m.end()
    return out


@dataclass(frozen=True, slots=True)
class Reading:
    """One series' counters from one scrape."""

    timestamp: float  # seconds since the epoch, the agent's read time
    cpu_ns: int | None = None  # cumulative CPU time
    memory_bytes: int | None = None  # working set
    start_time: float | None = None  # containers only


@dataclass(slots=True)
class Scrape:
    """What one agent's /metrics/resource said."""

    node: Reading | None = None
    pods: dict[tuple[str, str], Reading] = field(default_factory=dict)
    containers: dict[tuple[str, str, str], Reading] = field(default_factory=dict)
    scrape_error: bool = False


def _merge(old: Reading | None, ts: float, **values: Any) -> Reading:
    if old is None:
        return Reading(timestamp=ts, **values)
    return dataclasses.replace(old, timestamp=max(old.timestamp, ts), **values)


def parse_resource_metrics(text: str, default_time: float) -> Scrape:
    """The kubelet's resource families from a /metrics/resource body. Series without a timestamp
    take `default_time`; other families are ignored; a malformed line raises ParseError."""
    out = Scrape()
    starts: dict[tuple[str, str, str], float] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if m is None:
            raise ParseError(f"line {lineno}: not a sample: {line[:80]!r}")
        name = m.group("name")
        try:
            value = float(m.group("value"))
        except ValueError:
            raise ParseError(f"line {lineno}: bad value {m.group('value')!r}") from None
        ts = int(m.group("ts")) / 1000 if m.group("ts") else default_time
        labels = _labels(m.group("labels") or "", lineno)
        if name == "resource_scrape_error":
            out.scrape_error = value != 0
            continue
        if not math.isfinite(value) or value < 0:
            continue
        if name.startswith("node_"):
            if name == "node_cpu_usage_seconds_total":
                out.node = _merge(out.node, ts, cpu_ns=round(value * 1e9))
            elif name == "node_memory_working_set_bytes":
                out.node = _merge(out.node, ts, memory_bytes=int(value))
            continue
        ns, pod = labels.get("namespace"), labels.get("pod")
        if not ns or not pod:
            continue
        if name.startswith("pod_"):
            key = (ns, pod)
            if name == "pod_cpu_usage_seconds_total":
                out.pods[key] = _merge(out.pods.get(key), ts, cpu_ns=round(value * 1e9))
            elif name == "pod_memory_working_set_bytes":
                out.pods[key] = _merge(out.pods.get(key), ts, memory_bytes=int(value))
            continue
        container = labels.get("container")
        if not container or not name.startswith("container_"):
            continue
        ckey = (ns, pod, container)
        if name == "container_cpu_usage_seconds_total":
            out.containers[ckey] = _merge(out.containers.get(ckey), ts, cpu_ns=round(value * 1e9))
        elif name == "container_memory_working_set_bytes":
            out.containers[ckey] = _merge(out.containers.get(ckey), ts, memory_bytes=int(value))
        elif name == "container_start_time_seconds":
            starts[ckey] = value
    for ckey, start in starts.items():
        if ckey in out.containers:
            out.containers[ckey] = _merge(out.containers[ckey], out.containers[ckey].timestamp, start_time=start)
    return out


# ---- the points -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Point:
    """A series' usage as served: the CPU rate over `window` seconds ending at `timestamp`."""

    cpu_cores: float
    memory_bytes: int
    timestamp: float
    window: float


@dataclass(frozen=True, slots=True)
class PodPoint:
    namespace: str
    name: str
    node: str
    containers: tuple[tuple[str, Point], ...]  # in name order
    timestamp: float
    window: float


class MetricsStore:
    """The window of every series and the last good point of each node, pod and container."""

    def __init__(self, resolution: float = DEFAULT_RESOLUTION, capacity: int = 8) -> None:
        self.resolution = resolution
        self.rate_window = resolution + SLACK
        self.window = SampleWindow(capacity=capacity, max_gap=self.rate_window)
        self.nodes: dict[str, Point] = {}
        self.pods: dict[tuple[str, str], PodPoint] = {}
        self._series: dict[str, set[Hashable]] = {}  # node -> its series keys in the window

    def _point(self, key: Hashable, reading: Reading) -> Point | None:
        usage = self.window.usage(key, reading.timestamp, self.rate_window)
        if usage is None or usage.cpu_cores is None:
            return None
        return Point(usage.cpu_cores, usage.memory_bytes, usage.timestamp, round(usage.window, 3))  # ms stamps

    def _add(self, keys: list[Hashable], readings: list[Reading]) -> None:
        usable = [(k, r) for k, r in zip(keys, readings, strict=True)
                  if r.cpu_ns is not None and r.memory_bytes is not None]
        if usable:
            self.window.add_many([k for k, _ in usable], [r.timestamp for _, r in usable],
                                 [r.cpu_ns or 0 for _, r in usable], [r.memory_bytes or 0 for _, r in usable],
                                 [r.start_time for _, r in usable])

    def record(self, node: str, scrape: Scrape) -> None:
        """Add one agent's scrape: its samples into the window, then its points."""
        keys: list[Hashable] = []
        readings: list[Reading] = []
        if scrape.node is not None:
            keys.append(("node", node))
            readings.append(scrape.node)
        for (ns, pod), r in scrape.pods.items():
            keys.append(("pod", ns, pod))
            readings.append(r)
        for (ns, pod, c), r in scrape.containers.items():
            keys.append(("container", ns, pod, c))
            readings.append(r)
        self._add(keys, readings)
        current = set(keys)
        for gone in self._series.get(node, set()) - current:
            self.window.remove(gone)
        self._series[node] = current
        if scrape.node is not None and (p := self._point(("node", node), scrape.node)) is not None:
            self.nodes[node] = p
        by_pod: dict[tuple[str, str], list[tuple[str, Point]]] = {}
        complete: set[tuple[str, str]] = set(scrape.pods)
        for (ns, pod, c), r in sorted(scrape.containers.items()):
            cp = self._point(("container", ns, pod, c), r)
            if cp is None:
                complete.discard((ns, pod))  # metrics-server leaves out a pod with a container lacking a rate
            else:
                by_pod.setdefault((ns, pod), []).append((c, cp))
        for pod_key in [k for k, v in self.pods.items() if v.node == node and k not in scrape.pods]:
            del self.pods[pod_key]
        for pod_key in complete:
            containers = by_pod.get(pod_key)
            if not containers:
                continue
            stamp = max(p.timestamp for _, p in containers)
            window = max(p.window for _, p in containers)
            self.pods[pod_key] = PodPoint(pod_key[0], pod_key[1], node, tuple(containers), stamp, window)

    def known_nodes(self) -> set[str]:
        return {*self.nodes, *self._series}

    def forget_node(self, node: str) -> None:
        """The node is gone or not Ready: its points go (metrics-server serves Ready nodes only)."""
        self.nodes.pop(node, None)
        for key in [k for k, v in self.pods.items() if v.node == node]:
            del self.pods[key]
        for series in self._series.pop(node, set()):
            self.window.remove(series)


class ScrapeFailed(Exception):
    """The agent answered, but not with metrics (a status code, a refusal)."""


class AgentFetcher:
    """GET <agent>/metrics/resource with the server's credentials: its client certificate (in
    `ssl_context`, presented over HTTPS) and/or a bearer token. The token is never sent in clear to
    another host (plain HTTP is for a loopback agent only), as the agent would refuse it anyway."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None, token: str | None = None,
                 request_timeout: float = 10.0) -> None:
        self.ssl_context, self.token, self.request_timeout = ssl_context, token, request_timeout
        self._session: aiohttp.ClientSession | None = None

    async def __call__(self, base_url: str) -> str:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=self.ssl_context or True))
        url = urllib.parse.urlsplit(base_url)
        headers = {"Accept": "text/plain"}
        if self.token and (url.scheme == "https" or _loopback(url.hostname or "")):
            headers["Authorization"] = f"Bearer {self.token}"
        async with self._session.get(base_url + "/metrics/resource", headers=headers,
                                     timeout=aiohttp.ClientTimeout(total=self.request_timeout)) as resp:
            if resp.status != 200:
                raise ScrapeFailed(f"HTTP {resp.status} from {base_url}/metrics/resource")
            return await resp.text()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


# ---- the loop -------------------------------------------------------------------------------------

Fetch = Callable[[str], Awaitable[str]]  # agent base URL -> its /metrics/resource body


class Scraper:
    """Scrape every Ready node each `resolution` into a MetricsStore (see the module docstring)."""

    def __init__(self, list_nodes: Callable[[], Awaitable[Iterable[Mapping[str, Any]]]], fetch: Fetch,
                 store: MetricsStore, *, timeout: float | None = None, concurrency: int = 16,
                 clock: Clock | None = None) -> None:
        self.list_nodes, self.fetch, self.store = list_nodes, fetch, store
        self.timeout = timeout if timeout is not None else max(1.0, min(10.0, store.resolution * 0.8))
        self.concurrency = max(1, concurrency)
        self.clock = clock or SystemClock()
        self.failures: dict[str, str] = {}  # node -> the last error, while it fails

    async def _one(self, node: str, url: str, gate: asyncio.Semaphore) -> None:
        async with gate:
            try:
                body = await wait_for(self.fetch(url), self.timeout)
                scrape = parse_resource_metrics(body, self.clock.wall())
            except (TimeoutError, OSError, aiohttp.ClientError, ParseError, ScrapeFailed) as e:
                why = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
                if self.failures.get(node) != why:
                    log.warning("metrics_scrape_failed", node=node, url=url, error=why)
                self.failures[node] = why
                return
        if scrape.scrape_error:
            log.warning("metrics_scrape_agent_error", node=node)
        if self.failures.pop(node, None) is not None:
            log.info("metrics_scrape_recovered", node=node)
        self.store.record(node, scrape)

    async def scrape_once(self) -> int:
        """One round; the number of nodes scraped successfully."""
        targets: dict[str, str] = {}
        for obj in await self.list_nodes():
            name = str((obj.get("metadata") or {}).get("name") or "")
            url = agent_url(obj) if node_ready(obj) else None
            if name and url:
                targets[name] = url
        for gone in [n for n in self.store.known_nodes() if n not in targets]:
            self.store.forget_node(gone)
            self.failures.pop(gone, None)
        gate = asyncio.Semaphore(self.concurrency)
        await asyncio.gather(*(self._one(n, u, gate) for n, u in targets.items()))
        return sum(1 for n in targets if n not in self.failures)

    async def run(self) -> None:
        """Forever, one round per resolution (a slow round delays the next, never overlaps it)."""
        while True:
            started = self.clock.now()
            try:
                await self.scrape_once()
            except Exception:  # the node list failed: try again next round
                log.exception("metrics_scrape_round_failed")
            await asyncio.sleep(max(0.0, self.store.resolution - (self.clock.now() - started)))


