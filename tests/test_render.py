"""Tables and wording for people (nodeagent.cli.render): pure, so every output is checked exactly."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.agent.node.status import ConditionTracker, NodeStatusInput, build_node
from nodeagent.cli import render
from nodeagent.core.clock import FakeClock
from nodeagent.core.model import parse_pod
from nodeagent.core.quantity import parse_quantity
from nodeagent.core.timefmt import rfc3339

NOW = 1_700_000_000.0


def make_pod(name: str, ns: str = "default", *, cpu: str | None = None, memory: str | None = None,
             phase: str = "Running", qos: str = "Burstable", restarts: tuple[int, ...] = (0,),
             started: float = NOW - 300, **status: Any) -> dict[str, Any]:
    """A pod as the agent reports it: the model's to_dict() plus a status."""
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v}
    containers = [{"name": f"c{i}", "image": "x", "command": ["sleep", "60"],
                   "resources": {"requests": requests} if requests else {}}
                  for i in range(len(restarts))]
    pod = parse_pod({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
                     "spec": {"containers": containers}}).to_dict()
    pod["status"] = {"phase": phase, "qosClass": qos, "startTime": rfc3339(started),
                     "containerStatuses": [{"name": f"c{i}", "restartCount": r, "ready": True}
                                           for i, r in enumerate(restarts)], **status}
    return pod


def make_node(usage: dict[str, str] | None = None, memory_pressure: bool = False) -> dict[str, Any]:
    q = parse_quantity
    return build_node(NodeStatusInput(
        name="node-a",
        capacity={"cpu": q("2"), "memory": q("8Gi"), "ephemeral-storage": q("100Gi"), "pods": q("110")},
        allocatable={"cpu": q("1900m"), "memory": q("7Gi"), "ephemeral-storage": q("90Gi"),
                     "pods": q("110")},
        usage={k: q(v) for k, v in (usage or {}).items()},
        addresses=[], node_info={}, memory_pressure=memory_pressure,
    ), ConditionTracker(FakeClock(start=0.0, wall_offset=NOW - 3600)))


def test_table_aligns_columns_three_apart_without_trailing_spaces() -> None:
    out = render.table(("A", "LONGER"), [["xxxxx", "1"], ["y", ""]], indent="  ")
    assert out == "  A       LONGER\n  xxxxx   1\n  y\n"


def test_table_escapes_control_characters() -> None:
    out = render.table(("NAME",), [["evil\x1b[31mred\nnext\x9b"]])
    assert "\x1b" not in out and "\x9b" not in out
    assert out.splitlines()[1] == "evil\\x1b[31mred\\x0anext\\x9b"
    assert render.clean(None) == "" and render.clean("héllo ✓") == "héllo ✓"


@pytest.mark.parametrize(("seconds", "text"), [
    (0, "0s"), (59, "59s"), (119, "119s"), (120, "2m"), (185, "3m5s"), (599, "9m59s"),
    (600, "10m"), (179 * 60 + 59, "179m"), (3 * 3600, "3h"), (3 * 3600 + 60 * 25, "3h25m"),
    (8 * 3600, "8h"), (47 * 3600, "47h"), (48 * 3600, "2d"), (50 * 3600, "2d2h"),
    (8 * 86400, "8d"), (729 * 86400, "729d"), (730 * 86400, "2y"), (731 * 86400, "2y1d"),
    (9 * 365 * 86400, "9y"), (-5, "<invalid>"),
])
def test_human_duration_matches_kubectl(seconds: int, text: str) -> None:
    assert render.human_duration(seconds) == text


def test_parse_time_and_age() -> None:
    assert render.parse_time("2023-11-14T22:13:20Z") == 1_700_000_000.0
    assert render.parse_time("not a time") is None and render.parse_time(None) is None
    assert render.age("2023-11-14T22:13:20Z", 1_700_000_000.0 + 185) == "3m5s"
    assert render.age(None, NOW) == "<unknown>"
    assert render.age(rfc3339(NOW + 30), NOW) == "0s"  # a clock a little ahead is not "invalid"


@pytest.mark.parametrize(("n", "text"), [
    (0, "0"), (1023, "1023"), (1024, "1Ki"), (1536, "1.5Ki"), (512 << 20, "512Mi"),
    ((1 << 30) + (1 << 29), "1.5Gi"), (1202716672, "1.1Gi"), (150 * (1 << 30) + 1, "150Gi"),
    (3 << 40, "3Ti"),
])
def test_human_bytes(n: int, text: str) -> None:
    assert render.human_bytes(n) == text


