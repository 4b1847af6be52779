"""Preemption: victim choice (fewest, lowest priority, never critical or equal), node choice, and
the "preemption: ..." explanations; checked against a straight transcription of kube's algorithm."""

from __future__ import annotations

import random
from typing import Any

from nodeagent.cluster.scheduler.framework import FitError, Framework, PodInfo
from nodeagent.cluster.scheduler.node_table import NodeSpec, NodeTable, Taint
from nodeagent.cluster.scheduler.preemption import Preemption, preempt
from nodeagent.core.model import Toleration

GI = 2**30


def node(name: str, cpu: int = 4000, mem: int = 8 * GI, pods: int = 110, **kw: Any) -> NodeSpec:
    return NodeSpec(name, {"cpu": cpu, "memory": mem, "pods": pods}, **kw)


def setup(*specs: NodeSpec) -> tuple[NodeTable, Framework]:
    t = NodeTable(capacity=2)
    for s in specs:
        t.upsert(s)
    return t, Framework(t)


def fill(t: NodeTable, node_name: str, *pods: tuple[str, int, int]) -> None:
    """Bind (name, cpu millis, priority) pods to a node, in this order (= start order)."""
    for name, cpu, prio in pods:
        t.bind(PodInfo(f"ns/{name}", {"cpu": cpu}, priority=prio,
                       critical=prio >= 2_000_000_000), node_name)


def run(t: NodeTable, fw: Framework, pod: PodInfo, **kw: Any) -> Preemption | FitError:
    failure = fw.schedule(pod)
    assert isinstance(failure, FitError), "the pod should not fit anywhere"
    return preempt(t, pod, failure, **kw)


def victims(result: Preemption | FitError) -> tuple[str, list[str]]:
    assert isinstance(result, Preemption), str(result)
    return result.node, [v.key.removeprefix("ns/") for v in result.victims]


def test_prefers_the_node_whose_most_important_victim_is_least_important() -> None:
    t, fw = setup(node("a"), node("b"))
    fill(t, "a", ("a-mid", 4000, 50))
    fill(t, "b", ("b-low1", 2000, 10), ("b-low2", 2000, 10))
    assert victims(run(t, fw, PodInfo("ns/p", {"cpu": 3000}, priority=100))) == \
        ("b", ["b-low1", "b-low2"])


def test_fewest_victims_when_priorities_tie() -> None:
    t, fw = setup(node("many"), node("one"))
    fill(t, "many", *((f"m{i}", 1000, 5) for i in range(4)))
    fill(t, "one", ("o0", 3000, 5), ("o1", 1000, 5))
    assert victims(run(t, fw, PodInfo("ns/p", {"cpu": 2500}, priority=9))) == ("one", ["o0"])


def test_smallest_sum_of_priorities_before_fewest_victims() -> None:
    t, fw = setup(node("a"), node("b"))
    fill(t, "a", ("a5", 2000, 5), ("a4", 2000, 4))
    fill(t, "b", ("b5", 2000, 5), ("b1", 2000, 1))
    assert victims(run(t, fw, PodInfo("ns/p", {"cpu": 4000}, priority=9))) == ("b", ["b5", "b1"])


def test_sum_of_priorities_outranks_the_number_of_victims() -> None:
    t, fw = setup(node("two"), node("three"))
    fill(t, "two", ("t0", 2000, 0), ("t1", 2000, 0))
    fill(t, "three", ("h0", 2000, 0), ("h1", 1000, -2**31), ("h2", 1000, -2**31))
    # both lose a priority-0 pod first; sums (each + 2^31): two = 2^32, three = 2^31
    assert victims(run(t, fw, PodInfo("ns/p", {"cpu": 4000}, priority=1))) == \
        ("three", ["h0", "h1", "h2"])


def test_latest_start_of_the_most_important_victims_breaks_the_last_tie() -> None:
    t, fw = setup(node("early"), node("late"))
    fill(t, "early", ("e", 4000, 1))
    fill(t, "late", ("l", 4000, 1))  # bound later: started later, less work lost
    assert victims(run(t, fw, PodInfo("ns/p", {"cpu": 1000}, priority=2))) == ("late", ["l"])


def test_reprieve_keeps_pods_the_preemptor_can_live_with() -> None:
    t, fw = setup(node("n"))
    fill(t, "n", ("small-low", 500, 1), ("big-mid", 3000, 5), ("small-mid", 500, 5))
    # Removing everything lower frees 4000; reprieve big-mid (too big), then small-mid, small-low.
    assert victims(run(t, fw, PodInfo("ns/p", {"cpu": 3000}, priority=10))) == ("n", ["big-mid"])


