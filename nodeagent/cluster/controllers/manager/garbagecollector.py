"""The garbage collector's thin loop: one key for the whole graph.

Any change that can matter (garbagecollector/triggers.py: an object arriving with an absent or
waiting owner, owners or finalizers changed, an owner deleted) queues the single key, and so does
the start (a pass over what was listed); the queue's dedup folds a burst of changes into one pass
over the informers' caches, whose decision (garbagecollector/decide.py)
is run by the executor. Kinds without an informer here are unknown to the graph's REST mapper, so
objects owned by them are left alone (upstream would learn them through discovery)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nodeagent.cluster.controllers.common.actions import Delete, Patch
from nodeagent.cluster.controllers.garbagecollector import decide
from nodeagent.cluster.controllers.garbagecollector.graph import group_of
from nodeagent.cluster.controllers.garbagecollector.triggers import Triggers
from nodeagent.cluster.controllers.manager.client import Client, Recorder
from nodeagent.cluster.controllers.manager.executor import Executor
from nodeagent.cluster.controllers.manager.informer import Handlers, Informer
from nodeagent.cluster.controllers.manager.loop import Controller
from nodeagent.core.clock import Clock

Obj = Mapping[str, Any]
GRAPH = "graph"


class GarbageCollector(Controller):
    name = "garbagecollector"
    workers = 1

    def __init__(self, clock: Clock, client: Client, recorder: Recorder | None, informers: Sequence[Informer]) -> None:
        super().__init__(clock)
        self.informers = list(informers)
        self.client = client
        self.executor = Executor(client, recorder, "garbage-collector-controller")
        self._kinds = {(group_of(i.api_version), i.kind) for i in informers}
        self.passes = self.actions = 0
        self.triggers = Triggers()
        for inf in informers:
            inf.add_handlers(Handlers(self._added, self._updated, self._deleted))
        self.enqueue(GRAPH)

    def _added(self, obj: Obj) -> None:
        if self.triggers.added(obj):
            self.enqueue(GRAPH)

    def _updated(self, old: Obj, new: Obj) -> None:
        if self.triggers.updated(old, new):
            self.enqueue(GRAPH)

    def _deleted(self, obj: Obj) -> None:
        if self.triggers.deleted(obj):
            self.enqueue(GRAPH)

    def namespaced(self, api_version: str, kind: str) -> bool | None:
        if (group_of(api_version), kind) not in self._kinds:
            return None
        return self.client.namespaced(api_version, kind)

    async def sync(self, k: str) -> float | None:
        objects = [o for inf in self.informers for o in inf.items()]
        plan = decide.collect(objects, self.namespaced)
        self.passes += 1
        writes = [a for a in plan.actions if isinstance(a, Delete | Patch)]
        if not writes:
            return None
        self.actions += len(writes)
        outcome = await self.executor.run(plan, keep_going=True)  # one stuck object holds up no other
        if outcome.error is not None:
            raise outcome.error
        return None
