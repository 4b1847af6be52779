"""/stats/summary: a Snapshot as the kubelet's Summary API JSON (stats/v1alpha1 Summary), pure.

Field names and order as the kubelet's Go structs marshal them; a figure that is not known is
left out (the structs' nil pointers are omitempty); times are metav1.Time (RFC 3339, whole
seconds; an unset time is null). `only_cpu_and_memory` keeps what GetCPUAndMemoryStats returns:
the node's and system containers' cpu and memory, and per pod its podRef, startTime, containers
(name, startTime, cpu, memory), cpu and memory.
"""

from __future__ import annotations

from typing import Any

from nodeagent.agent.stats.values import ContainerStats, CpuStats, FsStats, MemoryStats, PodStats, Snapshot
from nodeagent.core.timefmt import rfc3339


def _cpu(s: CpuStats) -> dict[str, Any]:
    out: dict[str, Any] = {"time": rfc3339(s.time)}
    if s.usage_nano_cores is not None:
        out["usageNanoCores"] = s.usage_nano_cores
    out["usageCoreNanoSeconds"] = s.usage_core_nano_seconds
    return out


def _memory(s: MemoryStats) -> dict[str, Any]:
    out: dict[str, Any] = {"time": rfc3339(s.time)}
    for key, value in (("availableBytes", s.available_bytes), ("usageBytes", s.usage_bytes),
                       ("workingSetBytes", s.working_set_bytes), ("rssBytes", s.rss_bytes),
                       ("pageFaults", s.page_faults), ("majorPageFaults", s.major_page_faults)):
        if value is not None:
            out[key] = value
    return out


def _fs(s: FsStats) -> dict[str, Any]:
    out: dict[str, Any] = {"time": rfc3339(s.time)}
    for key, value in (("availableBytes", s.available_bytes), ("capacityBytes", s.capacity_bytes),
                       ("usedBytes", s.used_bytes), ("inodesFree", s.inodes_free), ("inodes", s.inodes),
                       ("inodesUsed", s.inodes_used)):
        if value is not None:
            out[key] = value
    return out


def _put(out: dict[str, Any], key: str, value: Any, render: Any) -> None:
    if value is not None:
        out[key] = render(value)


def _container(c: ContainerStats, only_cpu_and_memory: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"name": c.name, "startTime": rfc3339(c.start_time)}
    _put(out, "cpu", c.cpu, _cpu)
    _put(out, "memory", c.memory, _memory)
    if not only_cpu_and_memory:
        _put(out, "rootfs", c.rootfs, _fs)
        _put(out, "logs", c.logs, _fs)
    return out


def _pod(p: PodStats, only_cpu_and_memory: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "podRef": {"name": p.name, "namespace": p.namespace, "uid": p.uid},
        "startTime": rfc3339(p.start_time),
        "containers": [_container(c, only_cpu_and_memory) for c in p.containers],
    }
    _put(out, "cpu", p.cpu, _cpu)
    _put(out, "memory", p.memory, _memory)
    if not only_cpu_and_memory:
        _put(out, "ephemeral-storage", p.ephemeral_storage, _fs)
    return out


def summary(snap: Snapshot, *, only_cpu_and_memory: bool = False) -> dict[str, Any]:
    """The Summary object for one snapshot; pods ordered by namespace and name."""
    node = snap.node
    node_out: dict[str, Any] = {"nodeName": node.name}
    if node.system_containers:
        node_out["systemContainers"] = [_container(c, only_cpu_and_memory) for c in node.system_containers]
    node_out["startTime"] = rfc3339(node.start_time)
    _put(node_out, "cpu", node.cpu, _cpu)
    _put(node_out, "memory", node.memory, _memory)
    if not only_cpu_and_memory:
        _put(node_out, "fs", node.fs, _fs)
    pods = sorted(snap.pods, key=lambda p: (p.namespace, p.name))
    return {"node": node_out, "pods": [_pod(p, only_cpu_and_memory) for p in pods]}


__all__ = ["summary"]