def test_never_equal_or_higher_priority() -> None:
    t, fw = setup(node("n"))
    fill(t, "n", ("same", 4000, 7))
    result = run(t, fw, PodInfo("ns/p", {"cpu": 1000}, priority=7))
    assert isinstance(result, FitError)
    assert str(result) == ("0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are "
                           "available: 1 No preemption victims found for incoming pod.")


def test_never_critical_pods_even_for_node_critical_preemptors() -> None:
    t, fw = setup(node("crit"), node("normal"))
    fill(t, "crit", ("cluster-critical", 4000, 2_000_000_000))
    fill(t, "normal", ("user", 3000, 1_000_000_000), ("user-small", 1000, 0))
    pod = PodInfo("kube-system/p", {"cpu": 2000}, priority=2_000_001_000, critical=True)
    assert victims(run(t, fw, pod)) == ("normal", ["user"])
    t.unbind("ns/user")
    fill(t, "normal", ("user-again", 3000, 2_000_000_500))  # critical by priority
    result = run(t, fw, pod)
    assert isinstance(result, FitError)
    assert "preemption: 0/2 nodes are available: 1 Insufficient cpu, 1 No preemption victims" in str(result)


def test_nodes_preemption_cannot_fix_are_skipped() -> None:
    t, fw = setup(node("tainted", taints=(Taint("dedicated", "db"),)), node("down", ready=False),
                  node("cordoned", unschedulable=True), node("other", labels={"zone": "b"}),
                  node("ok", labels={"zone": "a"}))
    for name in ("tainted", "down", "cordoned", "other"):
        fill(t, name, (f"{name}-x", 100, 0))
    fill(t, "ok", ("ok-x", 3500, 3))
    pod = PodInfo("ns/p", {"cpu": 1000}, priority=10, node_selector={"zone": "a"})
    assert victims(run(t, fw, pod)) == ("ok", ["ok-x"])
    t.upsert(node("ok", labels={"zone": "a"}, memory_pressure=True))
    result = run(t, fw, pod)
    assert isinstance(result, FitError) and str(result).endswith(
        "preemption: 0/5 nodes are available: 5 Preemption is not helpful for scheduling.")


def test_too_little_even_without_the_lower_priority_pods() -> None:
    t, fw = setup(node("n", cpu=2000))
    fill(t, "n", ("high", 1500, 100), ("low", 500, 1))
    result = run(t, fw, PodInfo("ns/p", {"cpu": 1000}, priority=50))
    assert isinstance(result, FitError)
    assert str(result) == ("0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are "
                           "available: 1 Insufficient cpu.")


def test_preemption_policy_never() -> None:
    t, fw = setup(node("n"))
    fill(t, "n", ("low", 4000, 0))
    result = run(t, fw, PodInfo("ns/p", {"cpu": 1000}, priority=9, preemption_policy="Never"))
    assert isinstance(result, FitError) and str(result).endswith(
        "preemption: not eligible due to preemptionPolicy=Never.")


def test_tolerations_let_the_pod_preempt_on_tainted_nodes() -> None:
    t, fw = setup(node("gpu", taints=(Taint("gpu", "yes"),)))
    fill(t, "gpu", ("low", 4000, 0))
    pod = PodInfo("ns/p", {"cpu": 1000}, priority=1, tolerations=(Toleration(key="gpu", value="yes"),))
    assert victims(run(t, fw, pod)) == ("gpu", ["low"])


# ---- against a plain transcription of kube's algorithm ----------------------------------------

def kube_preempt(t: NodeTable, fw: Framework, pod: PodInfo) -> tuple[str, list[str]] | None:
    """Every node: SelectVictimsOnNode, then pickOneNodeForPreemption, written out naively."""
    ok = fw.static_masks(pod).ok
    need = dict(zip(*(a.tolist() for a in pod.vector(t)), strict=False))
    candidates = []
    for i, name in enumerate(t.names):
        if not ok[i]:
            continue
        free = {c: int(t.free[c, i]) for c in need}
        lower = [bp for bp in t.pods[i].values() if bp.priority < pod.priority and not bp.critical]
        if not lower:
            continue
        for bp in lower:
            for c in need:
                free[c] += bp.requests.get(c, 0)
        if any(free[c] < v for c, v in need.items()):
            continue
        out = []
        for bp in sorted(lower, key=lambda b: (-b.priority, b.seq)):
            if all(free[c] - bp.requests.get(c, 0) >= v for c, v in need.items()):
                for c in need:
                    free[c] -= bp.requests.get(c, 0)
            else:
                out.append(bp)
        candidates.append((i, name, out))
    if not candidates:
        return None
    for score in (lambda v: -v[0].priority if v else 0,
                  lambda v: -sum(b.priority + 2**31 for b in v),
                  lambda v: -len(v),
                  lambda v: min(b.seq for b in v if b.priority == v[0].priority) if v else 0):
        best = max(score(c[2]) for c in candidates)
        candidates = [c for c in candidates if score(c[2]) == best]
    _, name, out = candidates[0]
    return name, [v.key for v in out]


