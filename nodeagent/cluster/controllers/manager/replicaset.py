"""The ReplicaSet controller's thin loop (replica_set.go around the pure core in replicaset/).

Handlers turn pod and ReplicaSet events into keys and expectations (a pod seen created or deleted
lowers the count its controller waits for); `sync` reads the caches, asks the core for a plan,
records what it expects before writing, runs the plan and writes the status with the outcome.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodeagent.cluster.controllers.common.expectations import Expectations
from nodeagent.cluster.controllers.common.meta import controller_ref, namespace, uid
from nodeagent.cluster.controllers.manager.client import Client, Recorder
from nodeagent.cluster.controllers.manager.executor import Executor
from nodeagent.cluster.controllers.manager.informer import Informer
from nodeagent.cluster.controllers.manager.owned import PodsOwner
from nodeagent.cluster.controllers.replicaset import reconcile
from nodeagent.core.clock import Clock

Obj = Mapping[str, Any]


class ReplicaSetController(PodsOwner):
    name = "replicaset"
    workers = 2
    owner_kind = "ReplicaSet"
    relabel_counts_old_owner = True

    def __init__(self, clock: Clock, client: Client, recorder: Recorder | None, *, replicasets: Informer,
                 pods: Informer, burst: int = reconcile.BURST_REPLICAS) -> None:
        super().__init__(clock)
        self.rss, self.pods, self.burst = replicasets, pods, burst
        self.owners = replicasets
        self.expectations = Expectations()
        self.executor = Executor(client, recorder, "replicaset-controller")
        self.recorder = recorder
        replicasets.add_handlers(self.owner_handlers())
        pods.add_handlers(self.pod_handlers())

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
