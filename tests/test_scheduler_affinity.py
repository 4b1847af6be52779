"""NodeAffinity (required filter, preferred score) and required pod anti-affinity in the scheduler's
framework, table-tested against the rules of kube-scheduler's plugins."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from nodeagent.cluster.scheduler import nodeaffinity as na
from nodeagent.cluster.scheduler.framework import FitError, Framework, PodInfo, Scheduled, ScoringConfig
from nodeagent.cluster.scheduler.node_table import NodeSpec, NodeTable
from nodeagent.cluster.scheduler.podspread import placement_of
from nodeagent.cluster.scheduler.preemption import preempt
from nodeagent.core.wellknown import LABEL_HOSTNAME

GI = 2**30
NODE_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
ANTI = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI = "node(s) didn't satisfy existing pods anti-affinity rules"


def node(name: str, cpu: int = 4000, pods: int = 110, **labels: str) -> NodeSpec:
    return NodeSpec(name, {"cpu": cpu, "memory": 8 * GI, "pods": pods},
                    labels={LABEL_HOSTNAME: name, **labels})


def cluster(*specs: NodeSpec, config: ScoringConfig | None = None) -> tuple[NodeTable, Framework]:
    t = NodeTable(capacity=2)
    for s in specs:
        t.upsert(s)
    return t, Framework(t, config)


def info(name: str, ns: str = "default", labels: dict[str, str] | None = None, cpu: int = 100,
         priority: int = 0, **spec: Any) -> PodInfo:
    """A PodInfo as the scheduler's cache makes one from the stored object."""
    obj = {"metadata": {"name": name, "namespace": ns, "labels": labels or {}}, "spec": spec}
    return PodInfo(f"{ns}/{name}", {"cpu": cpu}, priority=priority,
                   node_selector=spec.get("nodeSelector") or {},
                   required_affinity=na.required_terms(spec),
                   preferred_affinity=na.preferred_terms(spec), placement=placement_of(obj))


def required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    return {"matchExpressions": [{"key": key, "operator": op, "values": list(values)}]}


def feasible(fw: Framework, pod: PodInfo) -> list[str]:
    f = fw.filter(pod)
    return [fw.table.names[i] for i in np.flatnonzero(f.mask)]


# ---- requirements: the scalar rules and the vectorised ones agree ---------------------------------
NODES = [node("n0", zone="a", gen="3"), node("n1", zone="b", gen="5"), node("n2", gen="x"), node("n3")]
REQUIREMENTS = [  # (key, operator, values) -> the nodes it matches
    (("zone", "In", ("a", "b")), ["n0", "n1"]),
    (("zone", "In", ("c",)), []),
    (("zone", "NotIn", ("a",)), ["n1", "n2", "n3"]),  # NotIn matches nodes without the key
    (("zone", "Exists", ()), ["n0", "n1"]),
    (("zone", "DoesNotExist", ()), ["n2", "n3"]),
    (("nokey", "DoesNotExist", ()), ["n0", "n1", "n2", "n3"]),
    (("gen", "Gt", ("4",)), ["n1"]),  # "x" is no integer: no match
    (("gen", "Lt", ("4",)), ["n0"]),
    (("gen", "Gt", ("4", "5")), []),  # Gt needs exactly one value
    (("gen", "Gt", ("four",)), []),
    (("zone", "Bogus", ("a",)), []),
]


@pytest.mark.parametrize(("req", "want"), REQUIREMENTS)
def test_each_operator_matches_the_same_nodes_scalar_and_vectorised(req: na.Requirement, want: list[str]) -> None:
    t, _ = cluster(*NODES)
    term: na.Term = ((req,), ())
    scalar = [s.name for s in NODES if na.term_matches(term, s.labels, s.name)]
    vector = [t.names[i] for i in np.flatnonzero(na.term_mask(t, term))]
    assert scalar == vector == want


