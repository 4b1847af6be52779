"""What a controller hears of the objects it owns (a CronJob's Jobs, a Deployment's ReplicaSets, a
ReplicaSet's or a DaemonSet's pods): each event becomes the key of the owner its controller
reference resolves to (resolveControllerRef: the kind and group, and the uid of the cached owner),
the old owner's too when the reference moved; an orphan wakes the owners that may adopt it.

`OwnerOf` is the plain form (cronjob, deployment); `PodsOwner` adds upstream's pod handlers of the
ReplicaSet and DaemonSet controllers: expectations lowered as pods are seen created and deleted, a
pod being deleted counted as deleted, a look again once a ready pod becomes available."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from nodeagent.cluster.controllers.common.expectations import Expectations
from nodeagent.cluster.controllers.common.meta import (
    being_deleted,
    controller_ref,
    key,
    labels,
    namespace,
    owner_references,
    resource_version,
    spec,
)
from nodeagent.cluster.controllers.common.pods import is_ready
from nodeagent.cluster.controllers.manager.informer import Handlers, Informer
from nodeagent.cluster.controllers.manager.loop import Controller

Obj = Mapping[str, Any]


class OwnerOf(Controller):
    """A subclass sets `owner_kind`, `adopts` (whether an orphan is offered to its owners) and
    `owners` (the informer of the objects it syncs) before `owned_handlers()`."""

    owner_kind: ClassVar[str] = ""
    adopts: ClassVar[bool] = False
    owners: Informer

    def owned_handlers(self) -> Handlers:
        return Handlers(self._owned_added, self._owned_updated, self._owned_deleted)

    def _owner_key(self, ref: Mapping[str, Any] | None, ns: str) -> str | None:
        return self.owner_key(self.owners, self.owner_kind, ref, ns)

    def _owned_added(self, obj: Obj) -> None:
        k = self._owner_key(controller_ref(obj), namespace(obj))
        if k is not None:
            self.enqueue(k)
        elif self.adopts and controller_ref(obj) is None:
            self.enqueue_selecting(self.owners, obj)

    def _enqueue_owners(self, old: Obj, new: Obj) -> str | None:
        """An update: the new owner's key, and the old owner's when the reference moved; the new key."""
        old_k = self._owner_key(controller_ref(old), namespace(old))
        new_k = self._owner_key(controller_ref(new), namespace(new))
        if old_k is not None and old_k != new_k:
            self.enqueue(old_k)
        if new_k is not None:
            self.enqueue(new_k)
        return new_k

    def _owned_updated(self, old: Obj, new: Obj) -> None:
        if self._enqueue_owners(old, new) is None and self.adopts and controller_ref(new) is None:
            self.enqueue_selecting(self.owners, new)

    def _owned_deleted(self, obj: Obj) -> None:
        k = self._owner_key(controller_ref(obj), namespace(obj))
        if k is not None:
            self.enqueue(k)


class PodsOwner(OwnerOf):
    """The pod handlers of a controller that counts its creates and deletes in `expectations`
    (replica_set.go and daemon_controller.go's addPod, updatePod, deletePod)."""

    adopts = True
    relabel_counts_old_owner: ClassVar[bool] = False  # a relabeled pod being deleted: its old owner's delete too
    expectations: Expectations

    def pod_handlers(self) -> Handlers:
        return Handlers(self._pod_added, self._pod_updated, self._pod_deleted)

    def owner_handlers(self) -> Handlers:
        """The owners' own events: a sync each; a deleted owner's expectations go."""
        return Handlers(self._owner_changed, lambda _old, new: self._owner_changed(new), self._owner_deleted)

    def _owner_changed(self, owner: Obj) -> None:
        self.enqueue(key(owner))

    def _owner_deleted(self, owner: Obj) -> None:
        self.expectations.delete(key(owner))
        self.enqueue(key(owner))

    def _pod_added(self, pod: Obj) -> None:
        if being_deleted(pod):
            self._pod_deleted(pod)  # a restart can list a pod already being deleted
            return
        k = self._owner_key(controller_ref(pod), namespace(pod))
        if k is not None:
            self.expectations.creation_observed(k)
            self.enqueue(k)
        elif controller_ref(pod) is None:
            self.enqueue_selecting(self.owners, pod)

    def _pod_updated(self, old: Obj, new: Obj) -> None:
        if resource_version(old) == resource_version(new):
            return
        if being_deleted(new) and not being_deleted(old):
            self._pod_deleted(new)
            if self.relabel_counts_old_owner and labels(old) != labels(new):
                self._pod_deleted(old)
            return
        new_k = self._enqueue_owners(old, new)
        if new_k is not None:
            owner = self.owners.get(new_k)
            mrs = int((spec(owner) if owner else {}).get("minReadySeconds") or 0)
            if mrs > 0 and is_ready(new) and not is_ready(old):
                self.queue.add_after(new_k, float(mrs) + 1.0)  # look again when it becomes available
        elif controller_ref(new) is None and (labels(old) != labels(new) or owner_references(old)):
            self.enqueue_selecting(self.owners, new)

    def _pod_deleted(self, pod: Obj) -> None:
        k = self._owner_key(controller_ref(pod), namespace(pod))
        if k is None:
            ref = controller_ref(pod)  # its owner may be gone from the cache already
            if ref is None or ref.get("kind") != self.owner_kind:
                return
            k = f"{namespace(pod)}/{ref.get('name')}"
        self.expectations.deletion_observed(k, key(pod))
        self.enqueue(k)
