"""One garbage-collection pass: actions for every object that needs one.

- an owner being deleted with the `orphan` finalizer: its dependents lose the ownerReference
  (strategic merge patch with the dependent's uid as precondition), then the finalizer goes;
- an owner being deleted with `foregroundDeletion`: once no dependent blocks it
  (blockOwnerDeletion), the finalizer goes; until then its dependents are collected;
- any object with ownerReferences: with a solid owner it stays (dangling and waiting references
  are removed from it); with only owners waiting on their dependents and dependents of its own,
  it is deleted in the foreground (after unblocking its references if a dependent is itself
  deleting dependents: upstream's cycle breaker); with no owner left it is deleted with the
  policy its finalizers ask for (orphan, foreground, else background).
A delete whose decision rests on absent owners names them in `verify_absent`: the loop re-reads
them uncached first, as upstream's isDangling does, so a stale cache never deletes a live child.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from nodeagent.cluster.controllers.common.actions import Delete, Event, ObjectRef, Patch, Plan, Propagation
from nodeagent.cluster.controllers.common.meta import finalizers, owner_references, resource_version, uid
from nodeagent.cluster.controllers.garbagecollector.graph import FOREGROUND, ORPHAN, Graph, Namespaced, Node

Obj = Mapping[str, Any]


def _ref(n: Node) -> ObjectRef:
    return ObjectRef.of(n.obj)


def _remove_finalizer(n: Node, fin: str) -> Patch:
    return Patch(
        _ref(n), {"metadata": {"$deleteFromPrimitiveList/finalizers": [fin], "uid": n.uid}}, reason=f"remove {fin}"
    )


def _delete_owner_refs(n: Node, uids: list[str]) -> Patch:
    return Patch(
        _ref(n),
        {"metadata": {"ownerReferences": [{"$patch": "delete", "uid": u} for u in uids], "uid": n.uid}},
        reason="remove dangling owner references",
    )


def attempt_to_delete(g: Graph, n: Node, plan: Plan) -> None:
    if n.deleting and not n.deleting_dependents:
        return
    if n.deleting_dependents:
        blocking = n.blocking_dependents()
        if not blocking:
            plan.add(_remove_finalizer(n, FOREGROUND))
        else:
            for d in blocking:
                if not d.deleting_dependents:
                    attempt_to_delete(g, d, plan)
        return
    refs = owner_references(n.obj)
    if not refs:
        return
    solid: list[Mapping[str, Any]] = []
    dangling: list[Mapping[str, Any]] = []
    waiting: list[Mapping[str, Any]] = []
    for r in refs:
        kind, _owner = g.resolve(n.obj, r)
        if kind in ("unknown",):
            return
        if kind == "invalid":
            plan.add(
                Event(
                    _ref(n),
                    "Warning",
                    "OwnerRefInvalidNamespace",
                    f"ownerRef [{r.get('apiVersion')}/{r.get('kind')}, namespace: , name: {r.get('name')}, uid: {r.get('uid')}] "  # noqa: E501  (upstream's text)
                    'does not exist in namespace ""',
                )
            )
            return
        {"solid": solid, "dangling": dangling, "waiting": waiting}[kind].append(r)
    absent = tuple(
        ObjectRef(
            str(r.get("apiVersion") or ""),
            str(r.get("kind") or ""),
            _ref(n).namespace,
            str(r.get("name") or ""),
            str(r.get("uid") or ""),
        )
        for r in dangling
    )
    if solid:
        if dangling or waiting:
            plan.add(_delete_owner_refs(n, [str(r.get("uid")) for r in dangling + waiting]))
        return
    if waiting and n.dependents:
        if any(d.deleting_dependents for d in n.dependents):
            plan.add(
                Patch(
                    _ref(n),
                    {
                        "metadata": {
                            "ownerReferences": [
                                {**dict(r), "blockOwnerDeletion": False} for r in refs if r.get("blockOwnerDeletion")
                            ],
                            "uid": n.uid,
                        }
                    },
                    reason="unblock owner references",
                )
            )
        plan.add(
            Delete(
                _ref(n),
                propagation="Foreground",
                resource_version=resource_version(n.obj) or None,
                verify_absent=absent,
                reason="garbage collected (foreground owner)",
            )
        )
        return
    fins = finalizers(n.obj)
    policy: Propagation = "Orphan" if ORPHAN in fins else "Foreground" if FOREGROUND in fins else "Background"
    plan.add(
        Delete(
            _ref(n),
            propagation=policy,
            resource_version=resource_version(n.obj) or None,
            verify_absent=absent,
            reason="garbage collected",
        )
    )


def collect(objects: Iterable[Obj], namespaced: Namespaced) -> Plan:
    g = Graph(objects, namespaced)
    plan = Plan()
    for n in g.nodes.values():
        if n.orphaning:
            still = [d for d in n.dependents if any(str(r.get("uid")) == n.uid for r in owner_references(d.obj))]
            for d in still:
                plan.add(_delete_owner_refs(d, [n.uid]))
            plan.add(_remove_finalizer(n, ORPHAN))
            continue
        attempt_to_delete(g, n, plan)
    seen: set[tuple[str, str]] = set()
    unique = []
    for a in plan.actions:  # a dependent reached through its owner and on its own: act once
        if isinstance(a, Delete | Patch):
            k = (type(a).__name__, a.ref.uid + a.reason)
            if k in seen:
                continue
            seen.add(k)
        unique.append(a)
    plan.actions = unique
    return plan


def deletion_finalizers(propagation: str | None, default: str = "Background") -> list[str]:
    """What the API server's delete adds for a propagation policy (registry store
    deletionFinalizersForGarbageCollection): Foreground -> foregroundDeletion, Orphan -> orphan."""
    policy = propagation or default
    return [FOREGROUND] if policy == "Foreground" else [ORPHAN] if policy == "Orphan" else []


__all__ = ["collect", "deletion_finalizers", "uid"]
