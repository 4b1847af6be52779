"""Registration with the central scheduler: POST this node's status there, on start and periodically.

While `schedulerURL` is set, the agent sends its Node object to
`<schedulerURL>/api/v1/nodes/<name>/status` at once and then every `nodeStatusUpdateFrequency`
(the kubelet's node status updates). The Node carries the URL of the agent's own API in the
annotation `nodeagent.io/api-url`, which is how the scheduler learns where to bind pods.
The config is read through a callable on every round, so a reload that sets, changes or clears
the three keys takes effect without a restart; the token file is re-read on every report
(rotation). A failed report is logged once per failure streak and retried the next round; the
scheduler marks the node NotReady if reports stop for its nodeMonitorGracePeriod.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import aiohttp
import structlog

from nodeagent.agent.config.settings import Config
from nodeagent.core.wellknown import API_URL as URL_ANNOTATION
from nodeagent.daemonkit.auth import read_token

log = structlog.get_logger(__name__)

DEFAULT_TIMEOUT = 10.0


def agent_api_url(config: Config, port: int, addresses: list[dict[str, str]] | None = None) -> str:
    """The URL the scheduler should use for this agent's API. A wildcard listen address is
    replaced by the node's first InternalIP (then its Hostname), as the scheduler cannot dial it."""
    scheme = "https" if config.tls_cert_file else "http"
    host = config.address
    if ipaddress.ip_address(host).is_unspecified:
        by_type = {a.get("type"): a.get("address") for a in reversed(addresses or [])}
        host = by_type.get("InternalIP") or by_type.get("Hostname") or "127.0.0.1"
    try:
        if ipaddress.ip_address(host).version == 6:
            host = f"[{host}]"
    except ValueError:
        pass  # a host name
    return f"{scheme}://{host}:{port}"


def status_body(node: dict[str, Any], api_url: str) -> dict[str, Any]:
    """The Node object with the API URL annotation added (the input is not changed)."""
    meta = dict(node.get("metadata") or {})
    meta["annotations"] = {**(meta.get("annotations") or {}), URL_ANNOTATION: api_url}
    return {**node, "metadata": meta}


class Registration:
    """Sends the reports; one aiohttp session for the agent's lifetime."""

    def __init__(self, timeout: float = DEFAULT_TIMEOUT) -> None:
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None
        self.failing: str | None = None  # the last error while reports fail
        self.sent = 0

    async def report(self, config: Config, node: dict[str, Any], api_url: str) -> bool:
        """One report; True when the scheduler took it (2xx)."""
        assert config.scheduler_url
        name = str((node.get("metadata") or {}).get("name") or config.node_name)
        url = f"{config.scheduler_url}/api/v1/nodes/{quote(name, safe='')}/status"
        headers = {}
        try:
            if config.scheduler_token_file:
                token = await asyncio.to_thread(read_token, config.scheduler_token_file)
                headers["Authorization"] = f"Bearer {token.decode()}"
            if self._session is None or self._session.closed:
                self._session = aiohttp.ClientSession(timeout=self._timeout)
            async with self._session.post(url, json=status_body(node, api_url), headers=headers) as resp:
                if resp.status >= 300:
                    text = (await resp.text())[:300]
                    raise RuntimeError(f"HTTP {resp.status}: {text}")
        except (aiohttp.ClientError, TimeoutError, OSError, RuntimeError, ValueError) as e:
            error = f"{type(e).__name__}: {e}"
            if self.failing is None:
                log.warning("scheduler_report_failed", url=url, error=error)
            self.failing = error
            return False
        if self.failing is not None or self.sent == 0:
            log.info("scheduler_registered", url=url, node=name, api_url=api_url)
        self.failing = None
        self.sent += 1
        return True

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


async def registration_loop(config: Callable[[], Config], node: Callable[[], dict[str, Any]],
                            port: Callable[[], int], *, registration: Registration | None = None,
                            sleep: Callable[[float], Any] = asyncio.sleep) -> None:
    """Report to the scheduler while schedulerURL is set (see the module docstring); runs until
    cancelled. `config`, `node` and `port` are read every round."""
    reg = registration or Registration()
    try:
        while True:
            cfg = config()
            if cfg.scheduler_url:
                try:
                    current = node()
                    addresses = (current.get("status") or {}).get("addresses") or []
                    await reg.report(cfg, current, agent_api_url(cfg, port(), addresses))
                except Exception:  # never let a bad round end the loop
                    log.exception("scheduler_report_crashed")
            await sleep(cfg.node_status_update_frequency)
    finally:
        await reg.close()
