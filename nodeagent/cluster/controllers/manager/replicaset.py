"""The ReplicaSet controller's thin loop (replica_set.go around the pure core in replicaset/).

Handlers turn pod and ReplicaSet events into keys and expectations (a pod seen created or deleted
lowers the count its controller waits for); `sync` reads the caches, asks the core for a plan,
records what it expects before writing, runs the plan and writes the status with the outcome.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
    uid,
)
from nodeagent.cluster.controllers.common.pods import is_ready
from nodeagent.cluster.controllers.manager.client import Client, Recorder
from nodeagent.cluster.controllers.manager.executor import Executor
from nodeagent.cluster.controllers.manager.informer import Handlers, Informer
from nodeagent.cluster.controllers.manager.loop import Controller
from nodeagent.cluster.controllers.replicaset import reconcile
from nodeagent.core.clock import Clock

Obj = Mapping[str, Any]


class ReplicaSetController(Controller):
    name = "replicaset"
    workers = 2

    def __init__(self, clock: Clock, client: Client, recorder: Recorder | None, *, replicasets: Informer,
                 pods: Informer, burst: int = reconcile.BURST_REPLICAS) -> None:
        super().__init__(clock)
        self.rss, self.pods, self.burst = replicasets, pods, burst
        self.expectations = Expectations()
        self.executor = Executor(client, recorder, "replicaset-controller")
        self.recorder = recorder
        replicasets.add_handlers(Handlers(self._rs_added, self._rs_updated, self._rs_deleted))
        pods.add_handlers(Handlers(self._pod_added, self._pod_updated, self._pod_deleted))

    # ---- handlers ----
    def _rs_added(self, rs: Obj) -> None:
        self.enqueue(key(rs))

    def _rs_updated(self, old: Obj, new: Obj) -> None:
        self.enqueue(key(new))

    def _rs_deleted(self, rs: Obj) -> None:
        self.expectations.delete(key(rs))
        self.enqueue(key(rs))

    def _owner_key(self, ref: Mapping[str, Any] | None, ns: str) -> str | None:
        """resolveControllerRef: a ReplicaSet in the cache with the referenced uid."""
        return self.owner_key(self.rss, "ReplicaSet", ref, ns)

    def _enqueue_matching(self, pod: Obj) -> None:
        """An orphan: every ReplicaSet of its namespace whose selector matches may adopt it."""
        self.enqueue_selecting(self.rss, pod)

    def _pod_added(self, pod: Obj) -> None:
        if being_deleted(pod):
            self._pod_deleted(pod)  # a restart can list a pod already being deleted
            return
        k = self._owner_key(controller_ref(pod), namespace(pod))
        if k is not None:
            self.expectations.creation_observed(k)
            self.enqueue(k)
        elif controller_ref(pod) is None:
            self._enqueue_matching(pod)

    def _pod_updated(self, old: Obj, new: Obj) -> None:
        if resource_version(old) == resource_version(new):
            return
        if being_deleted(new) and not being_deleted(old):
            self._pod_deleted(new)
            if labels(old) != labels(new):
                self._pod_deleted(old)
            return
        old_k = self._owner_key(controller_ref(old), namespace(old))
        new_k = self._owner_key(controller_ref(new), namespace(new))
        if old_k is not None and old_k != new_k:
            self.enqueue(old_k)
        if new_k is not None:
            self.enqueue(new_k)
            rs = self.rss.get(new_k)
            mrs = int((spec(rs) if rs else {}).get("minReadySeconds") or 0)
            if mrs > 0 and is_ready(new) and not is_ready(old):
                self.queue.add_after(new_k, float(mrs) + 1.0)  # look again when it becomes available
        elif controller_ref(new) is None and (labels(old) != labels(new) or owner_references(old)):
            self._enqueue_matching(new)

    def _pod_deleted(self, pod: Obj) -> None:
        k = self._owner_key(controller_ref(pod), namespace(pod))
        if k is None:
            ref = controller_ref(pod)  # its ReplicaSet may be gone from the cache already
            if ref is None or ref.get("kind") != "ReplicaSet":
                return
            k = f"{namespace(pod)}/{ref.get('name')}"
        self.expectations.deletion_observed(k, key(pod))
        self.enqueue(k)

    # ---- sync ----
    def _related_pods(self, rs: Obj) -> list[Obj]:
        """Pods of the ReplicaSets with the same controlling owner (co-location ranks)."""
        ref = controller_ref(rs)
        if ref is None:
            return []
        out: list[Obj] = []
        for other in self.rss.in_namespace(namespace(rs)):
            oref = controller_ref(other)
            if oref is not None and oref.get("uid") == ref.get("uid"):
                out.extend(self.pods.controlled_by(uid(other)))
        return out

    def _record(self, rs: Obj, created: list[dict[str, Any]], deleted: list[str]) -> None:
        """The events upstream's manageReplicas records on the ReplicaSet."""
        if self.recorder is None:
            return
        for pod in created:
            self.recorder.event(dict(rs), "Normal", "SuccessfulCreate", f"Created pod: {pod['metadata']['name']}")
        for pod_key in deleted:
            self.recorder.event(dict(rs), "Normal", "SuccessfulDelete", f"Deleted pod: {pod_key.split('/', 1)[-1]}")

    async def sync(self, k: str) -> float | None:
        rs = self.rss.get(k)
        if rs is None:
            self.expectations.delete(k)
            return None
        mono, now = self.clock.now(), self.clock.wall()
        satisfied = self.expectations.satisfied(k, mono)
        candidates = self.pods.in_namespace(namespace(rs))
        m = reconcile.manage(rs, candidates, now=now, satisfied=satisfied, related=self._related_pods(rs),
                             burst=self.burst)
        if m.expect_creations:
            self.expectations.expect_creations(k, m.expect_creations, mono)
        elif m.expect_deletions:
            self.expectations.expect_deletions(k, m.expect_deletions, mono)
        outcome = await self.executor.run(m.plan)
        self._record(rs, outcome.created, [p for p in m.expect_deletions if p not in outcome.failed_deletes])
        for _ in range(outcome.not_created):
            self.expectations.creation_observed(k)
        for pod_key in outcome.failed_deletes:
            self.expectations.deletion_observed(k, pod_key)
        error = m.error or (str(outcome.error) if outcome.error is not None else None)
        status = await self.executor.run(reconcile.status_plan(rs, m.claimed, now, error))
        if outcome.error is not None:
            raise outcome.error
        if status.error is not None:
            raise status.error
        return status.requeue_after
