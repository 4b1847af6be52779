"""PodTopologySpread in the scheduler's framework (DoNotSchedule filter, ScheduleAnyway score, the
system default constraints) and the node table's per-label-set pod counts it reads."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np
import pytest

from nodeagent.cluster.scheduler import nodeaffinity as na
from nodeagent.cluster.scheduler import podspread
from nodeagent.cluster.scheduler.framework import FitError, Framework, PodInfo, ScoringConfig
from nodeagent.cluster.scheduler.node_table import NodeSpec, NodeTable
from nodeagent.core.wellknown import LABEL_HOSTNAME

GI = 2**30
ZONE = podspread.LABEL_ZONE
SKEW = "node(s) didn't match pod topology spread constraints"
MISSING = "node(s) didn't match pod topology spread constraints (missing required label)"


def node(name: str, zone: str | None = None, cpu: int = 4000, **labels: str) -> NodeSpec:
    if zone is not None:
        labels[ZONE] = zone
    return NodeSpec(name, {"cpu": cpu, "memory": 8 * GI, "pods": 110}, labels={LABEL_HOSTNAME: name, **labels})


def cluster(*specs: NodeSpec, config: ScoringConfig | None = None) -> tuple[NodeTable, Framework]:
    t = NodeTable(capacity=2)
    for s in specs:
        t.upsert(s)
    return t, Framework(t, config)


def info(name: str, ns: str = "default", labels: dict[str, str] | None = None, owner: str | None = None,
         **spec: Any) -> PodInfo:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner, "name": "o", "uid": "u",
                                    "controller": True}]
    obj = {"metadata": meta, "spec": spec}
    return PodInfo(f"{ns}/{name}", {"cpu": 100}, node_selector=spec.get("nodeSelector") or {},
                   required_affinity=na.required_terms(spec), placement=podspread.placement_of(obj))


def spread(key: str = ZONE, skew: int = 1, when: str = "DoNotSchedule", **extra: Any) -> dict[str, Any]:
    return {"maxSkew": skew, "topologyKey": key, "whenUnsatisfiable": when,
            "labelSelector": {"matchLabels": {"app": "web"}}, **extra}


WEB = {"app": "web"}


def fill(t: NodeTable, counts: dict[str, int], ns: str = "default", labels: dict[str, str] = WEB) -> None:
    tag = "-".join(labels.values())
    for name, k in counts.items():
        for i in range(k):
            t.bind(info(f"{name}-{tag}{i}", ns=ns, labels=labels), name)


def feasible(fw: Framework, pod: PodInfo) -> list[str]:
    return [fw.table.names[i] for i in np.flatnonzero(fw.filter(pod).mask)]


# ---- DoNotSchedule -------------------------------------------------------------------------------
@pytest.mark.parametrize(("counts", "skew", "want"), [
    ({"a1": 1, "a2": 1}, 1, ["b1"]),  # zone a has 2, b has 0: only b keeps the skew at 1
    ({"a1": 1}, 1, ["b1"]),  # a:1 b:0 -> a would be 2-0
    ({"a1": 1}, 2, ["a1", "a2", "b1"]),
    ({"a1": 1, "b1": 1}, 1, ["a1", "a2", "b1"]),
    ({}, 1, ["a1", "a2", "b1"]),
])
def test_max_skew_over_zones(counts: dict[str, int], skew: int, want: list[str]) -> None:
    t, fw = cluster(node("a1", "a"), node("a2", "a"), node("b1", "b"))
    fill(t, counts)
    pod = info("new", labels=WEB, topologySpreadConstraints=[spread(skew=skew)])
    assert feasible(fw, pod) == want
    if len(want) < 3:
        r = fw.schedule(pod)
        assert isinstance(r, FitError) is False
        assert fw.filter(pod).reasons() == {SKEW: 3 - len(want)}


def test_a_node_without_the_key_fails_with_missing_required_label() -> None:
    t, fw = cluster(node("a1", "a"), node("bare"))
    r = fw.schedule(info("new", labels=WEB, topologySpreadConstraints=[spread(), spread(LABEL_HOSTNAME)]))
    assert r.node == "a1"  # type: ignore[union-attr]
    f = fw.filter(info("new", labels=WEB, topologySpreadConstraints=[spread(skew=1, key="rack")]))
    assert f.reasons() == {MISSING: 2}


def test_self_match_counts_only_when_the_selector_matches_the_incoming_pod() -> None:
    t, fw = cluster(node("a1", "a"), node("b1", "b"))
    fill(t, {"a1": 1})
    assert feasible(fw, info("web", labels=WEB, topologySpreadConstraints=[spread()])) == ["b1"]
    # a pod the selector does not match: skew = 1 + 0 - 0 on a1, within 1
    assert feasible(fw, info("other", labels={"app": "x"}, topologySpreadConstraints=[spread()])) == ["a1", "b1"]


def test_min_domains_counts_missing_domains_as_zero() -> None:
    t, fw = cluster(node("a1", "a"), node("b1", "b"))
    fill(t, {"a1": 1, "b1": 1})
    assert feasible(fw, info("new", labels=WEB, topologySpreadConstraints=[spread()])) == ["a1", "b1"]
    assert feasible(fw, info("new", labels=WEB, topologySpreadConstraints=[spread(minDomains=3)])) == []


@pytest.mark.parametrize(("policy", "want"), [("Honor", ["a1", "b1"]), ("Ignore", [])])
def test_node_affinity_policy_decides_whether_excluded_nodes_count(policy: str, want: list[str]) -> None:
    t, fw = cluster(node("a1", "a", pool="x"), node("b1", "b", pool="x"), node("c1", "c", pool="y"))
    fill(t, {"a1": 1, "b1": 1})  # zone c, which the pod may not use, is empty
    pod = info("new", labels=WEB, nodeSelector={"pool": "x"},
               topologySpreadConstraints=[spread(nodeAffinityPolicy=policy)])
    assert feasible(fw, pod) == want


@pytest.mark.parametrize(("policy", "want"), [("Ignore", []), ("Honor", ["a1", "b1"])])
def test_node_taints_policy(policy: str, want: list[str]) -> None:
    from nodeagent.cluster.scheduler.node_table import Taint
    t, fw = cluster(node("a1", "a"), node("b1", "b"),
                    NodeSpec("c1", {"cpu": 4000, "memory": GI, "pods": 110}, labels={ZONE: "c"},
                             taints=(Taint("dedicated", "x", "NoSchedule"),)))
    fill(t, {"a1": 1, "b1": 1})
    pod = info("new", labels=WEB, topologySpreadConstraints=[spread(nodeTaintsPolicy=policy)])
    assert feasible(fw, pod) == want


def test_only_pods_of_the_same_namespace_and_selector_count() -> None:
    t, fw = cluster(node("a1", "a"), node("b1", "b"))
    fill(t, {"a1": 3}, ns="other")
    fill(t, {"a1": 3}, labels={"app": "db"})
    assert feasible(fw, info("new", labels=WEB, topologySpreadConstraints=[spread()])) == ["a1", "b1"]


def test_replicas_under_do_not_schedule_end_up_balanced() -> None:
    t, fw = cluster(node("a1", "a"), node("a2", "a"), node("b1", "b"), config=ScoringConfig(strategy="MostAllocated"))
    placed = []
    for i in range(6):
        pod = info(f"web-{i}", labels=WEB, topologySpreadConstraints=[spread()])
        r = fw.schedule(pod)
        assert not isinstance(r, FitError)
        t.bind(pod, r.node)
        placed.append(t.spec(r.node).labels[ZONE])
    assert Counter(placed) == {"a": 3, "b": 3}


# ---- ScheduleAnyway and the system defaults ------------------------------------------------------
def test_schedule_anyway_score_follows_upstreams_formula() -> None:
    t, fw = cluster(node("n1"), node("n2"), node("n3"))
    fill(t, {"n1": 2, "n2": 1})
    pod = info("new", labels=WEB, topologySpreadConstraints=[spread(LABEL_HOSTNAME, skew=1, when="ScheduleAnyway")])
    f = fw.filter(pod)
    assert f.mask.all()  # ScheduleAnyway never filters
    w = math.log(3 + 2)
    raw = [round(2 * w), round(1 * w), 0]  # count * log(domains + 2) + (maxSkew - 1)
    lo, hi = min(raw), max(raw)
    want = [2.0 * (100 * (hi + lo - s) // hi) for s in raw]
    assert fw._placement_scores(pod, f).tolist() == want
    assert fw.schedule(pod).node == "n3"  # type: ignore[union-attr]


def test_with_its_own_constraints_a_node_missing_a_key_scores_zero() -> None:
    t, fw = cluster(node("a1", "a"), node("bare"))
    pod = info("new", labels=WEB, topologySpreadConstraints=[spread(when="ScheduleAnyway")])
    assert fw._placement_scores(pod, fw.filter(pod)).tolist() == [200.0, 0.0]


@pytest.mark.parametrize(("owner", "own", "labels", "defaulted"), [
    ("ReplicaSet", False, WEB, True),
    ("StatefulSet", False, WEB, True),
    ("ReplicationController", False, WEB, True),
    ("Job", False, WEB, False),  # upstream's default selector comes from Services/RC/RS/SS
    (None, False, WEB, False),
    ("ReplicaSet", True, WEB, False),  # its own constraints replace the defaults
    ("ReplicaSet", False, {}, False),  # no labels: an empty selector, skipped
])
def test_system_default_constraints_apply_to_replicas_without_their_own(
        owner: str | None, own: bool, labels: dict[str, str], defaulted: bool) -> None:
    extra = {"topologySpreadConstraints": [spread(when="ScheduleAnyway")]} if own else {}
    p = info("p", labels=labels, owner=owner, **extra).placement
    assert p is not None and p.system_default is defaulted
    if defaulted:
        assert [(c.topology_key, c.max_skew, c.when_unsatisfiable) for c in p.spread] == \
            [(LABEL_HOSTNAME, 3, "ScheduleAnyway"), (ZONE, 5, "ScheduleAnyway")]


@pytest.mark.parametrize(("owner", "want"), [("ReplicaSet", {"n1": 2, "n2": 2, "n3": 2}), (None, {"n1": 6})])
def test_default_spreading_spreads_replicas_even_when_the_scorer_packs(owner: str | None, want: dict[str, int]) -> None:
    t, fw = cluster(node("n1"), node("n2"), node("n3"), config=ScoringConfig(strategy="MostAllocated"))
    got: Counter[str] = Counter()
    for i in range(6):
        pod = info(f"web-{i}", labels=WEB, owner=owner)
        r = fw.schedule(pod)
        assert not isinstance(r, FitError)
        t.bind(pod, r.node)
        got[r.node] += 1
    assert got == want


def test_default_spreading_balances_nodes_across_zones() -> None:
    t, fw = cluster(node("a1", "a"), node("a2", "a"), node("b1", "b"), node("b2", "b"),
                    config=ScoringConfig(strategy="MostAllocated"))
    got: Counter[str] = Counter()
    for i in range(8):
        pod = info(f"web-{i}", labels=WEB, owner="ReplicaSet")
        r = fw.schedule(pod)
        assert not isinstance(r, FitError)
        t.bind(pod, r.node)
        got[r.node] += 1
    assert sorted(got.values()) == [2, 2, 2, 2]


# ---- the node table's label-set counts -----------------------------------------------------------
def test_label_set_counts_follow_bind_unbind_and_node_removal() -> None:
    t, _ = cluster(node("n1"), node("n2"), node("n3"))
    fill(t, {"n1": 2, "n3": 1})
    fill(t, {"n3": 1}, labels={"app": "db"})
    sel = podspread.label_selector({"matchLabels": WEB})
    assert podspread.matching_counts(t, ("default",), sel).tolist() == [2, 0, 1]
    t.unbind("default/n1-web0")
    assert podspread.matching_counts(t, ("default",), sel).tolist() == [1, 0, 1]
    t.remove("n1")  # n3 moves into row 0
    assert t.names == ["n3", "n2"]
    assert podspread.matching_counts(t, ("default",), sel).tolist() == [1, 0]
    assert podspread.matching_counts(t, None, podspread.label_selector({})).tolist() == [2, 0]
    assert podspread.matching_counts(t, ("default",), None).tolist() == [0, 0]  # a null selector
    for i in range(100):  # growth of the node and label-set dimensions keeps the counts
        t.upsert(node(f"x{i}"))
        t.bind(info(f"p{i}", labels={"i": str(i)}), f"x{i}")
    assert podspread.matching_counts(t, ("default",), sel).tolist()[:2] == [1, 0]
    assert podspread.matching_counts(t, ("default",), podspread.label_selector({"matchLabels": {"i": "7"}})).sum() == 1


def test_pods_without_labels_from_their_object_are_not_counted() -> None:
    t, _ = cluster(node("n1"))
    t.bind(PodInfo("default/plain", {"cpu": 1}), "n1")  # converted without its object
    assert t.set_labels == []


@pytest.mark.parametrize(("selector", "labels", "want"), [
    ({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True),
    ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]}, {"a": "2"}, True),
    ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, True),
    ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {}, False),
    ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {}, True),
    ({"matchExpressions": [{"key": "a", "operator": "Weird"}]}, {"a": "1"}, False),
    ({}, {"x": "y"}, True),
    (None, {"x": "y"}, False),
])
def test_label_selectors(selector: Any, labels: dict[str, str], want: bool) -> None:
    sel = podspread.label_selector(selector)
    assert (sel is not None and sel.matches(labels)) is want


def test_the_cache_recounts_a_bound_pod_whose_labels_change() -> None:
    from nodeagent.cluster.scheduling.cache import SchedulerCache
    cache = SchedulerCache()
    cache.apply_node("ADDED", {"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "4", "memory": "8Gi",
                                                                                    "pods": "110"}}})
    obj = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "namespace": "default", "uid": "u1", "labels": {"app": "web"}},
           "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i", "command": ["sleep", "1"]}]}}
    cache.apply_pod("ADDED", obj)
    web, db = podspread.label_selector({"matchLabels": WEB}), podspread.label_selector({"matchLabels": {"app": "db"}})
    assert podspread.matching_counts(cache.table, ("default",), web).tolist() == [1]
    relabelled = {**obj, "metadata": {**obj["metadata"], "labels": {"app": "db"}}}
    cache.apply_pod("MODIFIED", relabelled)
    assert podspread.matching_counts(cache.table, ("default",), web).tolist() == [0]
    assert podspread.matching_counts(cache.table, ("default",), db).tolist() == [1]
    assert list(cache.table.bound) == ["default/p"]
