"""Reconciling the store with an agent's pod list: one table row per rule of reconcile.py."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.cluster.agents.reconcile import (
    Adopt,
    AdoptBinding,
    DeleteOnAgent,
    Foreign,
    Gone,
    Rebind,
    Status,
    reconcile,
)
from nodeagent.cluster.objects import POD_SCHEDULED, PodRecord, new_pod


def rec(name: str, node: str | None = None, *, phase: str = "Running", confirmed: bool = True,
        deleting: bool = False, busy: int = 0, changed_at: float = 0.0) -> PodRecord:
    r = new_pod({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ns"},
                 "spec": {"containers": [{"name": "c", "command": ["x"]}],
                          "terminationGracePeriodSeconds": 7}},
                priority=0, class_name=None, preemption_policy="PreemptLowerPriority", now_wall=0)
    if node:
        r.obj["spec"]["nodeName"] = node
        r.status["phase"] = phase
        if confirmed:
            r.status["conditions"] = [{"type": POD_SCHEDULED, "status": "True"}]
    if deleting:
        r.obj["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    r.busy, r.changed_at = busy, changed_at
    return r


def agent_pod(r: PodRecord | None, name: str = "", *, uid: str | None = None, phase: str = "Running",
              source: str = "api", deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name or (r.obj["metadata"]["name"] if r else "x"), "namespace": "ns",
                            "uid": uid or (r.uid if r else "other-uid"),
                            "annotations": {"kubernetes.io/config.source": source}}
    if deleting:
        meta["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {}, "status": {"phase": phase}}


def run(pods: list[PodRecord], agent: list[dict[str, Any]], node: str = "n1", since: float = 10.0) -> list[str]:
    by_key = {p.key: p for p in pods}
    here = [p.key for p in pods if p.node == node]
    out = []
    for a in reconcile(node, by_key, here, agent, since):
        name = type(a).__name__
        if isinstance(a, DeleteOnAgent):
            out.append(f"{name} {a.namespace}/{a.name} grace={a.grace}")
        elif isinstance(a, Adopt):
            out.append(f"{name} {a.agent_pod['metadata']['name']}")
        else:
            out.append(f"{name} {a.key}")  # type: ignore[union-attr]
    return out


a_bound = rec("a", "n1")
CASES = [
    ("same pod bound here -> status", [a_bound], [agent_pod(a_bound)], ["Status ns/a"]),
    ("store deleting, agent still running -> delete with the pod's grace",
     [r := rec("a", "n1", deleting=True)], [agent_pod(r)], ["DeleteOnAgent ns/a grace=7"]),
    ("store deleting, agent already terminating -> wait",
     [r := rec("a", "n1", deleting=True)], [agent_pod(r, deleting=True)], []),
    ("store failed (NodeLost), agent running -> delete",
     [r := rec("a", "n1", phase="Failed")], [agent_pod(r)], ["DeleteOnAgent ns/a grace=7"]),
    ("store failed, agent failed too -> status", [r := rec("a", "n1", phase="Failed")],
     [agent_pod(r, phase="Failed")], ["Status ns/a"]),
    ("store pending, agent has it -> adopt the binding", [r := rec("a")], [agent_pod(r)], ["AdoptBinding ns/a"]),
    ("store bound elsewhere -> delete the duplicate", [r := rec("a", "n2")], [agent_pod(r)],
     ["DeleteOnAgent ns/a grace=None"]),
    ("other uid -> delete the stale copy (the next poll rebinds)", [rec("a", "n1")],
     [agent_pod(None, "a", uid="old")], ["DeleteOnAgent ns/a grace=None"]),
    ("unknown api pod -> adopt", [], [agent_pod(None, "m")], ["Adopt m"]),
    ("unknown static pod -> foreign", [], [agent_pod(None, "s", source="file")], ["Foreign ns/s"]),
    ("unknown terminating pod -> foreign", [], [agent_pod(None, "t", deleting=True)], ["Foreign ns/t"]),
    ("bound here, missing, deleting -> gone", [rec("a", "n1", deleting=True)], [], ["Gone ns/a"]),
    ("bound here, missing, confirmed -> rebind", [rec("a", "n1")], [], ["Rebind ns/a"]),
    ("bound here, missing, unconfirmed -> rebind", [rec("a", "n1", confirmed=False)], [], ["Rebind ns/a"]),
    ("bound here, missing, terminal -> nothing", [rec("a", "n1", phase="Succeeded")], [], []),
    ("bound elsewhere, missing here -> nothing", [rec("a", "n2")], [], []),
    ("call in flight -> left alone", [r := rec("a", "n1", busy=1)], [], []),
    ("changed after the list was asked for -> left alone", [rec("a", "n1", changed_at=11.0)], [], []),
    ("changed after, agent has it -> left alone", [r := rec("a", changed_at=11.0)], [agent_pod(r)], []),
]


@pytest.mark.parametrize(("pods", "agent", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_reconcile(pods: list[PodRecord], agent: list[dict[str, Any]], expected: list[str]) -> None:
    assert run(pods, agent) == expected


def test_action_payloads() -> None:
    r = rec("a", "n1")
    ap = agent_pod(r)
    [status] = reconcile("n1", {r.key: r}, [r.key], [ap], 10.0)
    assert isinstance(status, Status) and status.agent_pod is ap
    p = rec("b")
    [adopt] = reconcile("n1", {p.key: p}, [], [agent_pod(p)], 10.0)
    assert isinstance(adopt, AdoptBinding) and adopt.key == "ns/b"
    assert isinstance(reconcile("n1", {}, [], [agent_pod(None, "s", source="file")], 1)[0], Foreign)
    assert isinstance(reconcile("n1", {r.key: rec("a", "n1", deleting=True)}, [r.key], [], 10)[0], Gone)
    assert isinstance(reconcile("n1", {r.key: r}, [r.key], [], 10)[0], Rebind)
