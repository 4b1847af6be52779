"""Which events give the garbage collector a pass (garbagecollector/triggers.py): the ones that can
change a decision, and not the create and delete of every pod whose ReplicaSet is there."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.cluster.controllers.garbagecollector.triggers import Triggers

TS = "2026-12-06T00:00:00Z"


def obj(u: str, owners: tuple[str, ...] = (), deleting: bool = False, fins: tuple[str, ...] = ()) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": u, "namespace": "default", "uid": u,
                            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": o, "uid": o}
                                                for o in owners]}
    if deleting:
        meta["deletionTimestamp"] = TS
    if fins:
        meta["finalizers"] = list(fins)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta}


def world(*objs: dict[str, Any]) -> Triggers:
    t = Triggers()
    for o in objs:
        t.added(o)
    return t


RS = obj("rs")


@pytest.mark.parametrize(("before", "new", "want"), [
    ((RS,), obj("p", ("rs",)), False),                      # a ReplicaSet's new pod: nothing to decide
    ((), obj("p", ("rs",)), True),                          # its owner is absent: dangling
    ((obj("rs", deleting=True, fins=("foregroundDeletion",)),), obj("p", ("rs",)), True),  # waiting owner
    ((obj("rs", deleting=True),), obj("p", ("rs",)), False),  # owner going in the background: it's solid till gone
    ((), obj("lone"), False),                               # no owners
    ((), obj("lone", deleting=True), True),                 # arrives being deleted (a restart mid-delete)
])
def test_added(before: tuple[dict[str, Any], ...], new: dict[str, Any], want: bool) -> None:
    assert world(*before).added(new) is want


@pytest.mark.parametrize(("others", "old", "new", "want"), [
    ((RS,), obj("p", ("rs",)), obj("p", ("rs",)), False),                    # a status change
    ((RS,), obj("p", ("rs",)), obj("p", ("rs",), deleting=True), False),     # a pod starts terminating
    ((obj("p", ("rs",)),), RS, obj("rs", deleting=True), True),              # an owner with dependents starts
    ((RS,), obj("p", ("rs",)), obj("p"), True),                              # released: owners changed
    ((RS,), obj("p", ("rs",)), obj("p", ("rs",), fins=("orphan",)), True),   # finalizers changed
])
def test_updated(others: tuple[dict[str, Any], ...], old: dict[str, Any], new: dict[str, Any], want: bool) -> None:
    t = world(*others, old)
    assert t.updated(old, new) is want


@pytest.mark.parametrize(("others", "gone", "want"), [
    ((RS,), obj("p", ("rs",)), False),                          # a ReplicaSet's pod deleted: nothing to decide
    ((obj("p", ("rs",)),), RS, True),                           # an owner with dependents: they dangle now
    ((), obj("p", ("rs",)), False),                             # a dependent of an owner already gone
    ((obj("rs", deleting=True, fins=("foregroundDeletion",)),), obj("p", ("rs",)), True),  # its owner may finish
])
def test_deleted(others: tuple[dict[str, Any], ...], gone: dict[str, Any], want: bool) -> None:
    t = world(*others, gone)
    assert t.deleted(gone) is want


def test_the_dependents_count_follows_the_events() -> None:
    t = world(RS, obj("a", ("rs",)), obj("b", ("rs",)))
    t.deleted(obj("a", ("rs",)))
    assert t.dependents == {"rs": 1}
    t.updated(obj("b", ("rs",)), obj("b"))  # released
    assert t.dependents == {}
    assert t.deleted(RS) is False  # nothing names it any more
