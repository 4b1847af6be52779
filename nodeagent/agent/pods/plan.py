"""The pod plan: what every layer below admission needs about one pod, derived once.

Admission parses a manifest into a Pod and `plan_pod` turns it into a PodPlan: the QoS class,
criticality, the summed requests and limits, the pod's and each container's cgroup path and
values, each container's oom_score_adj and launch spec, and the pod's directory under stateDir
(its logs). The pod worker, the process runtime, the cgroup driver, checkpoint restore and the
eviction side read these values and never derive them from the manifest again, so each fact has
one definition and one moment it is computed.

Pure, except that a launch spec resolves HOME from the password database (LaunchSpec.from_container,
as runc does) and `clamp_oom_score_adj` is the caller's: the agent's is the spawn module's,
which knows whether this process may lower an oom_score_adj.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from nodeagent.agent.cgroups import layout
from nodeagent.agent.cgroups.driver import CgroupSpec
from nodeagent.agent.runtime import logs
from nodeagent.agent.runtime.spawn import LaunchSpec
from nodeagent.agent.runtime.supervisor import ContainerConfig
from nodeagent.core.model import Pod
from nodeagent.core.qos import QOSClass, is_critical, is_node_critical, is_static, oom_score_adj, qos_class
from nodeagent.core.quantity import Quantity
from nodeagent.core.resources import PodResources, pod_resources


@dataclass(frozen=True)
class ContainerPlan:
    name: str
    cgroup_path: str
    cgroup_spec: CgroupSpec
    config: ContainerConfig  # what the runtime runs: launch spec, oom_score_adj, log dir, restart policy


@dataclass(frozen=True)
class PodPlan:
    pod: Pod
    qos: QOSClass
    critical: bool  # never evicted, admitted under any pressure (static, mirror, system priority)
    static: bool  # from a file on this node (phase rules differ)
    resources: PodResources
    cgroup_path: str
    cgroup_spec: CgroupSpec
    log_dir: str  # <stateDir>/pods/<namespace>_<name>_<uid>: what the pod keeps on disk
    containers: tuple[ContainerPlan, ...]

    @property
    def key(self) -> tuple[str, str]:
        return self.pod.metadata.namespace, self.pod.metadata.name

    @property
    def uid(self) -> str:
        return self.pod.metadata.uid

    @property
    def requests(self) -> Mapping[str, Quantity]:
        return self.resources.requests

    @property
    def cpu_request_milli(self) -> int:
        return self.resources.cpu_request_milli

    def container(self, name: str) -> ContainerPlan | None:
        return next((c for c in self.containers if c.name == name), None)


def _unclamped(adj: int) -> int:
    return adj


def plan_pod(pod: Pod, *, state_dir: str, memory_capacity: int,
             clamp_oom_score_adj: Callable[[int], int] = _unclamped) -> PodPlan:
    """Everything below admission needs about `pod`; FieldError or ValueError when a value
    cannot be made (a name that cannot be a path, a container without a command)."""
    meta = pod.metadata
    qos = qos_class(pod)
    node_critical = is_node_critical(pod)
    resources = pod_resources(pod)
    cgroup_path = layout.pod_path(qos, meta.uid)
    log_dir = logs.pod_log_dir(state_dir, meta.namespace, meta.name, meta.uid)
    containers = []
    for c in pod.spec.containers:
        memory = c.resources.requests.get("memory")
        adj = oom_score_adj(qos, node_critical, memory.value() if memory is not None else 0, memory_capacity)
        config = ContainerConfig(
            name=c.name,
            launch=LaunchSpec.from_container(c, pod.spec.security_context),
            log_dir=logs.container_dir(log_dir, c.name),
            restart_policy=pod.spec.restart_policy,
            oom_score_adj=clamp_oom_score_adj(adj),
            pod_name=meta.name,
            pod_namespace=meta.namespace,
            pod_uid=meta.uid,
            image=c.image or "",
        )
        containers.append(ContainerPlan(c.name, layout.container_path(qos, meta.uid, c.name),
                                        layout.container_cgroup_spec(c), config))
    return PodPlan(pod=pod, qos=qos, critical=is_critical(pod), static=is_static(pod), resources=resources,
                   cgroup_path=cgroup_path, cgroup_spec=layout.pod_cgroup_spec(qos, resources), log_dir=log_dir,
                   containers=tuple(containers))
