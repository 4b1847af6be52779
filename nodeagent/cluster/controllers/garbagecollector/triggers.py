"""Which informer events can give the garbage collector work (upstream's GraphBuilder decides the
same thing when it queues a node for attemptToDelete or attemptToOrphan).

A collection pass looks at every object, so running one for every pod a ReplicaSet creates or
deletes made a 1000-replica rollout quadratic (the pass was a third of the server's CPU). A pass
is needed only when an event can change a decision:
- an object arrives that is being deleted, or whose owner is absent or being deleted in the
  foreground (dangling, or waiting);
- an object's owner references or finalizers change, or its deletion starts while it has
  dependents;
- an object goes that had dependents (they may now dangle), or whose owner is waiting for its
  dependents to go (foregroundDeletion: the owner may now finish); a dependent of an owner already
  gone changes nothing (the pass that saw it dangling deletes its siblings too).
The index of uids and of dependents per owner uid is kept from the events themselves.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodeagent.cluster.controllers.common.meta import finalizers, meta, owner_references, uid
from nodeagent.cluster.controllers.garbagecollector.graph import FOREGROUND

Obj = Mapping[str, Any]


def _owner_uids(obj: Obj) -> list[str]:
    return [str(r.get("uid") or "") for r in owner_references(obj)]


def _deleting(obj: Obj) -> bool:
    return bool(meta(obj).get("deletionTimestamp"))


class Triggers:
    def __init__(self) -> None:
        self.objects: dict[str, Obj] = {}
        self.dependents: dict[str, int] = {}  # owner uid -> how many objects name it

    def _index(self, obj: Obj) -> None:
        self.objects[uid(obj)] = obj
        for o in _owner_uids(obj):
            self.dependents[o] = self.dependents.get(o, 0) + 1

    def _unindex(self, obj: Obj) -> None:
        self.objects.pop(uid(obj), None)
        for o in _owner_uids(obj):
            left = self.dependents.get(o, 0) - 1
            if left > 0:
                self.dependents[o] = left
            else:
                self.dependents.pop(o, None)

    def _waiting_owner(self, obj: Obj) -> bool:
        """An owner being deleted in the foreground: it waits for its dependents to go."""
        return any(_deleting(owner) and FOREGROUND in finalizers(owner)
                   for owner in (self.objects.get(o) for o in _owner_uids(obj)) if owner is not None)

    def _owner_unsettled(self, obj: Obj) -> bool:
        """An owner absent (dangling) or waiting."""
        return any(o not in self.objects for o in _owner_uids(obj)) or self._waiting_owner(obj)

    def added(self, obj: Obj) -> bool:
        self._index(obj)
        return _deleting(obj) or self._owner_unsettled(obj)

    def updated(self, old: Obj, new: Obj) -> bool:
        self._unindex(old)
        self._index(new)
        if owner_references(old) != owner_references(new) or finalizers(old) != finalizers(new):
            return True
        return _deleting(old) != _deleting(new) and uid(new) in self.dependents

    def deleted(self, obj: Obj) -> bool:
        self._unindex(obj)
        return uid(obj) in self.dependents or self._waiting_owner(obj)
