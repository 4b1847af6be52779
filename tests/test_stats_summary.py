"""/stats/summary JSON: the kubelet's Summary API field names, nesting, omissions and times."""

from __future__ import annotations

import json

from nodeagent.agent.stats.summary import summary
from nodeagent.agent.stats.values import (
    ContainerStats,
    CpuStats,
    FsStats,
    MemoryStats,
    NodeStats,
    PodStats,
    Snapshot,
)

T = 1_700_000_000.75  # 2023-11-14T22:13:20Z (metav1.Time drops the fraction)
STAMP = "2023-11-14T22:13:20Z"
BOOT = 1_699_990_000.0
BOOT_STAMP = "2023-11-14T19:26:40Z"
FS = dict(capacity_bytes=100 << 30, available_bytes=60 << 30, inodes=1000, inodes_free=900)


def snapshot() -> Snapshot:
    node = NodeStats(
        "node-1", BOOT,
        CpuStats(T, 50_000_000_000, 250_000_000),
        MemoryStats(T, 3 << 30, 2 << 30, 1 << 30, available_bytes=6 << 30),
        FsStats(T, 40 << 30, 100, **FS),
        (ContainerStats("pods", BOOT, CpuStats(T, 7_000_000_000, 100_000_000), MemoryStats(T, 300, 200, 100, 5, 1)),),
    )
    app = ContainerStats("app", T - 60, CpuStats(T, 3_000_000_000, 90_000_000),
                         MemoryStats(T, 4096, 3072, 2048, 10, 2, available_bytes=1 << 20),
                         logs=FsStats(T, 8192, 2, **FS))
    sidecar = ContainerStats("sidecar", None)  # never started: no figures yet
    web = PodStats("default", "web", "uid-web", T - 61, (app, sidecar), CpuStats(T, 3_100_000_000, None),
                   MemoryStats(T, 5000, 4000, 2500, 11, 2), FsStats(T, 8192, 2, **FS))
    early = PodStats("aaa", "first", "uid-1", None)
    return Snapshot(time=T, monotonic=1.0, node=node, pods=(web, early))


def test_full_summary() -> None:
    fs = {"availableBytes": 60 << 30, "capacityBytes": 100 << 30}
    out = summary(snapshot())
    assert out == {
        "node": {
            "nodeName": "node-1",
            "systemContainers": [{
                "name": "pods", "startTime": BOOT_STAMP,
                "cpu": {"time": STAMP, "usageNanoCores": 100_000_000, "usageCoreNanoSeconds": 7_000_000_000},
                "memory": {"time": STAMP, "usageBytes": 300, "workingSetBytes": 200, "rssBytes": 100,
                           "pageFaults": 5, "majorPageFaults": 1},
            }],
            "startTime": BOOT_STAMP,
            "cpu": {"time": STAMP, "usageNanoCores": 250_000_000, "usageCoreNanoSeconds": 50_000_000_000},
            "memory": {"time": STAMP, "availableBytes": 6 << 30, "usageBytes": 3 << 30, "workingSetBytes": 2 << 30,
                       "rssBytes": 1 << 30},
            "fs": {"time": STAMP, **fs, "usedBytes": 40 << 30, "inodesFree": 900, "inodes": 1000, "inodesUsed": 100},
        },
        "pods": [
            {"podRef": {"name": "first", "namespace": "aaa", "uid": "uid-1"}, "startTime": None, "containers": []},
            {
                "podRef": {"name": "web", "namespace": "default", "uid": "uid-web"},
                "startTime": "2023-11-14T22:12:19Z",
                "containers": [
                    {"name": "app", "startTime": "2023-11-14T22:12:20Z",
                     "cpu": {"time": STAMP, "usageNanoCores": 90_000_000, "usageCoreNanoSeconds": 3_000_000_000},
                     "memory": {"time": STAMP, "availableBytes": 1 << 20, "usageBytes": 4096, "workingSetBytes": 3072,
                                "rssBytes": 2048, "pageFaults": 10, "majorPageFaults": 2},
                     "logs": {"time": STAMP, **fs, "usedBytes": 8192, "inodesFree": 900, "inodes": 1000,
                              "inodesUsed": 2}},
                    {"name": "sidecar", "startTime": None},
                ],
                # no rate yet (first read): usageNanoCores is left out, as the kubelet leaves a nil out
                "cpu": {"time": STAMP, "usageCoreNanoSeconds": 3_100_000_000},
                "memory": {"time": STAMP, "usageBytes": 5000, "workingSetBytes": 4000, "rssBytes": 2500,
                           "pageFaults": 11, "majorPageFaults": 2},
                "ephemeral-storage": {"time": STAMP, **fs, "usedBytes": 8192, "inodesFree": 900, "inodes": 1000,
                                      "inodesUsed": 2},
            },
        ],
    }
    # key order as the Go structs marshal them
    assert list(out["node"]) == ["nodeName", "systemContainers", "startTime", "cpu", "memory", "fs"]
    assert list(out["pods"][1]) == ["podRef", "startTime", "containers", "cpu", "memory", "ephemeral-storage"]
    assert list(out["pods"][1]["containers"][0]["memory"]) == [
        "time", "availableBytes", "usageBytes", "workingSetBytes", "rssBytes", "pageFaults", "majorPageFaults"]
    json.dumps(out)  # plain JSON values only


def test_only_cpu_and_memory_keeps_what_get_cpu_and_memory_stats_returns() -> None:
    out = summary(snapshot(), only_cpu_and_memory=True)
    assert list(out["node"]) == ["nodeName", "systemContainers", "startTime", "cpu", "memory"]
    web = out["pods"][1]
    assert list(web) == ["podRef", "startTime", "containers", "cpu", "memory"]
    assert list(web["containers"][0]) == ["name", "startTime", "cpu", "memory"]
    assert list(out["node"]["systemContainers"][0]) == ["name", "startTime", "cpu", "memory"]


def test_a_node_without_figures_has_only_its_name_and_start() -> None:
    out = summary(Snapshot(time=T, monotonic=0.0, node=NodeStats("n", None)))
    assert out == {"node": {"nodeName": "n", "startTime": None}, "pods": []}
