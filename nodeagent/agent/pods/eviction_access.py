"""The pod side of eviction: which pods can go, what they use, evicting one, node garbage."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence

import structlog

from nodeagent.agent.eviction.evaluate import EVICTION_REASON
from nodeagent.agent.eviction.local_storage import EmptyDirUsage, empty_dir_violation
from nodeagent.agent.eviction.observations import PodUsage
from nodeagent.agent.eviction.signals import pods_usage
from nodeagent.agent.node.disk_usage import dir_usage
from nodeagent.agent.pods.manager import PodManager
from nodeagent.agent.pods.plan import PodPlan
from nodeagent.agent.pods.volume_plan import plan_volumes
from nodeagent.agent.runtime import logs
from nodeagent.core.model import Pod

log = structlog.get_logger(__name__)


def _size(path: str) -> int:
    try:
        return os.lstat(path).st_blocks * 512
    except OSError:
        return 0


def local_storage_violations(plans: Sequence[PodPlan]) -> list[tuple[Pod, str]]:
    """The pods whose disk-backed emptyDir exceeds its sizeLimit, with the kubelet's message
    (blocking: walks those volumes only; run it off the loop)."""
    out = []
    for plan in plans:
        volumes = plan_volumes(plan.pod, plan.log_dir).volumes.values()
        limited = [v for v in volumes if v.kind == "emptyDir" and not v.memory and v.volume.size_limit is not None
                   and not v.volume.size_limit.is_zero()]
        if not limited:
            continue
        usage = [EmptyDirUsage(v.name, v.volume.size_limit, dir_usage(v.path)[0]) for v in limited]
        message = empty_dir_violation(usage)
        if message is not None:
            out.append((plan.pod, message))
    return out


def _tree_size(path: str) -> int:
    total = 0
    for root, dirs, files in os.walk(path, onerror=lambda e: None):
        total += sum(_size(os.path.join(root, n)) for n in files + dirs)
    return total


class PodEvictionAccess:
    """Implements eviction.manager.PodsAccess over the PodManager."""

    def __init__(self, manager: PodManager) -> None:
        self.manager = manager

    def evictable_pods(self) -> list[PodPlan]:
        """The active pods' plans: their criticality, QoS class and requests as admission derived them."""
        return self.manager.active_plans()

    async def usage(self, pods: Sequence[Pod], resource: str | None) -> dict[str, PodUsage]:
        """The plans are picked on the loop (the pod list changes there); the reads run on a thread."""
        plans = {w.plan.uid: w.plan for w in self.manager.pods.values()}
        known = [plans[p.metadata.uid] for p in pods if p.metadata.uid in plans]
        return await asyncio.to_thread(pods_usage, self.manager.env.driver, known, resource)

    async def local_storage(self) -> list[tuple[Pod, str]]:
        """EvictionManager's local-storage check over the active pods with volumes."""
        plans = [p for p in self.manager.active_plans() if p.pod.spec.volumes]
        if not plans:
            return []
        return await asyncio.to_thread(local_storage_violations, plans)

    async def evict(self, pod: Pod, grace_period: float, message: str) -> None:
        worker = self.manager.pods.get((pod.metadata.namespace, pod.metadata.name))
        if worker is None or worker.terminal:
            return
        await self.manager.terminate(worker, grace_period, remove=False, reason=EVICTION_REASON, message=message)

    async def reclaim_node_garbage(self) -> int:
        """Terminated pods' data and logs, and logs of containers' earlier runs."""
        return await asyncio.to_thread(self._reclaim)

    def _reclaim(self) -> int:
        freed = 0
        for worker in list(self.manager.pods.values()):
            pod_dir = worker.plan.log_dir
            # every finished pod, not only deleted/evicted ones: a completed pod (restartPolicy
            # Never/OnFailure) still listed holds dead containers, which the kubelet's
            # DeleteAllUnusedContainers removes for disk pressure as well
            if worker.finished:
                freed += _tree_size(pod_dir)
                logs.remove_pod_dir(pod_dir)
                continue
            for cw in worker.workers.values():
                current = cw.log_path
                directory = os.path.dirname(current)
                try:
                    names = os.listdir(directory)
                except OSError:
                    continue
                for name in names:
                    path = os.path.join(directory, name)
                    if (name.endswith(".log") and path != current) or ".log." in name:  # earlier runs, rotated copies
                        size = _size(path)
                        try:
                            os.unlink(path)
                            freed += size
                        except OSError:
                            pass
        log.info("node_garbage_reclaimed", bytes=freed)
        return freed
