"""Preemption with PodDisruptionBudgets (upstream's selectVictimsOnNode PDB split and
pickOneNodeForPreemption rule 1): a victim whose eviction a budget allows is preferred on a node,
a node without violations is preferred over every other rule, pods in a budget's disruptedPods and
budgets of other namespaces or with empty selectors do not count."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.cluster.scheduler.framework import FitError, Framework, PodInfo
from nodeagent.cluster.scheduler.node_table import NodeSpec, NodeTable
from nodeagent.cluster.scheduler.podspread import Placement
from nodeagent.cluster.scheduler.preemption import Budget, Preemption, preempt, violating

GI = 2**30


def setup(*names: str) -> tuple[NodeTable, Framework]:
    t = NodeTable(capacity=2)
    for n in names:
        t.upsert(NodeSpec(n, {"cpu": 4000, "memory": 8 * GI, "pods": 110}))
    return t, Framework(t)


def fill(t: NodeTable, node: str, *pods: tuple[str, int, int, str]) -> None:
    """Bind (name, cpu millis, priority, app label) pods in namespace ns, in this order (= start order)."""
    for name, cpu, prio, app in pods:
        t.bind(PodInfo(f"ns/{name}", {"cpu": cpu}, priority=prio, placement=Placement("ns", {"app": app})), node)


def budget(app: str, allowed: int, *, namespace: str = "ns", disrupted: tuple[str, ...] = (),
           selector: Any = None) -> Budget:
    sel = selector if selector is not None else {"matchLabels": {"app": app}}
    return Budget.of({"metadata": {"name": app, "namespace": namespace}, "spec": {"selector": sel},
                      "status": {"disruptionsAllowed": allowed, "disruptedPods": dict.fromkeys(disrupted, "t")}})


def choose(t: NodeTable, fw: Framework, cpu: int, prio: int, budgets: list[Budget]) -> tuple[str, list[str]]:
    pod = PodInfo("ns/p", {"cpu": cpu}, priority=prio)
    failure = fw.schedule(pod)
    assert isinstance(failure, FitError)
    got = preempt(t, pod, failure, budgets=budgets)
    assert isinstance(got, Preemption), str(got)
    return got.node, [v.key.removeprefix("ns/") for v in got.victims]


def one_node(*pods: tuple[str, int, int, str]) -> tuple[NodeTable, Framework]:
    t, fw = setup("n")
    fill(t, "n", *pods)
    return t, fw


# a node full with a less important guarded pod and a more important free one; the preemptor needs half
ONE = (("guarded", 2000, 1, "db"), ("free", 2000, 5, "web"))


@pytest.mark.parametrize(("case", "budgets", "want"), [
    ("no budgets: the least important goes", [], ["guarded"]),
    ("a budget with no disruption left keeps its pod: the other goes", [budget("db", 0)], ["free"]),
    ("a budget that allows one lets it go", [budget("db", 1)], ["guarded"]),
    ("a pod already in disruptedPods is not counted again", [budget("db", 0, disrupted=("guarded",))],
     ["guarded"]),
    ("another namespace's budget", [budget("db", 0, namespace="other")], ["guarded"]),
    ("an empty selector selects nothing here", [budget("db", 0, selector={})], ["guarded"]),
])
def test_victims_on_a_node(case: str, budgets: list[Budget], want: list[str]) -> None:
    t, fw = one_node(*ONE)
    assert choose(t, fw, 2000, 10, budgets) == ("n", want), case


def test_violations_are_counted_as_the_budget_runs_out() -> None:
    t, _ = one_node(("a", 1000, 3, "db"), ("b", 1000, 2, "db"), ("c", 1000, 1, "db"))
    assert violating(t, t.order[0], [budget("db", 1)]) == {"ns/b", "ns/c"}  # a spends the one allowed
    assert violating(t, t.order[0], [budget("db", 3)]) == set()


def test_a_node_without_violations_beats_a_lower_priority_victim() -> None:
    """Rule 1 before rule 2: the only candidates of the lowest level violate a budget, so every
    node is weighed; without the budget the lower-priority victim's node wins."""
    t, fw = setup("a", "b")
    fill(t, "a", ("a-db", 4000, 1, "db"))
    fill(t, "b", ("b-web", 4000, 5, "web"))
    assert choose(t, fw, 3000, 10, []) == ("a", ["a-db"])
    assert choose(t, fw, 3000, 10, [budget("db", 0)]) == ("b", ["b-web"])
    assert choose(t, fw, 3000, 10, [budget("db", 0), budget("web", 0)]) == ("a", ["a-db"])  # both violate: rule 2


def test_fewest_violations_before_the_latest_start() -> None:
    t, fw = setup("early", "late")
    fill(t, "early", ("e", 4000, 1, "web"))
    fill(t, "late", ("l", 4000, 1, "db"))  # started later: rule 5 would pick it
    assert choose(t, fw, 4000, 10, []) == ("late", ["l"])
    assert choose(t, fw, 4000, 10, [budget("db", 0)]) == ("early", ["e"])
