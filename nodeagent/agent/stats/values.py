"""One sampling pass as plain values: what /metrics/resource and /stats/summary are made from.

The shape follows the kubelet's Summary API (k8s.io/kubelet/pkg/apis/stats/v1alpha1): a node, its
"pods" system container (the kubepods cgroup), and per pod its cgroup's figures, its containers'
and its ephemeral storage. Times are epoch seconds of the read that produced the figure (each
cgroup is read at its own instant, which is what a rate computed later from two scrapes needs).
None means "not known": the field is left out, as the kubelet leaves out a nil pointer.

What a pass builds per cgroup or per pod (CpuStats, MemoryStats, FsStats, ContainerStats,
PodStats) are NamedTuples: immutable like a frozen dataclass, and cheaper to build (a pass over
100 pods builds about a thousand of them; the figures: bench/README.md, "NamedTuples for a pass's
values").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


class CpuStats(NamedTuple):
    time: float
    usage_core_nano_seconds: int  # cumulative
    usage_nano_cores: int | None = None  # the rate over the CPU window; None until two reads


class MemoryStats(NamedTuple):
    time: float
    usage_bytes: int
    working_set_bytes: int
    rss_bytes: int | None = None
    page_faults: int | None = None
    major_page_faults: int | None = None
    available_bytes: int | None = None  # limit - working set, when there is a limit


class FsStats(NamedTuple):
    """`used`/`inodes_used` are what the owner uses; the rest describes the filesystem under it."""

    time: float
    used_bytes: int | None = None
    inodes_used: int | None = None
    capacity_bytes: int | None = None
    available_bytes: int | None = None
    inodes: int | None = None
    inodes_free: int | None = None


class ContainerStats(NamedTuple):
    name: str
    start_time: float | None  # the current run's start (epoch seconds); None before the first start
    cpu: CpuStats | None = None
    memory: MemoryStats | None = None
    rootfs: FsStats | None = None
    logs: FsStats | None = None


class PodStats(NamedTuple):
    namespace: str
    name: str
    uid: str
    start_time: float | None
    containers: tuple[ContainerStats, ...] = ()
    cpu: CpuStats | None = None
    memory: MemoryStats | None = None
    ephemeral_storage: FsStats | None = None


@dataclass(frozen=True, slots=True)
class NodeStats:
    name: str
    start_time: float | None  # boot time
    cpu: CpuStats | None = None
    memory: MemoryStats | None = None
    fs: FsStats | None = None
    system_containers: tuple[ContainerStats, ...] = ()  # "pods": the kubepods cgroup


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one pass saw. `time` is when it started (epoch seconds); `monotonic` the same
    instant on the monotonic clock (for staleness)."""

    time: float
    monotonic: float
    node: NodeStats
    pods: tuple[PodStats, ...] = ()


__all__ = ["ContainerStats", "CpuStats", "FsStats", "MemoryStats", "NodeStats", "PodStats", "Snapshot"]
