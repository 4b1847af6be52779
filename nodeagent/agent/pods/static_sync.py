"""Static pods follow their files: started, replaced or stopped as files appear, change or go.

Each `sync()` (at start and every housekeepingInterval) compares what runs with what the files
say, not only with the previous scan: pods restored from checkpoints must follow files edited or
removed while the agent was down. A file's pod that is not running is (re)tried every round, so a
static pod refused once (e.g. no room yet) starts when it can. An evicted static pod comes back
once no pressure condition holds (the kubelet leaves it dead, kubernetes#76598). A broken file never
stops the pod its last good version started, and is listed by the API (`error_entries`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import structlog

from nodeagent.agent.config.settings import Config
from nodeagent.agent.eviction.evaluate import EVICTION_REASON
from nodeagent.agent.node.allocatable import NodeAllocatable
from nodeagent.agent.node.static_pods import ManifestError, StaticPodSource
from nodeagent.agent.pods.manager import PodManager
from nodeagent.core.wellknown import CONFIG_HASH, CONFIG_SOURCE, FILE_SOURCE, MANIFEST_PATH

log = structlog.get_logger(__name__)


def error_entry(error: ManifestError) -> dict[str, Any]:
    """A Pod-shaped list entry for a static pod file that could not be parsed."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": error.path.name, "namespace": "",
                     "annotations": {CONFIG_SOURCE: FILE_SOURCE, MANIFEST_PATH: str(error.path)}},
        "status": {"phase": "Pending", "reason": "InvalidManifest", "message": str(error)},
    }


class StaticPodSync:
    def __init__(self, manager: PodManager, node_name: str, directory: str | None,
                 pressure: Callable[[], tuple[str, ...]]) -> None:
        self.manager = manager
        self.node_name = node_name
        self.pressure = pressure  # the node conditions that hold now (the eviction manager's)
        self.directory = directory
        self.source = StaticPodSource(directory, node_name) if directory else None
        self.errors: list[ManifestError] = []
        self._seen: set[tuple[str, str]] = set()  # static pod keys the files gave since start

    def reconfigure(self, config: Config, allocatable: NodeAllocatable) -> None:
        """A reload: a new staticPodPath is scanned from scratch (pods of the old one are no
        longer wanted and stop at the next sync)."""
        if config.static_pod_path != self.directory:
            self.directory = config.static_pod_path
            self.source = StaticPodSource(self.directory, self.node_name) if self.directory else None
            self._seen = set()

    def error_entries(self) -> list[dict[str, Any]]:
        return [error_entry(e) for e in self.errors]

    async def sync(self) -> None:
        """Start, replace or stop static pods as their files appeared, changed or went away."""
        if self.source is None:
            return
        manager = self.manager
        diff = await asyncio.to_thread(self.source.scan)
        self.errors = diff.errors
        wanted = self.source.pods
        removed = {sp.key for sp in diff.removed}
        self._seen |= wanted.keys()
        replacing = []
        for key, worker in list(manager.pods.items()):
            annotations = worker.pod.metadata.annotations
            if worker.terminal or annotations.get(CONFIG_SOURCE) != FILE_SOURCE:
                continue
            sp = wanted.get(key)
            if sp is None and key not in removed and (key in self._seen or diff.errors):
                continue  # a restored pod whose file may be the broken one: a bad edit never stops a pod
            if sp is None or annotations.get(CONFIG_HASH) != sp.hash:
                grace = float(worker.pod.spec.termination_grace_period_seconds)
                task = manager.terminate(worker, grace, remove=True)
                if sp is not None:
                    replacing.append(task)
        if replacing:
            await asyncio.gather(*replacing)
        for key, sp in self.source.pods.items():
            current = manager.pods.get(key)
            evicted = current is not None and current.reason == EVICTION_REASON and current.finished
            if current is not None and evicted and not self.pressure():
                del manager.pods[key]  # the kubelet leaves it dead (kubernetes#76598); we bring it back
                log.info("static_pod_readmitted", pod="/".join(key))
            elif current is not None:
                continue
            try:
                await manager.create_pod(sp.pod.to_dict())
            except Exception as e:  # noqa: BLE001 - one bad static pod never stops the others
                log.error("static_pod_start_failed", pod="/".join(key), path=str(sp.path), error=str(e))
