"""The agent's link to the control plane (`nodeagent server run`), the way a kubelet keeps its Node.

While `kubeconfig` is set: register (POST /api/v1/nodes; 409 AlreadyExists is fine, then the
labels and the API URL annotation are merge-patched onto the existing Node), then every
`nodeStatusUpdateFrequency` merge-patch `nodes/<name>/status` if it changed (or
`nodeStatusReportFrequency` has passed since the last one, as the kubelet), and every
`nodeLeaseDurationSeconds`/4 renew the Lease `kube-node-lease/<name>` (read or create it once, then
PUT it with the resourceVersion last seen; a 409 Conflict or 404 re-reads it), as the kubelet's
nodelease controller. Pull, not push: the server never needs to reach the agent for this, so a
restarted server or a partition heals by itself when requests succeed again.

One task, never blocking the agent's loop: the kubeconfig is read in a thread, requests have a
timeout, failures back off (200 ms doubling to 7 s). Only state changes are logged
(`control_plane_connected`, `control_plane_lost` with the error). After a failure the kubeconfig is
read again (a rotated token or CA is picked up) and the registration is redone if the Node is gone.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import quote

import aiohttp
import structlog

from nodeagent.agent.cluster_client import bodies
from nodeagent.agent.config.settings import Config
from nodeagent.core.clock import Clock, SystemClock
from nodeagent.daemonkit.kubeconfig import ClusterCredentials, KubeconfigError, client_ssl_context, load_kubeconfig

log = structlog.get_logger(__name__)

DEFAULT_TIMEOUT_S = 10.0
MERGE_PATCH = "application/merge-patch+json"
USER_AGENT = "nodeagent-agent"


class ApiError(Exception):
    """A non-2xx answer; `reason` is the Status reason (Conflict, NotFound, Forbidden...)."""

    def __init__(self, method: str, path: str, code: int, body: Any) -> None:
        self.code = code
        status = body if isinstance(body, dict) else {}
        self.reason = str(status.get("reason") or "")
        message = status.get("message") or (str(body)[:200] if body else "")
        super().__init__(f"{method} {path}: {code} {self.reason}: {message}".rstrip(": "))


class ApiClient:
    """An aiohttp session bound to one kubeconfig's server, CA and credential."""

    def __init__(self, creds: ClusterCredentials, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        self.creds = creds
        self.timeout = timeout
        self._ssl = client_ssl_context(creds)
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        if creds.token:
            headers["Authorization"] = f"Bearer {creds.token}"
        self._session = aiohttp.ClientSession(headers=headers, timeout=aiohttp.ClientTimeout(total=timeout))

    async def request(self, method: str, path: str, body: Any = None, *,
                      content_type: str = "application/json") -> tuple[int, Any]:
        """(status code, parsed JSON body or None)."""
        kwargs: dict[str, Any] = {}
        if body is not None:
            kwargs["json"] = body
            kwargs["headers"] = {"Content-Type": content_type}
        if self._ssl is not None:
            kwargs["ssl"] = self._ssl
            if self.creds.tls_server_name:
                kwargs["server_hostname"] = self.creds.tls_server_name
        async with self._session.request(method, self.creds.server + path, **kwargs) as resp:
            try:
                data = await resp.json(content_type=None)
            except ValueError:
                data = None
            return resp.status, data

    async def call(self, method: str, path: str, body: Any = None, *, ok: tuple[int, ...] = (200, 201),
                   content_type: str = "application/json") -> Any:
        code, data = await self.request(method, path, body, content_type=content_type)
        if code not in ok:
            raise ApiError(method, path, code, data)
        return data

    async def stream(self, path: str, read_timeout: float) -> AsyncIterator[dict[str, Any]]:
        """A watch: one JSON object per line until the server ends the response; a non-200
        answer is an ApiError (410 Gone included)."""
        kwargs: dict[str, Any] = {"timeout": aiohttp.ClientTimeout(total=None, sock_connect=self.timeout,
                                                                   sock_read=read_timeout)}
        if self._ssl is not None:
            kwargs["ssl"] = self._ssl
            if self.creds.tls_server_name:
                kwargs["server_hostname"] = self.creds.tls_server_name
        async with self._session.get(self.creds.server + path, **kwargs) as resp:
            if resp.status != 200:
                try:
                    data = await resp.json(content_type=None)
                except ValueError:
                    data = None
                raise ApiError("GET", path, resp.status, data)
            async for line in resp.content:
                text = line.strip()
                if text:
                    event = json.loads(text)
                    if isinstance(event, dict):
                        yield event

    async def close(self) -> None:
        await self._session.close()


def _node_path(name: str) -> str:
    return f"/api/v1/nodes/{quote(name, safe='')}"


def _lease_path(name: str) -> str:
    return f"/apis/coordination.k8s.io/v1/namespaces/{bodies.NODE_LEASE_NAMESPACE}/leases/{quote(name, safe='')}"


class KubeconfigClient:
    """One ApiClient for the kubeconfig at a path: made on first use (the file is read off the
    loop), made again when the path changes or after `_drop_client` (a rotated token or CA)."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.client: ApiClient | None = None
        self._kubeconfig: str | None = None

    async def _client(self, path: str) -> ApiClient:
        if self.client is None or self._kubeconfig != path:
            await self._drop_client()
            creds = await asyncio.to_thread(load_kubeconfig, path)
            self.client = ApiClient(creds, self.timeout)
            self._kubeconfig = path
        return self.client

    async def _drop_client(self) -> None:
        if self.client is not None:
            client, self.client = self.client, None
            await client.close()


class ControlPlaneSync(KubeconfigClient):
    """The registration, node status and lease state of one agent (see the module docstring)."""

    def __init__(self, *, clock: Clock | None = None, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        super().__init__(timeout)
        self.clock = clock or SystemClock()
        self.connected = False
        self.registered = False
        self.node_uid: str | None = None
        self.lease: dict[str, Any] | None = None
        self.failures = 0
        self.last_error: str | None = None
        self.next_status = 0.0  # clock.now() of the next status patch / lease renewal
        self.next_lease = 0.0
        self.status_sent = 0
        self.status_skipped = 0
        self._last_status: dict[str, Any] | None = None  # fingerprint and clock.now() of the last sent
        self._last_status_at: float | None = None
        self.lease_renewals = 0

    async def register(self, client: ApiClient, node: dict[str, Any], port: int, api_url: str) -> None:
        """Create the Node; if it exists, adopt it (its uid) and set our labels and annotation."""
        name = node["metadata"]["name"]
        code, data = await client.request("POST", "/api/v1/nodes", bodies.node_for_create(node, port, api_url))
        if code == 409:
            data = await client.call("PATCH", _node_path(name), bodies.metadata_patch(node, api_url),
                                     content_type=MERGE_PATCH)
        elif code not in (200, 201):
            raise ApiError("POST", "/api/v1/nodes", code, data)
        self.node_uid = ((data or {}).get("metadata") or {}).get("uid")
        self.registered = True
        self._last_status = self._last_status_at = None
        self.next_status = self.clock.now()  # the status went with the create, but a 409 kept the old one

    async def update_status(self, client: ApiClient, node: dict[str, Any], port: int,
                            report_frequency: float) -> None:
        """Patch nodes/<name>/status if it changed or nodeStatusReportFrequency has passed."""
        name = node["metadata"]["name"]
        patch = bodies.status_patch(node, port)
        fingerprint = bodies.status_fingerprint(patch)
        now = self.clock.now()
        since = None if self._last_status_at is None else now - self._last_status_at
        if not bodies.status_needs_sending(fingerprint != self._last_status, since, report_frequency):
            self.status_skipped += 1
            return
        try:
            await client.call("PATCH", _node_path(name) + "/status", patch, content_type=MERGE_PATCH)
        except ApiError as e:
            if e.code == 404:  # deleted on the server (kubectl delete node): register again
                self.registered = False
            raise
        self._last_status, self._last_status_at = fingerprint, now
        self.status_sent += 1

    async def renew_lease(self, client: ApiClient, name: str, duration: int) -> None:
        """One renewal: PUT the lease last seen; on 409/404 (or none seen) read it, create if missing,
        and PUT once more."""
        path = _lease_path(name)
        for attempt in range(2):
            if self.lease is None:
                code, data = await client.request("GET", path)
                if code == 404:
                    body = bodies.lease_for_create(name, duration, self.clock.wall(), self.node_uid)
                    code, data = await client.request(
                        "POST", f"/apis/coordination.k8s.io/v1/namespaces/{bodies.NODE_LEASE_NAMESPACE}/leases", body)
                    if code in (200, 201):
                        self.lease = data
                        self.lease_renewals += 1
                        return
                    if code != 409 or attempt:
                        raise ApiError("POST", path, code, data)
                    continue  # created meanwhile: read it next round
                if code != 200:
                    raise ApiError("GET", path, code, data)
                self.lease = data
            assert self.lease is not None
            body = bodies.renewed_lease(self.lease, name, duration, self.clock.wall(), self.node_uid)
            code, data = await client.request("PUT", path, body)
            if code == 200:
                self.lease = data
                self.lease_renewals += 1
                return
            self.lease = None
            if code not in (404, 409) or attempt:
                raise ApiError("PUT", path, code, data)

    async def step(self, cfg: Config, node: dict[str, Any], port: int, api_url: str) -> float:
        """Do what is due; the seconds until something is due again (a back-off after a failure)."""
        assert cfg.kubeconfig
        name = node["metadata"]["name"]
        try:
            client = await self._client(cfg.kubeconfig)
            if not self.registered:
                await self.register(client, node, port, api_url)
            now = self.clock.now()
            if now >= self.next_status:
                await self.update_status(client, node, port, cfg.node_status_report_frequency)
                self.next_status = now + cfg.node_status_update_frequency
            if now >= self.next_lease:
                await self.renew_lease(client, name, cfg.node_lease_duration_seconds)
                self.next_lease = now + bodies.lease_renew_interval(cfg.node_lease_duration_seconds)
        except (ApiError, KubeconfigError, aiohttp.ClientError, TimeoutError, OSError) as e:
            return await self._failed(e, cfg.kubeconfig, cfg.node_lease_duration_seconds)
        if not self.connected:
            log.info("control_plane_connected", server=client.creds.server, node=name, user=client.creds.user_kind,
                     after_failures=self.failures)
        self.connected, self.failures, self.last_error = True, 0, None
        return max(0.0, min(self.next_status, self.next_lease) - self.clock.now())

    async def _failed(self, error: Exception, path: str, lease_duration_s: int) -> float:
        message = f"{type(error).__name__}: {error}"
        if self.connected or self.failures == 0:
            log.warning("control_plane_lost" if self.connected else "control_plane_unreachable",
                        kubeconfig=path, error=message)
        self.connected = False
        self._last_status = self._last_status_at = None  # the server may have lost or missed it
        self.failures += 1
        self.last_error = message
        if not isinstance(error, ApiError) or error.code in (401, 403):
            await self._drop_client()  # read the kubeconfig again: a rotated token or CA
        return bodies.lease_retry_delay(self.failures, lease_duration_s)

    async def idle(self) -> None:
        """kubeconfig unset (or cleared by a reload): forget the server."""
        if self.client is not None or self.connected:
            log.info("control_plane_disabled")
        await self._drop_client()
        self.connected = self.registered = False
        self.lease = None
        self.next_status = self.next_lease = 0.0
        self._last_status = self._last_status_at = None

    async def close(self) -> None:
        await self._drop_client()


async def control_plane_loop(config: Callable[[], Config], node: Callable[[], dict[str, Any]],
                             port: Callable[[], int], api_url: Callable[[Config, int, list[dict[str, str]]], str],
                             *, sync: ControlPlaneSync | None = None,
                             sleep: Callable[[float], Any] = asyncio.sleep) -> None:
    """Keep the Node and its Lease on the control plane while `kubeconfig` is set; runs until
    cancelled. `config`, `node` and `port` are read every round (a reload applies at once)."""
    sync = sync or ControlPlaneSync()
    try:
        while True:
            cfg = config()
            if not cfg.kubeconfig:
                await sync.idle()
                await sleep(cfg.node_status_update_frequency)
                continue
            try:
                current = node()
                addresses = (current.get("status") or {}).get("addresses") or []
                delay = await sync.step(cfg, current, port(), api_url(cfg, port(), addresses))
            except Exception:  # never let a bad round end the loop
                log.exception("control_plane_sync_crashed")
                delay = bodies.BACKOFF_MAX_S
            await sleep(max(delay, 0.05))
    finally:
        await sync.close()