@pytest.mark.parametrize(("terms", "want"), [
    ([expr("zone", "In", "a"), expr("zone", "In", "b")], ["n0", "n1"]),  # terms are ORed
    ([{"matchExpressions": [{"key": "zone", "operator": "Exists"}, {"key": "gen", "operator": "Lt", "values": ["4"]}]}],
     ["n0"]),  # requirements within a term are ANDed
    ([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2", "nope"]}]}], ["n2"]),
    ([{"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n2"]}]}], ["n0", "n1", "n3"]),
    ([{"matchFields": [{"key": "metadata.labels", "operator": "In", "values": ["n2"]}]}], []),  # only metadata.name
    ([{}], []),  # an empty term matches nothing
    ([], []),  # so does an empty term list
])
def test_required_node_affinity_filters_with_kubes_reason(terms: list[dict[str, Any]], want: list[str]) -> None:
    t, fw = cluster(*NODES)
    pod = info("p", affinity=required(*terms))
    assert feasible(fw, pod) == want
    assert [s.name for s in NODES if any(na.term_matches(na.parse_term(x), s.labels, s.name) for x in terms)] == want
    result = fw.schedule(pod)
    if not want:
        assert isinstance(result, FitError)
        assert str(result) == f"0/4 nodes are available: 4 {NODE_AFFINITY}."
    else:
        assert isinstance(result, Scheduled) and result.node in want


def test_node_selector_and_required_affinity_must_both_hold() -> None:
    _, fw = cluster(*NODES)
    pod = info("p", nodeSelector={"zone": "a"}, affinity=required(expr("gen", "Gt", "4")))
    assert feasible(fw, pod) == []
    assert feasible(fw, info("q", nodeSelector={"zone": "b"}, affinity=required(expr("gen", "Gt", "4")))) == ["n1"]


def test_the_static_mask_cache_tells_affinities_apart() -> None:
    _, fw = cluster(*NODES)
    assert feasible(fw, info("p", affinity=required(expr("zone", "In", "a")))) == ["n0"]
    assert feasible(fw, info("q", affinity=required(expr("zone", "In", "b")))) == ["n1"]
    assert feasible(fw, info("r")) == ["n0", "n1", "n2", "n3"]


def test_a_label_change_reaches_the_cached_mask() -> None:
    t, fw = cluster(*NODES)
    pod = info("p", affinity=required(expr("zone", "In", "c")))
    assert feasible(fw, pod) == []
    t.upsert(node("n3", zone="c"))
    assert feasible(fw, pod) == ["n3"]


def test_the_controllers_read_node_affinity_with_the_same_rules() -> None:
    from nodeagent.cluster.controllers.common import nodeaffinity as controllers
    for spec_node in NODES:
        n = {"metadata": {"name": spec_node.name, "labels": dict(spec_node.labels)}}
        for (key, op, values), want in REQUIREMENTS:
            spec = {"affinity": required({"matchExpressions": [{"key": key, "operator": op, "values": list(values)}]})}
            assert controllers.required_affinity_matches(spec, n) is (spec_node.name in want)


# ---- preferred node affinity: summed weights, normalised 0..100, plugin weight 2 -------------------
def preferred(*weighted: tuple[int, dict[str, Any]]) -> dict[str, Any]:
    return {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution":
                             [{"weight": w, "preference": term} for w, term in weighted]}}


def test_preferred_terms_add_their_weights_and_normalise_to_the_best_feasible_node() -> None:
    t, fw = cluster(node("a", zone="a", disk="ssd"), node("b", zone="b", disk="ssd"), node("c", zone="c"))
    pod = info("p", affinity=preferred((80, expr("zone", "In", "a")), (20, expr("disk", "In", "ssd"))))
    base = fw.score(pod)
    assert base[0] == base[1] == base[2]  # equal nodes: only the preference tells them apart
    f = fw.filter(pod)
    extra = fw._placement_scores(pod, f)
    # raw 100, 20, 0 -> 100 * raw / 100, times the plugin weight 2
    assert extra.tolist() == [200.0, 40.0, 0.0]
    assert fw.schedule(pod) == Scheduled("a", int(base[0]) + 200)
    # the normalisation is over the feasible nodes only: with "a" excluded, "b" gets the full 100
    both = {"nodeAffinity": {**preferred((80, expr("zone", "In", "a")), (20, expr("disk", "In", "ssd")))["nodeAffinity"],
                             **required(expr("zone", "NotIn", "a"))["nodeAffinity"]}}
    pod2 = info("q", affinity=both)
    f2 = fw.filter(pod2)
    assert fw._placement_scores(pod2, f2)[1:].tolist() == [200.0, 0.0]
    assert isinstance(r := fw.schedule(pod2), Scheduled) and r.node == "b"


