"""Filter reasons, taints and tolerations, node selectors, scores, and the FailedScheduling text."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from nodeagent.cluster.scheduler.framework import (
    DEFAULT_MEMORY_REQUEST,
    DEFAULT_MILLI_CPU_REQUEST,
    FitError,
    Framework,
    PodInfo,
    Scheduled,
    ScoringConfig,
    tolerates,
)
from nodeagent.cluster.scheduler.node_table import NOT_READY, UNSCHEDULABLE, NodeSpec, NodeTable, Taint
from nodeagent.core.model import Toleration, parse_pod

GI = 2**30
MI = 2**20


def node(name: str, cpu: int = 4000, mem: int = 8 * GI, pods: int = 110, **kw: Any) -> NodeSpec:
    return NodeSpec(name, {"cpu": cpu, "memory": mem, "pods": pods, **kw.pop("extra", {})}, **kw)


def cluster(*specs: NodeSpec, config: ScoringConfig | None = None) -> tuple[NodeTable, Framework]:
    t = NodeTable(capacity=2)
    for s in specs:
        t.upsert(s)
    return t, Framework(t, config)


def tol(key: str | None = None, operator: Any = "Equal", value: str | None = None,
        effect: Any = None) -> Toleration:
    return Toleration(key=key, operator=operator, value=value, effect=effect)


# ---- FailedScheduling messages ----------------------------------------------------------------

def test_message_counts_each_nodes_first_failing_plugin_sorted_like_kube() -> None:
    t, fw = cluster(node("full1"), node("full2"), node("full3"), node("pressure", memory_pressure=True),
                    node("cordoned", unschedulable=True, memory_pressure=True))
    for name in ("full1", "full2", "full3"):
        t.bind(PodInfo(f"ns/filler-{name}", {"memory": 7 * GI}), name)
    err = fw.schedule(PodInfo("ns/p", {"memory": 2 * GI}))
    assert isinstance(err, FitError)
    assert str(err) == ("0/5 nodes are available: 1 node(s) had untolerated taint "
                        "{node.kubernetes.io/memory-pressure: }, 1 node(s) were unschedulable, "
                        "3 Insufficient memory.")
    assert err.reasons == {"Insufficient memory": 3, "node(s) were unschedulable": 1,
                           "node(s) had untolerated taint {node.kubernetes.io/memory-pressure: }": 1}


def test_every_short_resource_is_counted_and_pods_count_reads_too_many_pods() -> None:
    t, fw = cluster(node("small", cpu=500, mem=GI), node("nopods", pods=1), node("nogpu"))
    t.bind(PodInfo("ns/x", {}), "nopods")
    err = fw.schedule(PodInfo("ns/p", {"cpu": 1000, "memory": 2 * GI, "example.com/gpu": 1}))
    assert isinstance(err, FitError)
    assert err.reasons == {"Insufficient cpu": 1, "Insufficient memory": 1, "Too many pods": 1,
                           "Insufficient example.com/gpu": 3}
    assert str(err) == ("0/3 nodes are available: 1 Insufficient cpu, 1 Insufficient memory, "
                        "1 Too many pods, 3 Insufficient example.com/gpu.")


def test_not_ready_nodes_fail_on_their_taint_and_selector_after_taints() -> None:
    t, fw = cluster(node("down", ready=False), node("other", labels={"disk": "hdd"}),
                    node("ssd", labels={"disk": "ssd"}))
    err = fw.schedule(PodInfo("ns/p", {"cpu": 100}, node_selector={"disk": "ssd"}))
    assert isinstance(fw.schedule(PodInfo("ns/q", {"cpu": 100}, node_selector={"disk": "ssd"})),
                      Scheduled)
    t.upsert(node("ssd", labels={"disk": "ssd"}, taints=(Taint("dedicated", "db"),)))
    err = fw.schedule(PodInfo("ns/p", {"cpu": 100}, node_selector={"disk": "ssd"}))
    assert isinstance(err, FitError)
    assert str(err) == ("0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
                        "1 node(s) had untolerated taint {dedicated: db}, "
                        "1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }.")


def test_no_nodes_at_all() -> None:
    _, fw = cluster()
    assert str(fw.schedule(PodInfo("ns/p"))) == "no nodes available to schedule pods"


# ---- taints and tolerations -------------------------------------------------------------------

@pytest.mark.parametrize("toleration, taint, expected", [
    (tol(operator="Exists"), Taint("anything", "v", "NoExecute"), True),  # empty key + Exists
    (tol("k", "Equal", "v", "NoSchedule"), Taint("k", "v", "NoSchedule"), True),
    (tol("k", "Equal", "v", "NoSchedule"), Taint("k", "w", "NoSchedule"), False),
    (tol("k", "Equal", "v"), Taint("k", "v", "NoExecute"), True),  # empty effect: every effect
    (tol("k", "Equal", "v", "NoExecute"), Taint("k", "v", "NoSchedule"), False),
    (tol("k", "Exists"), Taint("k", "whatever", "NoSchedule"), True),
    (tol("k", "Exists"), Taint("other", "", "NoSchedule"), False),
    (tol("k"), Taint("k", "", "NoSchedule"), True),  # Equal with no value matches ""
    (tol("k"), Taint("k", "v", "NoSchedule"), False),
])
def test_toleration_matching(toleration: Toleration, taint: Taint, expected: bool) -> None:
    assert tolerates(toleration, taint) is expected


@pytest.mark.parametrize("node_kw, tolerations, feasible", [
    ({"taints": (Taint("gpu", "true", "NoSchedule"),)}, (), False),
    ({"taints": (Taint("gpu", "true", "NoSchedule"),)}, (tol("gpu", "Equal", "true"),), True),
    ({"taints": (Taint("gpu", "true", "NoExecute"),)}, (tol("gpu", "Exists", effect="NoSchedule"),), False),
    ({"taints": (Taint("gpu", "true", "PreferNoSchedule"),)}, (), True),  # scoring only
    ({"ready": False}, (), False),
    ({"ready": False}, (tol(NOT_READY.key, "Exists", effect="NoSchedule"),), True),
    ({"unschedulable": True}, (tol(operator="Exists"),), True),  # tolerates the cordon taint
    ({"unschedulable": True}, (tol(UNSCHEDULABLE.key, "Exists"),), True),
    ({"unschedulable": True}, (tol("gpu", "Exists"),), False),
    ({"disk_pressure": True, "pid_pressure": True},
     (tol("node.kubernetes.io/disk-pressure", "Exists"),), False),
])
def test_taints_against_tolerations(node_kw: dict[str, Any], tolerations: tuple[Toleration, ...],
                                    feasible: bool) -> None:
    _, fw = cluster(node("n", **node_kw))
    result = fw.schedule(PodInfo("ns/p", {"cpu": 100}, tolerations=tolerations))
    assert isinstance(result, Scheduled) is feasible


def test_cached_verdicts_follow_node_changes() -> None:
    t, fw = cluster(node("n"))
    p = PodInfo("ns/p", {"cpu": 100}, node_selector={"role": "db"})
    assert isinstance(fw.schedule(p), FitError)
    t.upsert(node("n", labels={"role": "db"}))
    assert fw.schedule(p) == Scheduled("n", 195)
    t.upsert(node("n", labels={"role": "db"}, unschedulable=True))
    assert str(fw.schedule(p)) == "0/1 nodes are available: 1 node(s) were unschedulable."


# ---- scores -----------------------------------------------------------------------------------

def kube_score(alloc: tuple[int, int], nz_used: tuple[int, int], used: tuple[int, int],
               pod_nz: tuple[int, int], pod_req: tuple[int, int], strategy: str) -> int:
    """kube-scheduler's formulas, transcribed with Go's integer arithmetic."""
    fit = []
    for a, u, p in zip(alloc, nz_used, pod_nz, strict=False):
        r = u + p
        if strategy == "LeastAllocated":
            fit.append(0 if r > a else (a - r) * 100 // a)
        else:
            fit.append(min(r, a) * 100 // a)
    total = sum(fit) // 2
    if pod_req != (0, 0):
        fc, fm = (min((u + p) / a, 1.0) for a, u, p in zip(alloc, used, pod_req, strict=False))
        total += int((1 - abs((fc - fm) / 2)) * 100)
    return total


@pytest.mark.parametrize("strategy", ["LeastAllocated", "MostAllocated"])
def test_scores_match_kube_formulas(strategy: str) -> None:
    rng = random.Random(7)
    t, fw = cluster(config=ScoringConfig(strategy=strategy))  # type: ignore[arg-type]
    expected = []
    pod = PodInfo("ns/p", {"cpu": 700, "memory": 3 * GI // 2}, nonzero_cpu=700,
                  nonzero_memory=3 * GI // 2)
    for i in range(200):
        a = (rng.randrange(1000, 64000), rng.randrange(GI, 256 * GI))
        t.upsert(node(f"n{i}", cpu=a[0], mem=a[1]))
        used = (rng.randrange(0, a[0] + 2000), rng.randrange(0, a[1] + 4 * GI))
        t.bind(PodInfo(f"ns/u{i}", {"cpu": used[0], "memory": used[1]}, nonzero_cpu=used[0] + 100,
                       nonzero_memory=used[1] + 200 * MI), f"n{i}")
        expected.append(kube_score(a, (used[0] + 100, used[1] + 200 * MI), used,
                                   (700, 3 * GI // 2), (700, 3 * GI // 2), strategy))
    assert fw.score(pod).astype(int).tolist() == expected


def test_least_allocated_spreads_and_most_allocated_packs() -> None:
    specs = (node("busy"), node("idle"))
    for strategy, want in (("LeastAllocated", "idle"), ("MostAllocated", "busy")):
        t, fw = cluster(*specs, config=ScoringConfig(strategy=strategy))  # type: ignore[arg-type]
        t.bind(PodInfo("ns/x", {"cpu": 2000, "memory": 4 * GI}), "busy")
        result = fw.schedule(PodInfo("ns/p", {"cpu": 1000, "memory": 2 * GI}))
        assert isinstance(result, Scheduled) and result.node == want


def test_hand_computed_scores() -> None:
    t, fw = cluster(node("empty"), node("used"))
    t.bind(PodInfo("ns/x", {"cpu": 2000, "memory": 2 * GI}, nonzero_cpu=2000,
                   nonzero_memory=2 * GI), "used")
    pod = PodInfo("ns/p", {"cpu": 1000, "memory": 2 * GI}, nonzero_cpu=1000, nonzero_memory=2 * GI)
    # empty: least (75 + 75) / 2 = 75, balanced 100. used: least (25 + 50) / 2 = 37,
    # balanced fractions .75 and .5 -> (1 - .125) * 100 = 87.
    assert fw.score(pod).tolist() == [175.0, 124.0]


def test_balanced_allocation_prefers_evening_out() -> None:
    t, fw = cluster(node("cpu-heavy"), node("mem-heavy"), config=ScoringConfig(fit_weight=0))
    t.bind(PodInfo("ns/a", {"cpu": 3000}), "cpu-heavy")
    t.bind(PodInfo("ns/b", {"memory": 6 * GI}), "mem-heavy")
    result = fw.schedule(PodInfo("ns/p", {"memory": 4 * GI}))
    # cpu-heavy: fractions .75 and .5 -> (1 - .125) * 100 = 87; mem-heavy: 0 and 1 (capped) -> 50
    assert result == Scheduled("cpu-heavy", 87)


def test_pods_without_requests_score_with_nonzero_defaults_and_skip_balance() -> None:
    t, fw = cluster(node("n", cpu=1000, mem=1000 * MI))
    pod = PodInfo("ns/be")
    assert (pod.nonzero_cpu, pod.nonzero_memory) == (DEFAULT_MILLI_CPU_REQUEST, DEFAULT_MEMORY_REQUEST)
    assert fw.score(pod).tolist() == [(90 + 80) // 2]  # no balanced-allocation part


def test_nodes_without_cpu_or_memory_leave_that_resource_out() -> None:
    t, fw = cluster(node("nocpu", cpu=0), node("normal"))
    pod = PodInfo("ns/p", {"memory": 2 * GI}, nonzero_cpu=0, nonzero_memory=2 * GI)
    # nocpu: only memory counts (75), one fraction -> balanced 100. normal: cpu 100, mem 75 -> 87
    # (floor of 87.5), balanced fractions 0 and .25 -> 87.
    assert fw.score(pod).tolist() == [175.0, 174.0]


def test_ties_go_to_the_lowest_row() -> None:
    _, fw = cluster(node("a"), node("b"), node("c"))
    # least: cpu 97 (97.5), memory 97 (200Mi default of 8Gi); balanced: .025 vs 0 -> 98
    assert fw.schedule(PodInfo("ns/p", {"cpu": 100})) == Scheduled("a", 195)


def test_scoring_config_is_validated() -> None:
    with pytest.raises(ValueError, match="scoringStrategy"):
        ScoringConfig(strategy="Random")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="resources"):
        ScoringConfig(cpu_weight=0, memory_weight=0)


# ---- PodInfo from a Pod -----------------------------------------------------------------------

def test_pod_info_from_a_parsed_pod() -> None:
    pod = parse_pod({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {
            "priority": 10,
            "nodeSelector": {"disk": "ssd"},
            "tolerations": [{"key": "gpu", "operator": "Exists"}],
            "containers": [
                {"name": "a", "command": ["x"], "resources": {"requests": {"cpu": "250m"}}},
                {"name": "b", "command": ["x"],
                 "resources": {"limits": {"memory": "1Gi", "example.com/gpu": "1"}}},
            ],
        },
    })
    info = PodInfo.from_pod(pod)
    assert info.key == "shop/web" and info.priority == 10 and not info.critical
    assert info.requests == {"cpu": 250, "memory": GI, "example.com/gpu": 1}
    assert (info.nonzero_cpu, info.nonzero_memory) == (250 + 100, 200 * MI + GI)
    assert info.node_selector == {"disk": "ssd"} and info.tolerations[0].key == "gpu"
    assert PodInfo.from_pod(pod, priority=2_000_000_000).critical


# ---- against a per-node transcription of the filter plugins -----------------------------------

def naive_reasons(t: NodeTable, pod: PodInfo) -> tuple[list[str], dict[str, int]]:
    """Each node through NodeUnschedulable, TaintToleration, NodeAffinity, NodeResourcesFit."""
    from nodeagent.cluster.scheduler.framework import tolerated_by_any

    feasible: list[str] = []
    reasons: dict[str, int] = {}
    for i, name in enumerate(t.names):
        spec = t.spec(name)
        why: list[str] = []
        if spec.unschedulable and not tolerated_by_any(pod.tolerations, UNSCHEDULABLE):
            why = ["node(s) were unschedulable"]
        elif bad := [x for x in spec.effective_taints() if x.effect != "PreferNoSchedule"
                     and not tolerated_by_any(pod.tolerations, x)]:
            why = [f"node(s) had untolerated taint {{{bad[0].key}: {bad[0].value}}}"]
        elif any(spec.labels.get(k) != v for k, v in pod.node_selector.items()):
            why = ["node(s) didn't match Pod's node affinity/selector"]
        else:
            for res, want in [*pod.requests.items(), ("pods", 1)]:
                if int(t.free[t.resource_col(res), i]) < want:
                    why.append("Too many pods" if res == "pods" else f"Insufficient {res}")
        for r in why:
            reasons[r] = reasons.get(r, 0) + 1
        if not why:
            feasible.append(name)
    return feasible, reasons


def test_filter_matches_a_per_node_transcription() -> None:
    rng = random.Random(99)
    taints = [Taint("a", "1"), Taint("a", "2", "NoExecute"), Taint("b", "", "PreferNoSchedule")]
    tolerations = [tol("a", "Equal", "1"), tol("a", "Exists", effect="NoExecute"),
                   tol(operator="Exists"), tol("node.kubernetes.io/not-ready", "Exists")]
    for _ in range(40):
        t, fw = cluster()
        for i in range(rng.randint(1, 30)):
            t.upsert(node(f"n{i}", cpu=rng.choice([1000, 2000]), mem=rng.choice([GI, 2 * GI]),
                          pods=rng.choice([1, 3]), extra={"x.io/dev": rng.choice([0, 1])},
                          labels={"zone": rng.choice("ab")} if rng.random() < 0.8 else {},
                          taints=tuple(rng.sample(taints, rng.randint(0, 2))),
                          unschedulable=rng.random() < 0.1, ready=rng.random() < 0.9,
                          disk_pressure=rng.random() < 0.1))
        for j in range(rng.randint(0, 40)):
            target = rng.choice(t.names)
            t.bind(PodInfo(f"ns/b{j}", {"cpu": rng.choice([0, 300, 700])}), target)
        for name in rng.sample(t.names, rng.randint(0, len(t.names) // 3)):
            t.remove(name)
        for _ in range(5):
            pod = PodInfo("ns/p", {"cpu": rng.choice([0, 500]), "memory": rng.choice([0, GI]),
                                   "x.io/dev": rng.choice([0, 0, 1])},
                          tolerations=tuple(rng.sample(tolerations, rng.randint(0, 2))),
                          node_selector={"zone": "a"} if rng.random() < 0.3 else {})
            feasible, reasons = naive_reasons(t, pod)
            result = fw.schedule(pod)
            filtered = fw.filter(pod)
            assert [t.names[i] for i in np.flatnonzero(filtered.mask)] == feasible
            if feasible:
                assert isinstance(result, Scheduled) and result.node in feasible
            else:
                assert isinstance(result, FitError) and result.reasons == reasons
