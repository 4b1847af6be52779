"""ConfigMaps and Secrets of the server the agent is joined to, read for the pods' volumes (the
kubelet's configmap and secret managers in their simplest, "Get" strategy: one GET per object
each time a container is created and each volume refresh period, nothing cached, nothing
watched), and a pod itself when its downwardAPI files show its labels or annotations.

While `kubeconfig` is unset the agent has no such source and every object reads as not found (a
required configMap/secret volume then leaves its container in CreateContainerConfigError). With
the node's credentials the server's Node authorizer answers only for objects a pod bound to this
node names; a 404 is "not found", any other failure an OSError (the container waits in
CreateContainerError and is tried again with back-off).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import aiohttp

from nodeagent.agent.cluster_client.sync import ApiError, KubeconfigClient
from nodeagent.agent.config.settings import Config
from nodeagent.daemonkit.kubeconfig import KubeconfigError

RESOURCES = ("configmaps", "secrets", "pods")  # pods: a pod's own labels and annotations (downwardAPI files)


class ObjectSource(KubeconfigClient):
    def __init__(self, config: Callable[[], Config], timeout: float = 10.0) -> None:
        super().__init__(timeout)
        self._config = config

    async def get(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The object, or None when it does not exist (or the agent is joined to no server)."""
        if resource not in RESOURCES:
            raise ValueError(f"resource: {resource!r} is not one of {RESOURCES}")
        kubeconfig = self._config().kubeconfig
        if not kubeconfig:
            return None
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/{resource}/{quote(name, safe='')}"
        try:
            client = await self._client(kubeconfig)
            code, body = await client.request("GET", path)
        except (KubeconfigError, aiohttp.ClientError, TimeoutError) as e:
            await self._drop_client()
            raise OSError(f"GET {path}: {type(e).__name__}: {e}") from None
        if code == 404:
            return None
        if code != 200 or not isinstance(body, dict):
            if code in (401, 403):
                await self._drop_client()  # a rotated credential is read again next time
            raise OSError(str(ApiError("GET", path, code, body)))
        return body

    async def close(self) -> None:
        await self._drop_client()
