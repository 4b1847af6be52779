"""What the resource-metrics sampler needs of each pod, taken from its plan (derived once at
admission) plus the start times, which change when a container (re)starts."""

from __future__ import annotations

from collections.abc import Mapping

from nodeagent.agent.pods.plan import PodPlan
from nodeagent.agent.pods.volume_plan import plan_volumes
from nodeagent.agent.stats.targets import ContainerTarget, PodTarget


def stats_target(plan: PodPlan, *, start_time: float | None = None,
                 container_starts: Mapping[str, float | None] | None = None) -> PodTarget:
    """The pod's and its containers' cgroups, memory limits, log directories and start times, and
    its disk-backed emptyDirs (counted in its ephemeral-storage, as the kubelet counts them)."""
    meta = plan.pod.metadata
    starts = container_starts or {}
    containers = tuple(
        ContainerTarget(c.name, c.cgroup_path, start_time=starts.get(c.name), log_dir=c.config.log_dir,
                        memory_limit=c.cgroup_spec.memory_max)
        for c in plan.containers)
    return PodTarget(meta.namespace, meta.name, meta.uid, plan.cgroup_path, containers,
                     start_time=start_time, memory_limit=plan.cgroup_spec.memory_max,
                     volume_dirs=plan_volumes(plan.pod, plan.log_dir).local_dirs if plan.pod.spec.volumes else ())


__all__ = ["stats_target"]
