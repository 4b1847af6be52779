"""What the sampler must know of each pod: plain values the pod manager hands over every pass.

Everything here comes from the pod's plan, derived once when the pod is admitted (cgroup paths,
memory limits, log directories; pods/stats_targets.py), except the start times, which change when
a container (re)starts. The sampler never looks at a Pod object.
"""

from __future__ import annotations

from dataclasses import dataclass

from nodeagent.core.errors import FieldError


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


__all__ = ["ContainerTarget", "PodTarget"]
