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
from nodeagent.cluster.controllers.common.meta import controller_ref, key, labels, namespace, spec
from nodeagent.cluster.controllers.daemonset import placement, reconcile
from nodeagent.cluster.controllers.manager.client import Client, Recorder
from nodeagent.cluster.controllers.manager.executor import Executor
from nodeagent.cluster.controllers.manager.informer import Handlers, Informer
from nodeagent.cluster.controllers.manager.owned import PodsOwner
from nodeagent.core.clock import Clock

Obj = Mapping[str, Any]


class DaemonSetController(PodsOwner):
    name = "daemonset"
    workers = 2
    owner_kind = "DaemonSet"

    def __init__(self, clock: Clock, client: Client, recorder: Recorder | None, *, daemonsets: Informer,
                 pods: Informer, nodes: Informer, revisions: Informer, burst: int = reconcile.BURST_REPLICAS) -> None:
        super().__init__(clock)
        self.dss, self.pods, self.nodes, self.revisions, self.burst = daemonsets, pods, nodes, revisions, burst
        self.owners = daemonsets
        self.expectations = Expectations()
        self.failed_pods_backoff = Backoff(*reconcile.FAILED_PODS_BACKOFF)
        self.executor = Executor(client, recorder, "daemonset-controller")
        daemonsets.add_handlers(self.owner_handlers())
        pods.add_handlers(self.pod_handlers())
        nodes.add_handlers(Handlers(self._node_added, self._node_updated, self._node_deleted))
        revisions.add_handlers(Handlers(self._rev_changed, lambda _o, n: self._rev_changed(n), self._rev_changed))

    # ---- handlers ----
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