def test_a_preference_outweighs_a_small_resource_difference_but_zero_weights_do_nothing() -> None:
    t, fw = cluster(node("busy", zone="a"), node("idle", zone="b"))
    t.bind(info("x/filler", cpu=1000), "busy")
    assert fw.schedule(info("p")).node == "idle"  # type: ignore[union-attr]
    assert fw.schedule(info("q", affinity=preferred((1, expr("zone", "In", "a"))))).node == "busy"  # type: ignore[union-attr]
    assert na.preferred_terms({"affinity": preferred((0, expr("zone", "In", "a")))}) == ()


# ---- required pod anti-affinity --------------------------------------------------------------------
def anti(key: str = LABEL_HOSTNAME, ns: list[str] | None = None, ns_selector: dict[str, Any] | None = None,
         **match: str) -> dict[str, Any]:
    term: dict[str, Any] = {"labelSelector": {"matchLabels": match}, "topologyKey": key}
    if ns is not None:
        term["namespaces"] = ns
    if ns_selector is not None:
        term["namespaceSelector"] = ns_selector
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def place(t: NodeTable, fw: Framework, pod: PodInfo) -> str | FitError:
    r = fw.schedule(pod)
    if isinstance(r, FitError):
        return r
    t.bind(pod, r.node)
    return r.node


def test_one_replica_per_node_then_the_fourth_fits_nowhere() -> None:
    t, fw = cluster(node("n1"), node("n2"), node("n3"))
    got = [place(t, fw, info(f"web-{i}", labels={"app": "web"}, affinity=anti(app="web"))) for i in range(4)]
    assert sorted(got[:3]) == ["n1", "n2", "n3"]  # type: ignore[type-var]
    assert isinstance(got[3], FitError)
    assert str(got[3]) == f"0/3 nodes are available: 3 {ANTI}."
    # another app is not affected, nor the same labels in another namespace
    assert isinstance(place(t, fw, info("db", labels={"app": "db"}, affinity=anti(app="db"))), str)
    assert isinstance(place(t, fw, info("web-0", ns="other", labels={"app": "web"}, affinity=anti(app="web"))), str)


def test_existing_pods_anti_affinity_keeps_a_matching_newcomer_away() -> None:
    t, fw = cluster(node("n1"), node("n2"))
    lonely = info("lonely", labels={"app": "lonely"}, affinity=anti(app="db"))
    t.bind(lonely, "n1")
    db = info("db", labels={"app": "db"})  # no rules of its own
    f = fw.filter(db)
    assert f.mask.tolist() == [False, True]
    assert f.reasons() == {EXISTING_ANTI: 1}
    other = info("db", ns="elsewhere", labels={"app": "db"})  # the term's namespace is the holder's
    assert fw.filter(other).mask.tolist() == [True, True]
    t.unbind(lonely.key)  # gone: its rule goes with it
    assert fw.filter(db).mask.tolist() == [True, True]


def test_anti_affinity_over_a_zone_blocks_the_whole_domain_and_nodes_without_the_key_pass() -> None:
    t, fw = cluster(node("a1", zone="a"), node("a2", zone="a"), node("b1", zone="b"), node("nozone"))
    t.bind(info("web-0", labels={"app": "web"}), "a1")
    pod = info("web-1", labels={"app": "web"}, affinity=anti("zone", app="web"))
    assert feasible(fw, pod) == ["b1", "nozone"]


@pytest.mark.parametrize(("namespaces", "selector", "blocked"), [
    (None, None, False),  # the pod's own namespace only
    (["team-a"], None, True),
    (None, {}, True),  # an empty namespaceSelector: every namespace
])
def test_anti_affinity_namespaces(namespaces: list[str] | None, selector: dict[str, Any] | None,
                                  blocked: bool) -> None:
    t, fw = cluster(node("n1"), node("n2"))
    t.bind(info("web-0", ns="team-a", labels={"app": "web"}), "n1")
    pod = info("web-1", ns="team-b", labels={"app": "web"}, affinity=anti(ns=namespaces, ns_selector=selector, app="web"))
    assert feasible(fw, pod) == (["n2"] if blocked else ["n1", "n2"])


