"""Talking to the node agents: their node status, their pods, binding and deleting (aiohttp client).

Each call returns plain values or raises one of three errors the scheduler acts on:
AgentRefused (a 4xx Status: the agent knows better, e.g. 422 OutOfmemory under pressure),
AgentConflict (409: the pod is already there), AgentUnavailable (no answer, 5xx, timeout).
`Agents` is the protocol the service needs, so tests and the benchmark pass a fake.
"""

from __future__ import annotations

import ssl
from typing import Any, Protocol
from urllib.parse import quote

import aiohttp


class AgentError(Exception):
    def __init__(self, node: str, message: str, code: int = 0, reason: str = "") -> None:
        super().__init__(f"{node}: {message}")
        self.node, self.message, self.code, self.reason = node, message, code, reason


class AgentUnavailable(AgentError):
    """No usable answer: connection refused, timeout, 5xx."""


class AgentRefused(AgentError):
    """The agent answered with a 4xx Status: it will not do it (reason: e.g. OutOfmemory)."""


class AgentConflict(AgentError):
    """409: the pod already exists on the agent (body: the agent's copy when it sent one)."""


class Agents(Protocol):
    async def get_node(self, node: str, url: str) -> dict[str, Any]: ...

    async def list_pods(self, node: str, url: str) -> list[dict[str, Any]]: ...

    async def get_pod(self, node: str, url: str, ns: str, name: str) -> dict[str, Any] | None: ...

    async def create_pod(self, node: str, url: str, manifest: dict[str, Any]) -> dict[str, Any]: ...

    async def delete_pod(self, node: str, url: str, ns: str, name: str,
                         grace: int | None) -> dict[str, Any] | None:
        """None: the agent has no such pod (404)."""
        ...

    async def close(self) -> None: ...


class HttpAgents:
    """The real client: one aiohttp session, bearer token from agentTokenFile."""

    def __init__(self, token: str | None = None, timeout: float = 10.0, ca_file: str | None = None) -> None:
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._ssl: ssl.SSLContext | bool = ssl.create_default_context(cafile=ca_file) if ca_file else True
        self._session: aiohttp.ClientSession | None = None

    def _s(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=self._timeout, headers=self._headers,
                connector=aiohttp.TCPConnector(limit=64, ssl=self._ssl))
        return self._session

    async def _call(self, node: str, method: str, url: str, body: Any = None,
                    params: dict[str, str] | None = None) -> tuple[int, Any]:
        try:
            async with self._s().request(method, url, json=body, params=params) as resp:
                try:
                    data = await resp.json(content_type=None)
                except (ValueError, aiohttp.ContentTypeError):
                    data = None
                status = resp.status
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            raise AgentUnavailable(node, f"{method} {url}: {type(e).__name__}: {e}") from None
        if status >= 500:
            raise AgentUnavailable(node, f"{method} {url}: HTTP {status}: {_message(data)}", status)
        return status, data

    async def get_node(self, node: str, url: str) -> dict[str, Any]:
        status, data = await self._call(node, "GET", f"{url}/api/v1/node")
        if status != 200 or not isinstance(data, dict):
            raise AgentUnavailable(node, f"GET /api/v1/node: HTTP {status}: {_message(data)}", status)
        return data

    async def list_pods(self, node: str, url: str) -> list[dict[str, Any]]:
        status, data = await self._call(node, "GET", f"{url}/api/v1/pods")
        if status != 200 or not isinstance(data, dict) or not isinstance(data.get("items"), list):
            raise AgentUnavailable(node, f"GET /api/v1/pods: HTTP {status}: {_message(data)}", status)
        return [p for p in data["items"] if isinstance(p, dict)]

    async def get_pod(self, node: str, url: str, ns: str, name: str) -> dict[str, Any] | None:
        status, data = await self._call(node, "GET", _pod_url(url, ns, name))
        if status == 404:
            return None
        if status != 200 or not isinstance(data, dict):
            raise AgentUnavailable(node, f"GET pod {ns}/{name}: HTTP {status}: {_message(data)}", status)
        return data

    async def create_pod(self, node: str, url: str, manifest: dict[str, Any]) -> dict[str, Any]:
        ns = manifest["metadata"]["namespace"]
        status, data = await self._call(node, "POST", f"{url}/api/v1/namespaces/{quote(ns, safe='')}/pods",
                                        body=manifest)
        if status in (200, 201) and isinstance(data, dict):
            return data
        reason = data.get("reason", "") if isinstance(data, dict) else ""
        if status == 409:
            raise AgentConflict(node, _message(data), status, reason)
        raise AgentRefused(node, _message(data), status, reason)

    async def delete_pod(self, node: str, url: str, ns: str, name: str,
                         grace: int | None) -> dict[str, Any] | None:
        params = {"gracePeriodSeconds": str(grace)} if grace is not None else None
        status, data = await self._call(node, "DELETE", _pod_url(url, ns, name), params=params)
        if status == 404:
            return None
        if status != 200:
            reason = data.get("reason", "") if isinstance(data, dict) else ""
            raise AgentRefused(node, _message(data), status, reason)
        return data if isinstance(data, dict) else {}

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


def _pod_url(url: str, ns: str, name: str) -> str:
    return f"{url}/api/v1/namespaces/{quote(ns, safe='')}/pods/{quote(name, safe='')}"


def _message(data: Any) -> str:
    if isinstance(data, dict) and data.get("message"):
        return str(data["message"])
    return "no message"
