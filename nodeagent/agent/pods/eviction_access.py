"""The pod side of eviction: which pods can go, what they use, evicting one, node garbage."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence

import structlog

from nodeagent.agent.eviction.evaluate import EVICTION_REASON
from nodeagent.agent.eviction.local_storage import (
    EPHEMERAL_STORAGE,
    ContainerStorageUsage,
    EmptyDirUsage,
    PodStorageUsage,
    Violation,
    local_storage_violation,
)
from nodeagent.agent.eviction.observations import PodUsage
from nodeagent.agent.eviction.signals import pods_usage
from nodeagent.agent.node.disk_usage import dir_usage
from nodeagent.agent.pods.manager import PodManager
from nodeagent.agent.pods.plan import ContainerPlan, PodPlan
from nodeagent.agent.pods.volume_plan import plan_volumes
from nodeagent.agent.runtime import logs
from nodeagent.agent.runtime.oci.runtime import BundleDirs
from nodeagent.core.model import Pod

log = structlog.get_logger(__name__)

# At most this many candidates' memory is read on the loop (about 2 ms in the UML guest, well
# under 1 ms on a host); more go to a thread as every other usage read.
INLINE_MEMORY_USAGE_PODS = 16


def _size(path: str) -> int:
    try:
        return os.lstat(path).st_blocks * 512
    except OSError:
        return 0


def _container_usage(plan: PodPlan, c: ContainerPlan) -> int:
    """A container's writable layer (an image container's overlay upper dir, in the pod's
    directory) and its logs (every run's, rotated copies included). A host-process container
    writes on the host's own filesystem, which cannot be told apart: its logs only."""
    used = dir_usage(c.config.log_dir)[0]
    if c.from_image:
        used += dir_usage(BundleDirs(os.path.join(plan.log_dir, "oci", c.name)).upper)[0]
    return used


def pod_storage_usage(plan: PodPlan) -> PodStorageUsage:
    """What the three local-storage checks read (blocking: walks the pod's containers' layers and
    logs and its disk-backed emptyDirs; run it off the loop). The pod's ephemeral usage is the sum
    of those: memory-backed emptyDirs (tmpfs), configMap / secret / hostPath volumes and the
    containers' read-only image layers are not counted."""
    volumes = plan_volumes(plan.pod, plan.log_dir).volumes.values()
    empty_dirs = [EmptyDirUsage(v.name, v.volume.size_limit, dir_usage(v.path)[0])
                  for v in volumes if v.kind == "emptyDir" and not v.memory]
    containers = [ContainerStorageUsage(c.name, None if c.init else c.spec.resources.limits.get(EPHEMERAL_STORAGE),
                                        _container_usage(plan, c)) for c in plan.all_containers]
    used = sum(v.used for v in empty_dirs) + sum(c.used for c in containers)
    return PodStorageUsage(empty_dirs, containers, used)


def _checked(plan: PodPlan) -> bool:
    """Only pods with a limit to check are measured; critical pods are never evicted (evictPod)."""
    if plan.critical:
        return False
    if EPHEMERAL_STORAGE in plan.resources.limits:  # pod-level; a container-level limit implies it
        return True
    return any(v.kind == "emptyDir" and not v.memory and v.volume.size_limit is not None
               and not v.volume.size_limit.is_zero() for v in plan_volumes(plan.pod, plan.log_dir).volumes.values())


def local_storage_violations(plans: Sequence[PodPlan]) -> list[tuple[Pod, Violation]]:
    """The pods over a local-storage limit, each with the kubelet's signal and message (blocking:
    measures only the pods with a limit; run it off the loop)."""
    out = []
    for plan in plans:
        if not _checked(plan):
            continue
        violation = local_storage_violation(plan.resources.limits, pod_storage_usage(plan))
        if violation is not None:
            out.append((plan.pod, violation))
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
        self._killed: set[str] = set()  # uids kill() SIGKILLed whose evict() has not come yet

    def evictable_pods(self) -> list[PodPlan]:
        """The active pods' plans: their criticality, QoS class and requests as admission derived them."""
        return self.manager.active_plans()

    async def usage(self, pods: Sequence[Pod], resource: str | None) -> dict[str, PodUsage]:
        """The plans are picked on the loop (the pod list changes there); the reads run on a
        thread, but memory for a few pods (two small reads per cgroup) is read right here: the
        pass is then choosing a victim at the memory line, and the hop to a thread and back
        costs more than the reads (1.3 ms p50, 12 ms max in the loaded 1-CPU UML guest; bench/README.md)."""
        plans = {w.plan.uid: w.plan for w in self.manager.pods.values()}
        known = [plans[p.metadata.uid] for p in pods if p.metadata.uid in plans]
        if resource == "memory" and len(known) <= INLINE_MEMORY_USAGE_PODS:
            return pods_usage(self.manager.env.driver, known, resource)
        return await asyncio.to_thread(pods_usage, self.manager.env.driver, known, resource)

    async def local_storage(self) -> list[tuple[Pod, Violation]]:
        """EvictionManager's local-storage check over the active pods with a limit to check."""
        plans = [p for p in self.manager.active_plans()
                 if p.pod.spec.volumes or EPHEMERAL_STORAGE in p.resources.limits]  # the rest: on the thread
        if not plans:
            return []
        return await asyncio.to_thread(local_storage_violations, plans)

    def kill(self, pod: Pod) -> None:
        """SIGKILL the pod's processes now (a hard eviction); its evict() follows in the same pass.
        The worker turns terminal at once, so nothing in it starts or restarts meanwhile."""
        worker = self.manager.pods.get((pod.metadata.namespace, pod.metadata.name))
        if worker is None or worker.terminal:
            return
        self._killed.add(pod.metadata.uid)
        worker.kill_now()

    async def evict(self, pod: Pod, grace_period: float, message: str) -> None:
        worker = self.manager.pods.get((pod.metadata.namespace, pod.metadata.name))
        killed = pod.metadata.uid in self._killed
        self._killed.discard(pod.metadata.uid)
        if worker is None or (worker.terminal and not killed):
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
