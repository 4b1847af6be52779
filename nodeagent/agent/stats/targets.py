"""What the sampler must know of each pod: plain values the pod manager hands over every pass.

Everything here is derived once when the pod is admitted (cgroup paths from cgroups/layout.py,
log directories from runtime/logs.py, limits from the pod's resources), except the start times,
which change when a container (re)starts. The sampler never looks at a Pod object; `pod_target`
builds a target from one with the same layout functions the pod worker creates the cgroups with.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from nodeagent.agent.cgroups import layout
from nodeagent.core.errors import FieldError
from nodeagent.core.model import Pod
from nodeagent.core.qos import qos_class


@dataclass(frozen=True, slots=True)
class ContainerTarget:
    name: str
    cgroup: str  # driver path, e.g. "kubepods/burstable/pod<uid>/app"
    start_time: float | None = None  # epoch seconds of the current run's start; None if never started
    log_dir: str | None = None  # the container's log directory (every run's files): the "logs" usage
    rootfs_dir: str | None = None  # its writable layer, for containers from images: the "rootfs" usage
    memory_limit: int | None = None  # bytes; gives availableBytes

    def __post_init__(self) -> None:
        if not self.name:
            raise FieldError("container.name", "must not be empty")
        if not self.cgroup.strip("/"):
            raise FieldError("container.cgroup", "must name a cgroup below the agent root")


@dataclass(frozen=True, slots=True)
class PodTarget:
    namespace: str
    name: str
    uid: str
    cgroup: str  # e.g. "kubepods/burstable/pod<uid>"
    containers: tuple[ContainerTarget, ...] = ()
    start_time: float | None = None  # when the agent admitted the pod (status.startTime)
    memory_limit: int | None = None  # the pod cgroup's memory.max, if any
    volume_dirs: tuple[str, ...] = ()  # local volumes counted in ephemeral-storage (emptyDir on disk)

    def __post_init__(self) -> None:
        for field, value in (("metadata.namespace", self.namespace), ("metadata.name", self.name),
                             ("metadata.uid", self.uid)):
            if not value:
                raise FieldError(field, "must not be empty")
        if not self.cgroup.strip("/"):
            raise FieldError("pod.cgroup", "must name a cgroup below the agent root")
        names = [c.name for c in self.containers]
        if len(set(names)) != len(names):
            raise FieldError("spec.containers", f"names must be unique, got {names}")


def pod_target(pod: Pod, *, start_time: float | None = None,
               container_starts: Mapping[str, float | None] | None = None,
               log_dir: Callable[[str], str] | None = None) -> PodTarget:
    """The target of an admitted pod: its cgroup and its containers' (kubepods/<qos>/pod<uid>/<name>),
    the memory limits its cgroups get, each container's current start time and log directory
    (`log_dir(container name)`, e.g. runtime.logs.container_log_dir bound to the pod)."""
    qos = qos_class(pod)
    uid = pod.metadata.uid
    starts = container_starts or {}
    containers = tuple(
        ContainerTarget(c.name, layout.container_path(qos, uid, c.name), start_time=starts.get(c.name),
                        log_dir=log_dir(c.name) if log_dir else None,
                        memory_limit=layout.container_cgroup_spec(c).memory_max)
        for c in pod.spec.containers)
    return PodTarget(pod.metadata.namespace, pod.metadata.name, uid, layout.pod_path(qos, uid), containers,
                     start_time=start_time, memory_limit=layout.pod_cgroup_spec(pod).memory_max)


__all__ = ["ContainerTarget", "PodTarget", "pod_target"]
