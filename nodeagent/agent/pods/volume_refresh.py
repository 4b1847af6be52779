"""Keeping a running pod's configMap, secret, downwardAPI and projected files up to date.

Periodic, not watch-driven: every `volumeRefreshPeriod` (10 s by default) the pod's loop reads the
ConfigMaps and Secrets its volumes name (the same GETs as at container creation, volume_setup.
fetch_sources), and the pod itself when a downwardAPI file shows its labels or annotations, and
hands them to PodVolumeHost.refresh, whose atomic writer replaces a changed set of files at once
and writes nothing for an unchanged one. Why not a watch: the agent keeps no cache of these
objects (objects.py reads them on demand, as the kubelet's "Get" strategy), a watch per object
kind and namespace would be a second long-lived stream per pod source for a few small objects,
and the kubelet itself only rewrites the files on its pod sync (syncFrequency, 1 min, plus its
cache's TTL), so a short period is already quicker than upstream. The cost is a few GETs per pod
with such volumes per period; an object that cannot be read now is tried again next period and
the files stay as they are.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import structlog

from nodeagent.agent.pods.volume_setup import ObjectGetter, PodVolumeHost, fetch_sources
from nodeagent.core.model import Pod

log = structlog.get_logger(__name__)

DEFAULT_PERIOD_S = 10.0


def with_metadata(pod: Pod, server_pod: dict[str, object]) -> Pod:
    """`pod` with the server's labels and annotations (the only fields a running pod's downwardAPI
    files can see change)."""
    meta = server_pod.get("metadata")
    if not isinstance(meta, dict):
        return pod
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    annotations = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
    if labels == (pod.metadata.labels or {}) and annotations == (pod.metadata.annotations or {}):
        return pod
    return pod.model_copy(update={"metadata": pod.metadata.model_copy(
        update={"labels": labels, "annotations": annotations})})


async def refresh_once(host: PodVolumeHost, get: ObjectGetter | None,
                       off_loop: Callable[..., Awaitable[list[str]]]) -> list[str]:
    """One refresh: the objects read (OSError when they cannot be now), the files rewritten off
    the loop; the names of the volumes that changed."""
    pod = host.pod
    ns, name = pod.metadata.namespace, pod.metadata.name
    if host.reads_pod_metadata and get is not None:
        server_pod = await get("pods", ns, name)
        if server_pod is not None:
            pod = with_metadata(pod, dict(server_pod))
    sources = await fetch_sources(host.volumes, ns, get)
    return await off_loop(host.refresh, sources, pod)


async def refresh_loop(host: PodVolumeHost, get: ObjectGetter | None, period: float, *,
                       sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                       off_loop: Callable[..., Awaitable[list[str]]] = asyncio.to_thread) -> None:
    """Until cancelled (the pod's stop): refresh_once every `period` seconds."""
    while True:
        await sleep(period)
        try:
            await refresh_once(host, get, off_loop)
        except OSError as e:
            log.warning("volume_refresh_unavailable", pod=host.pod.key, error=str(e))