def test_requested_sums_active_pods_only() -> None:
    pods = [make_pod("a", cpu="500m", memory="1Gi"),
            make_pod("b", cpu="250m", memory="512Mi", restarts=(0, 0)),  # two containers
            make_pod("done", cpu="4", memory="4Gi", phase="Succeeded"),
            make_pod("evicted", cpu="4", phase="Failed", reason="Evicted"),
            {"metadata": {"name": "broken.yaml", "namespace": ""},  # a bad static pod file
             "status": {"phase": "Pending", "reason": "InvalidManifest"}}]
    req = render.requested(pods)
    assert {k: str(v) for k, v in req.items()} == {"cpu": "1", "memory": "2Gi", "pods": "2"}


def test_resource_rows_show_requests_and_usage_against_allocatable() -> None:
    node = make_node(usage={"memory": "3584Mi", "cpuUsageSeconds": "12500m"})
    rows = render.resource_rows(node, [make_pod("a", cpu="950m", memory="1Gi")])
    assert rows == [
        ["cpu", "2", "1900m", "950m (50%)", "-"],
        ["memory", "8Gi", "7Gi", "1Gi (14%)", "3.5Gi (50%)"],
        ["ephemeral-storage", "100Gi", "90Gi", "0 (0%)", "-"],
        ["pods", "110", "110", "1 (0%)", "-"],
    ]
    assert render.extra_usage(node) == [("CPU time used by pods", "12.5s")]


def test_format_status_reads_as_a_report() -> None:
    node = make_node(usage={"memory": "1Gi"}, memory_pressure=True)
    pods = [make_pod("web", "team-a", cpu="100m", restarts=(2, 1), started=NOW - 7200),
            make_pod("batch", phase="Succeeded", qos="BestEffort")]
    out = render.format_status(node, pods, NOW)
    lines = out.splitlines()
    assert lines[0] == "Node: node-a"
    cond = {ln.split()[0]: ln.split()[1:3] for ln in lines if ln.startswith("  ") and
            ln.split()[0] in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")}
    assert cond == {"MemoryPressure": ["True", "60m"], "DiskPressure": ["False", "60m"],
                    "PIDPressure": ["False", "60m"], "Ready": ["True", "60m"]}
    assert "kubelet has insufficient memory available" in out
    assert "  cpu                 2          1900m         200m (10%)   -" in lines  # 2 containers
    assert "  memory              8Gi        7Gi           0 (0%)       1Gi (14%)" in lines
    assert "Pods (1 active, 2 total):" in lines
    pod_lines = lines[lines.index("Pods (1 active, 2 total):") + 1:]
    assert pod_lines[0].split() == list(render.POD_COLUMNS)
    assert pod_lines[1].split() == ["default", "batch", "Succeeded", "BestEffort", "0", "5m"]
    assert pod_lines[2].split() == ["team-a", "web", "Running", "Burstable", "3", "120m"]


def test_format_status_without_pods_or_conditions() -> None:
    out = render.format_status({"metadata": {"name": "n"}, "status": {}}, [], NOW)
    assert "  (none reported)" in out and out.endswith("Pods (0 active, 0 total):\n  (none)\n")


def test_format_pods_wide() -> None:
    pod = make_pod("web", cpu="250m", memory="64Mi", restarts=(1, 0), phase="Failed",
                   reason="Evicted")
    pod["status"]["containerStatuses"][1]["ready"] = False
    pod["spec"]["priority"] = 1000
    out = render.format_pods([pod], NOW, wide=True).splitlines()
    assert out[0].split() == ["NAMESPACE", "NAME", "READY", "PHASE", "REASON", "QOS", "PRIORITY",
                              "RESTARTS", "AGE", "CPU-REQ", "MEM-REQ"]
    assert out[1].split() == ["default", "web", "1/2", "Failed", "Evicted", "Burstable", "1000",
                              "1", "5m", "500m", "128Mi"]


def test_format_pods_tolerates_odd_entries() -> None:
    out = render.format_pods([{"metadata": {"name": "x"}}, {}], NOW).splitlines()
    assert out[1].split() == ["Unknown", "-", "0", "<unknown>"]  # namespace and name empty
    assert out[2].split() == ["x", "Unknown", "-", "0", "<unknown>"]


def test_format_events() -> None:
    events = [{"involvedObject": {"kind": "Pod", "namespace": "default", "name": "web"},
               "reason": "Evicted", "type": "Warning", "message": "The node was low on memory.",
               "lastTimestamp": rfc3339(NOW - 42)},
              {"involvedObject": {"kind": "Node", "name": "node-a"}, "reason": "NodeHasDiskPressure",
               "type": "Normal", "message": "disk", "firstTimestamp": rfc3339(NOW - 600)}]
    out = render.format_events(events, NOW).splitlines()
    assert out == [
        "LAST SEEN   TYPE      REASON                OBJECT            MESSAGE",
        "42s         Warning   Evicted               pod/default/web   The node was low on memory.",
        "10m         Normal    NodeHasDiskPressure   node/node-a       disk",
    ]