def test_the_first_failing_plugin_names_each_node_and_resources_come_first() -> None:
    t, fw = cluster(node("small", cpu=50), node("n2"), node("n3"))
    t.bind(info("web-0", labels={"app": "web"}), "n2")
    r = fw.schedule(info("web-1", labels={"app": "web"}, affinity={**anti(app="web"), **required(
        {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n3"]}]})}))
    assert isinstance(r, FitError)
    assert r.reasons == {"Insufficient cpu": 1, ANTI: 1, NODE_AFFINITY: 1}


def test_preemption_does_not_pick_a_node_the_anti_affinity_rules_out() -> None:
    t, fw = cluster(node("n1", cpu=1000), node("n2", cpu=1000))
    t.bind(info("web-0", labels={"app": "web"}, cpu=100), "n1")
    t.bind(info("filler", cpu=1000), "n2")
    pod = info("web-1", labels={"app": "web"}, cpu=500, priority=100, affinity=anti(app="web"))
    r = fw.schedule(pod)
    assert isinstance(r, FitError)
    choice = preempt(t, pod, r)
    assert not isinstance(choice, FitError)
    assert choice.node == "n2" and [v.key for v in choice.victims] == ["default/filler"]


def test_holders_of_anti_affinity_follow_node_removal_and_growth() -> None:
    t, fw = cluster(node("n1"), node("n2"), node("n3"))
    t.bind(info("lonely", labels={"app": "lonely"}, affinity=anti(app="db")), "n3")
    t.bind(info("lonely2", labels={"app": "lonely"}, affinity=anti(app="db")), "n3")
    db = info("db", labels={"app": "db"})
    assert feasible(fw, db) == ["n1", "n2"]
    t.remove("n1")  # n3 moves into row 0
    assert t.names == ["n3", "n2"] and feasible(fw, db) == ["n2"]
    for i in range(10):  # the node dimension grows past the initial capacity
        t.upsert(node(f"x{i}"))
    assert len(feasible(fw, db)) == 11 and "n3" not in feasible(fw, db)
    t.unbind("default/lonely")
    assert "n3" not in feasible(fw, db)  # one holder is left
    t.unbind("default/lonely2")
    assert "n3" in feasible(fw, db) and t.anti_counts == {}


# ---- required pod affinity -------------------------------------------------------------------------
AFFINITY = "node(s) didn't match pod affinity rules"


def near(key: str = LABEL_HOSTNAME, **match: str) -> dict[str, Any]:
    return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": match}, "topologyKey": key}]}}


def test_pod_affinity_follows_the_matching_pods_domain() -> None:
    t, fw = cluster(node("a1", zone="a"), node("a2", zone="a"), node("b1", zone="b"), node("bare"))
    t.bind(info("cache-0", labels={"app": "cache"}), "a2")
    assert feasible(fw, info("web", labels={"app": "web"}, affinity=near(app="cache"))) == ["a2"]
    assert feasible(fw, info("web", labels={"app": "web"}, affinity=near("zone", app="cache"))) == ["a1", "a2"]
    r = fw.schedule(info("web", labels={"app": "web"}, affinity=near(app="other")))
    assert isinstance(r, FitError) and str(r) == f"0/4 nodes are available: 4 {AFFINITY}."


def test_the_first_pod_of_a_self_affine_set_may_go_to_any_node_with_the_key() -> None:
    t, fw = cluster(node("a1", zone="a"), node("b1", zone="b"), node("bare"))
    first = info("g-0", labels={"app": "g"}, affinity=near("zone", app="g"))
    assert feasible(fw, first) == ["a1", "b1"]  # "bare" lacks the key
    t.bind(first, "b1")
    assert feasible(fw, info("g-1", labels={"app": "g"}, affinity=near("zone", app="g"))) == ["b1"]
    # a pod that does not match its own terms gets no such pass
    assert feasible(fw, info("h-0", labels={"app": "h"}, affinity=near("zone", app="nobody"))) == []