def random_cluster(rng: random.Random, nodes: int) -> tuple[NodeTable, Framework]:
    t, fw = setup(*(node(f"n{i}", cpu=rng.choice([2000, 4000, 8000]), mem=rng.choice([4, 8]) * GI,
                         pods=rng.choice([4, 8, 110]),
                         taints=(Taint("t", "x"),) if rng.random() < 0.1 else ())
                    for i in range(nodes)))
    k = 0
    for i in range(nodes):
        while True:
            p = PodInfo(f"ns/b{k}", {"cpu": rng.choice([100, 250, 500, 1000, 2000]),
                                     "memory": rng.choice([GI // 4, GI // 2, GI, 2 * GI])},
                        priority=rng.choice([-10, 0, 0, 5, 50, 100, 2_000_000_000]),
                        tolerations=(Toleration(operator="Exists"),))
            p.critical = p.priority >= 2_000_000_000
            if fw.schedule(p).__class__ is FitError or rng.random() < 0.15:
                break
            t.bind(p, f"n{i}")
            k += 1
    return t, fw


def test_matches_kube_on_random_clusters() -> None:
    rng = random.Random(1234)
    checked = preempted = 0
    for _ in range(150):
        t, fw = random_cluster(rng, rng.randint(1, 12))
        pod = PodInfo("ns/new", {"cpu": rng.choice([500, 1000, 3000, 6000]),
                                 "memory": rng.choice([GI // 2, 2 * GI, 6 * GI])},
                      priority=rng.choice([1, 10, 60, 2_000_001_000]))
        failure = fw.schedule(pod)
        if not isinstance(failure, FitError):
            continue
        checked += 1
        expected = kube_preempt(t, fw, pod)
        result = preempt(t, pod, failure, max_candidates=100)
        if expected is None:
            assert isinstance(result, FitError)
        else:
            preempted += 1
            assert isinstance(result, Preemption)
            assert (result.node, [v.key for v in result.victims]) == expected
        small = preempt(t, pod, failure, max_candidates=1)  # sampled rules 3-5, exact rule 2
        if expected is not None:
            assert isinstance(small, Preemption) and small.victims[0].priority == \
                t.bound[expected[1][0]].priority
    assert checked > 50 and preempted > 20


def test_many_identical_full_nodes() -> None:
    t, fw = setup(*(node(f"n{i}") for i in range(300)))
    for i in range(300):
        fill(t, f"n{i}", *((f"n{i}-p{j}", 500, 0) for j in range(8)))
    pod = PodInfo("ns/p", {"cpu": 1200}, priority=100)
    node_name, gone = victims(run(t, fw, pod))
    # Rules 3-4 tie everywhere; rule 5 is decided among the 16 sampled rows (the lowest, as all
    # expect 3 victims): the one whose victims started last. The latest-started pods go.
    assert node_name == "n15"
    assert gone == ["n15-p5", "n15-p6", "n15-p7"]


def test_select_victims_on_one_node_and_reasons_survive_the_eviction() -> None:
    from nodeagent.cluster.scheduler.preemption import select_victims

    t, fw = setup(node("n", cpu=4000))
    fill(t, "n", ("a", 500, 1), ("b", 2000, 3), ("c", 1000, 3), ("d", 500, 9))
    pod = PodInfo("ns/p", {"cpu": 2000}, priority=5)
    cols, vals = (a.tolist() for a in pod.vector(t))
    assert [v.key for v in select_victims(t, 0, 5, cols, vals) or []] == ["ns/b"]
    assert select_victims(t, 0, 2, cols, vals) is None  # only "a" may go: 500 is not enough
    failure = fw.schedule(pod)
    assert isinstance(failure, FitError)
    result = preempt(t, pod, failure)
    assert isinstance(result, Preemption)
    for v in result.victims:
        t.unbind(v.key)
    assert str(failure) == "0/1 nodes are available: 1 Insufficient cpu."
