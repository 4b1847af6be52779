"""What to do when an agent's pod list and the store disagree (pure; table-tested).

The store is the desired state; the agent reports what runs. For one node, given every pod the
store has and the agent's list (taken after `since`, so bindings changed later are skipped):

agent has it, store has the same pod (namespace/name and uid)
  - bound here                          -> Status: copy the agent's status (phase, containers)
  - being deleted, or terminal in the store (e.g. Failed NodeLost) -> DeleteOnAgent
  - not bound yet (the scheduler died between the agent's 201 and its own write; or it is
    still Pending in the queue)         -> AdoptBinding: it is bound here now
  - bound to another node               -> DeleteOnAgent (a duplicate; the store's node wins)
agent has it, the store has another pod of that name (other uid) -> DeleteOnAgent (stale)
agent has it, the store has nothing of that name
  - a static pod (config.source file)   -> Foreign: counted against the node, not stored
  - being deleted on the agent          -> Foreign (it holds resources until it is gone)
  - otherwise                           -> Adopt: created on the agent directly, or left over
    from a store that was lost; adopting keeps it visible, counted and deletable (deleting
    pods nobody asked us to delete would be the worse mistake)
store has a pod bound here, the agent does not
  - being deleted                       -> Gone: the deletion is complete
  - terminal                            -> nothing (the agent cleaned it up)
  - otherwise                           -> Rebind: POST it again. Unconfirmed (no PodScheduled
    yet): the scheduler died between its write and the agent's 201. Confirmed: the agent lost
    it; the store is the desired state, as a kubelet re-creates the pods bound to it.
Pods with an agent call in flight, or whose binding changed after `since`, are left alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from nodeagent.cluster.objects import TERMINAL, PodRecord
from nodeagent.core.wellknown import API_SERVER_SOURCE, CONFIG_SOURCE


@dataclass(frozen=True)
class Status:
    key: str
    agent_pod: Mapping[str, Any]


@dataclass(frozen=True)
class AdoptBinding:
    key: str
    agent_pod: Mapping[str, Any]


@dataclass(frozen=True)
class Adopt:
    agent_pod: Mapping[str, Any]


@dataclass(frozen=True)
class Foreign:
    key: str
    agent_pod: Mapping[str, Any]


@dataclass(frozen=True)
class DeleteOnAgent:
    namespace: str
    name: str
    grace: int | None
    why: str


@dataclass(frozen=True)
class Gone:
    key: str


@dataclass(frozen=True)
class Rebind:
    key: str


Action = Status | AdoptBinding | Adopt | Foreign | DeleteOnAgent | Gone | Rebind


def _key(p: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = p.get("metadata") or {}
    ns, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
    return f"{ns}/{name}", ns, name


def _live(p: Mapping[str, Any]) -> bool:
    return (p.get("status") or {}).get("phase") not in TERMINAL


def reconcile(node: str, pods: Mapping[str, PodRecord], bound_here: Iterable[str],
              agent_pods: Iterable[Mapping[str, Any]], since: float) -> list[Action]:
    """The actions that bring the store and the agent `node` together (see the docstring).
    `pods`: every pod of the store by key; `bound_here`: the keys of those bound to `node`."""
    actions: list[Action] = []
    seen: set[str] = set()

    def settled(rec: PodRecord) -> bool:
        return rec.busy == 0 and rec.changed_at <= since

    for ap in agent_pods:
        key, ns, name = _key(ap)
        meta = ap.get("metadata") or {}
        if not name:
            continue
        seen.add(key)
        rec = pods.get(key)
        if rec is None:
            static = (meta.get("annotations") or {}).get(CONFIG_SOURCE, API_SERVER_SOURCE) != API_SERVER_SOURCE
            if static or "deletionTimestamp" in meta:
                actions.append(Foreign(key, ap))
            else:
                actions.append(Adopt(ap))
            continue
        if not settled(rec):
            continue
        if rec.uid != meta.get("uid"):
            actions.append(DeleteOnAgent(ns, name, None, f"stale copy (uid {meta.get('uid')}, "
                                                         f"the store has {rec.uid})"))
        elif rec.node is None:
            actions.append(AdoptBinding(key, ap))
        elif rec.node != node:
            actions.append(DeleteOnAgent(ns, name, None, f"duplicate: bound to {rec.node}"))
        elif rec.deleting or (rec.terminal and _live(ap)):
            if "deletionTimestamp" not in meta:
                actions.append(DeleteOnAgent(ns, name, rec.grace,
                                             "being deleted" if rec.deleting else f"{rec.phase} in the store"))
        else:
            actions.append(Status(key, ap))
    for key in bound_here:
        rec = pods.get(key)
        if rec is None or rec.node != node or key in seen or not settled(rec):
            continue
        if rec.deleting:
            actions.append(Gone(key))
        elif not rec.terminal:
            actions.append(Rebind(key))
    return actions
