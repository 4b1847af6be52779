"""The Deployment controller's thin loop (deployment_controller.go around the core in deployment/).

No expectations here, as upstream: every ReplicaSet write carries its resourceVersion, so a sync
from a stale cache fails with a conflict and is retried once the cache has caught up; a new
ReplicaSet created twice gets AlreadyExists and the same retry.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodeagent.cluster.controllers.common.meta import controller_ref, key, name, namespace, spec, uid
from nodeagent.cluster.controllers.deployment import reconcile
from nodeagent.cluster.controllers.manager.client import Client, Recorder
from nodeagent.cluster.controllers.manager.executor import Executor
from nodeagent.cluster.controllers.manager.informer import Handlers, Informer
from nodeagent.cluster.controllers.manager.owned import OwnerOf
from nodeagent.core.clock import Clock

Obj = Mapping[str, Any]


class DeploymentController(OwnerOf):
    name = "deployment"
    workers = 2
    owner_kind = "Deployment"
    adopts = True

    def __init__(self, clock: Clock, client: Client, recorder: Recorder | None, *, deployments: Informer,
                 replicasets: Informer, pods: Informer) -> None:
        super().__init__(clock)
        self.deployments, self.rss, self.pods = deployments, replicasets, pods
        self.owners = deployments
        self.executor = Executor(client, recorder, "deployment-controller")
        deployments.add_handlers(Handlers(self._d_changed, lambda _o, n: self._d_changed(n), self._d_changed))
        replicasets.add_handlers(self.owned_handlers())
        pods.add_handlers(Handlers(on_delete=self._pod_deleted))

    def _d_changed(self, d: Obj) -> None:
        self.enqueue(key(d))

    def _pod_deleted(self, pod: Obj) -> None:
        """Recreate waits for old pods to be gone: a pod of one of its ReplicaSets going wakes it."""
        ref = controller_ref(pod)
        if ref is None or ref.get("kind") != "ReplicaSet":
            return
        rs = self.rss.get(f"{namespace(pod)}/{ref.get('name')}")
        if rs is None:
            return
        k = self._owner_key(controller_ref(rs), namespace(rs))
        if k is not None:
            d = self.deployments.get(k)
            if d is not None and (spec(d).get("strategy") or {}).get("type") == "Recreate":
                self.enqueue(k)

    async def sync(self, k: str) -> float | None:
        d = self.deployments.get(k)
        if d is None:
            return None
        ns = namespace(d)
        in_ns = self.rss.in_namespace(ns)
        owned_uids = {uid(rs) for rs in in_ns if (r := controller_ref(rs)) is not None and r.get("uid") == uid(d)}
        pods = [p for u in owned_uids for p in self.pods.controlled_by(u)]
        plan = reconcile.sync(d, in_ns, pods, now=self.clock.wall(), names_taken={name(rs) for rs in in_ns})
        outcome = await self.executor.run(plan)
        if outcome.error is not None:
            raise outcome.error
        return outcome.requeue_after
