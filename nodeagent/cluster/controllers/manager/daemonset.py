"""The DaemonSet controller's thin loop (daemon_controller.go around the pure core in daemonset/).

Handlers turn DaemonSet, pod, node and ControllerRevision events into keys and expectations; a
node joining, leaving or changing what it offers (labels, taints) wakes only the DaemonSets whose
placement on it changes. `sync` reads the caches, asks the core for a plan, records what it expects
before writing (creates and deletes at once: one sync does both), runs the plan and writes the
status with the outcome, as upstream writes the status even after a failed manage.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodeagent.cluster.controllers.common.backoff import Backoff
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
from nodeagent.cluster.controllers.daemonset import placement, reconcile
from nodeagent.cluster.controllers.manager.client import Client, Recorder
from nodeagent.cluster.controllers.manager.executor import Executor
from nodeagent.cluster.controllers.manager.informer import Handlers, Informer
from nodeagent.cluster.controllers.manager.loop import Controller
from nodeagent.core.clock import Clock

Obj = Mapping[str, Any]


class DaemonSetController(Controller):
    name = "daemonset"
    workers = 2

    def __init__(self, clock: Clock, client: Client, recorder: Recorder | None, *, daemonsets: Informer,
                 pods: Informer, nodes: Informer, revisions: Informer, burst: int = reconcile.BURST_REPLICAS) -> None:
        super().__init__(clock)
        self.dss, self.pods, self.nodes, self.revisions, self.burst = daemonsets, pods, nodes, revisions, burst
        self.expectations = Expectations()
        self.failed_pods_backoff = Backoff(*reconcile.FAILED_PODS_BACKOFF)
        self.executor = Executor(client, recorder, "daemonset-controller")
        daemonsets.add_handlers(Handlers(self._ds_added, self._ds_updated, self._ds_deleted))
        pods.add_handlers(Handlers(self._pod_added, self._pod_updated, self._pod_deleted))
        nodes.add_handlers(Handlers(self._node_added, self._node_updated, self._node_deleted))
        revisions.add_handlers(Handlers(self._rev_changed, lambda _o, n: self._rev_changed(n), self._rev_changed))

    # ---- handlers ----
    def _ds_added(self, ds: Obj) -> None:
        self.enqueue(key(ds))

    def _ds_updated(self, old: Obj, new: Obj) -> None:
        self.enqueue(key(new))

    def _ds_deleted(self, ds: Obj) -> None:
        self.expectations.delete(key(ds))
        self.enqueue(key(ds))

    def _owner_key(self, ref: Mapping[str, Any] | None, ns: str) -> str | None:
        """resolveControllerRef: a DaemonSet in the cache with the referenced uid."""
        return self.owner_key(self.dss, "DaemonSet", ref, ns)

    def _pod_added(self, pod: Obj) -> None:
        if being_deleted(pod):
            self._pod_deleted(pod)  # a restart can list a pod already being deleted
            return
        k = self._owner_key(controller_ref(pod), namespace(pod))
        if k is not None:
            self.expectations.creation_observed(k)
            self.enqueue(k)
        elif controller_ref(pod) is None:
            self.enqueue_selecting(self.dss, pod)

    def _pod_updated(self, old: Obj, new: Obj) -> None:
        if resource_version(old) == resource_version(new):
            return
        if being_deleted(new) and not being_deleted(old):
            self._pod_deleted(new)
            return
        old_k = self._owner_key(controller_ref(old), namespace(old))
        new_k = self._owner_key(controller_ref(new), namespace(new))
        if old_k is not None and old_k != new_k:
            self.enqueue(old_k)
        if new_k is not None:
            self.enqueue(new_k)
            ds = self.dss.get(new_k)
            mrs = int((spec(ds) if ds else {}).get("minReadySeconds") or 0)
            if mrs > 0 and is_ready(new) and not is_ready(old):
                self.queue.add_after(new_k, float(mrs) + 1.0)  # look again when it becomes available
        elif controller_ref(new) is None and (labels(old) != labels(new) or owner_references(old)):
            self.enqueue_selecting(self.dss, new)

    def _pod_deleted(self, pod: Obj) -> None:
        k = self._owner_key(controller_ref(pod), namespace(pod))
        if k is None:
            ref = controller_ref(pod)  # its DaemonSet may be gone from the cache already
            if ref is None or ref.get("kind") != "DaemonSet":
                return
            k = f"{namespace(pod)}/{ref.get('name')}"
        self.expectations.deletion_observed(k, key(pod))
        self.enqueue(k)

    def _node_added(self, node: Obj) -> None:
        """addNode: the DaemonSets that would run a pod there."""
        for ds in self.dss.items():
            if placement.should_run(node, ds)[0]:
                self.enqueue(key(ds))

    def _node_updated(self, old: Obj, new: Obj) -> None:
        """updateNode: the DaemonSets whose placement on the node changed (a heartbeat changes none)."""
        if labels(old) == labels(new) and spec(old) == spec(new):
            return
        for ds in self.dss.items():
            if placement.should_run(old, ds) != placement.should_run(new, ds):
                self.enqueue(key(ds))

    def _node_deleted(self, node: Obj) -> None:
        """deleteNode: the DaemonSets that may have a pod there (their pinned pending pods must go)."""
        for ds in self.dss.items():
            if any(placement.should_run(node, ds)):
                self.enqueue(key(ds))

    def _rev_changed(self, rev: Obj) -> None:
        k = self._owner_key(controller_ref(rev), namespace(rev))
        if k is not None:
            self.enqueue(k)

    # ---- sync ----
    async def sync(self, k: str) -> float | None:
        ds = self.dss.get(k)
        if ds is None:
            self.expectations.delete(k)
            return None
        mono, now = self.clock.now(), self.clock.wall()
        ns = namespace(ds)
        s = reconcile.sync(ds, self.nodes.items(), self.pods.in_namespace(ns), self.revisions.in_namespace(ns),
                           now=now, satisfied=self.expectations.satisfied(k, mono),
                           backoff=self.failed_pods_backoff, burst=self.burst)
        if s.expect_creations or s.expect_deletions:
            self.expectations.set_expectations(k, s.expect_creations, s.expect_deletions, mono)
        for bkey in s.backoff_next:
            self.failed_pods_backoff.next(bkey, now)
        outcome = await self.executor.run(s.plan)
        self.expectations.lower_expectations(k, outcome.not_created, 0)
        for pod_key in outcome.failed_deletes:
            self.expectations.deletion_observed(k, pod_key)
        status = await self.executor.run(s.status)
        if outcome.error is not None:
            raise outcome.error
        if s.error is not None:
            raise RuntimeError(s.error)
        if status.error is not None:
            raise status.error
        afters = [a for a in (outcome.requeue_after, status.requeue_after) if a is not None]
        return min(afters) if afters else None
