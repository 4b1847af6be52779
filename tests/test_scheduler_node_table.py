"""The scheduler's node table: rows, O(1) binds, node removal, condition taints, resource columns."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from nodeagent.cluster.scheduler.framework import PodInfo
from nodeagent.cluster.scheduler.node_table import (
    CPU_COL,
    DISK_PRESSURE,
    MEM_COL,
    MEMORY_PRESSURE,
    NOT_READY,
    PID_PRESSURE,
    PODS_COL,
    UNSCHEDULABLE,
    NodeSpec,
    NodeTable,
    Taint,
    amount,
)
from nodeagent.core.errors import FieldError
from nodeagent.core.quantity import parse_quantity

GI = 2**30


def node(name: str, cpu: int = 4000, mem: int = 8 * GI, pods: int = 110, **kw: Any) -> NodeSpec:
    return NodeSpec(name, {"cpu": cpu, "memory": mem, "pods": pods}, **kw)


def free(t: NodeTable, name: str, col: int) -> int:
    return int(t.free[col, t.index[name]])


def test_rows_grow_past_the_initial_capacity() -> None:
    t = NodeTable(capacity=2)
    for i in range(5):
        t.upsert(node(f"n{i}", cpu=1000 * (i + 1)))
    assert t.n == 5 and t.names == ["n0", "n1", "n2", "n3", "n4"]
    assert [free(t, f"n{i}", CPU_COL) for i in range(5)] == [1000, 2000, 3000, 4000, 5000]


def test_quantities_become_table_units() -> None:
    assert amount("cpu", parse_quantity("1.5")) == 1500
    assert amount("memory", parse_quantity("1Gi")) == GI
    assert amount("cpu", 250) == 250
    t = NodeTable()
    t.upsert(NodeSpec("n", {"cpu": parse_quantity("2"), "memory": parse_quantity("1Gi"),
                            "pods": parse_quantity("110")}))
    assert (free(t, "n", CPU_COL), free(t, "n", MEM_COL), free(t, "n", PODS_COL)) == (2000, GI, 110)


def test_negative_allocatable_is_refused_without_changing_the_table() -> None:
    t = NodeTable()
    with pytest.raises(FieldError, match="status.allocatable.cpu"):
        t.upsert(NodeSpec("n", {"cpu": -1}))
    assert t.n == 0 and t.names == []


def test_bind_and_unbind_update_only_that_node() -> None:
    t = NodeTable()
    t.upsert(node("a"))
    t.upsert(node("b"))
    p = PodInfo("ns/p", {"cpu": 500, "memory": GI})
    bp = t.bind(p, "a")
    assert (free(t, "a", CPU_COL), free(t, "a", MEM_COL), free(t, "a", PODS_COL)) == (3500, 7 * GI, 109)
    assert (free(t, "b", CPU_COL), free(t, "b", PODS_COL)) == (4000, 110)
    assert bp.node == "a" and t.bound["ns/p"] is bp
    with pytest.raises(ValueError, match="already bound"):
        t.bind(p, "b")
    t.unbind("ns/p")
    assert (free(t, "a", CPU_COL), free(t, "a", PODS_COL)) == (4000, 110)
    with pytest.raises(KeyError):
        t.unbind("ns/p")


def test_removing_a_node_moves_the_last_row_and_forgets_its_pods() -> None:
    t = NodeTable()
    for name in "abc":
        t.upsert(node(name, labels={"zone": name}))
    t.bind(PodInfo("ns/on-a", {"cpu": 100}), "a")
    t.bind(PodInfo("ns/on-c", {"cpu": 300}), "c")
    orphans = t.remove("a")
    assert [bp.key for bp in orphans] == ["ns/on-a"] and "ns/on-a" not in t.bound
    assert t.names == ["c", "b"] and t.index == {"c": 0, "b": 1}
    assert free(t, "c", CPU_COL) == 3700  # c's row moved with its usage
    assert t.labels["zone"][t.index["c"]] == t.label_values["zone"]["c"]
    t.unbind("ns/on-c")
    assert free(t, "c", CPU_COL) == 4000
    t.upsert(node("d"))  # reuses the freed row, which must be clean
    assert free(t, "d", CPU_COL) == 4000 and t.labels["zone"][t.index["d"]] == -1


def test_updating_a_node_keeps_its_bound_usage() -> None:
    t = NodeTable()
    t.upsert(node("a", cpu=4000))
    t.bind(PodInfo("ns/p", {"cpu": 1000}), "a")
    t.upsert(node("a", cpu=2000))
    assert free(t, "a", CPU_COL) == 1000


@pytest.mark.parametrize("kw, taints", [
    ({}, ()),
    ({"ready": False}, (NOT_READY,)),
    ({"unschedulable": True}, (UNSCHEDULABLE,)),
    ({"memory_pressure": True, "pid_pressure": True}, (MEMORY_PRESSURE, PID_PRESSURE)),
    ({"disk_pressure": True, "taints": (Taint("gpu", "yes"), DISK_PRESSURE)},
     (DISK_PRESSURE, Taint("gpu", "yes"))),
])
def test_conditions_become_taints(kw: dict[str, Any], taints: tuple[Taint, ...]) -> None:
    assert node("n", **kw).effective_taints() == taints


def test_taint_effect_is_validated() -> None:
    with pytest.raises(FieldError, match="effect"):
        Taint("k", "v", "Sometimes")


def test_extended_resources_add_columns() -> None:
    t = NodeTable()
    t.upsert(node("a"))
    names = [f"example.com/dev{i}" for i in range(12)]  # more than the initial 8 rows
    t.upsert(NodeSpec("b", {"cpu": 1000, "memory": GI, "pods": 10, **dict.fromkeys(names, 2)}))
    assert t.resources[4:] == names
    last = t.resource_col(names[-1])
    assert free(t, "b", last) == 2 and free(t, "a", last) == 0
    t.bind(PodInfo("ns/p", {names[-1]: 1}), "b")
    assert free(t, "b", last) == 1


def test_priority_levels_sum_requests_and_skip_critical_pods() -> None:
    t = NodeTable()
    t.upsert(node("a"))
    t.bind(PodInfo("ns/low1", {"cpu": 100}, priority=1), "a")
    t.bind(PodInfo("ns/low2", {"cpu": 200}, priority=1), "a")
    t.bind(PodInfo("ns/mid", {"cpu": 400}, priority=5), "a")
    t.bind(PodInfo("kube-system/crit", {"cpu": 800}, priority=2_000_000_000, critical=True), "a")
    assert sorted(t.levels) == [1, 5]
    assert t.levels[1][CPU_COL, 0] == 300 and t.levels[1][PODS_COL, 0] == 2
    assert t.levels[5][CPU_COL, 0] == 400
    assert free(t, "a", CPU_COL) == 4000 - 1500
    t.unbind("ns/low1")
    assert t.levels[1][CPU_COL, 0] == 200


def test_scoring_shadow_tracks_requests_and_nonzero_defaults() -> None:
    t = NodeTable()
    t.upsert(node("a"))
    t.bind(PodInfo("ns/besteffort", {}), "a")  # scores as 100m / 200Mi
    t.bind(PodInfo("ns/p", {"cpu": 500, "memory": GI}, nonzero_cpu=500, nonzero_memory=GI), "a")
    assert np.array_equal(t.scoring[:, 0], [4000, 8 * GI, 500, GI, 600, GI + 200 * 2**20])
