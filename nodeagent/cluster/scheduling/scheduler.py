"""The scheduler on the registry: pending pods through the queue, the framework and preemption;
bindings through `pods/binding`; victims deleted through the API path with their grace.

One cycle (`schedule_one`, synchronous on the event loop): pop the highest-priority pending pod,
drop its nomination, filter and score (a nominated pod takes its nominated node first when it
fits there, as PreferNominatedNode). A node found: the cache assumes it there and a task POSTs
the Binding (201: a `Scheduled` event; 409: another binder or a deletion won, the watch tells
the rest). No node: preemption picks a node and victims; each victim gets DisruptionTarget, is
deleted (its own grace period: the pod strategy's) and gets a `Preempted` event; the preemptor
records status.nominatedNodeName and reserves its room there. Neither: PodScheduled=False,
reason Unschedulable with the core's message (written only when the pod does not carry it
already), a `FailedScheduling` event, and the pod waits in the queue's unschedulable pool for a
cluster event.

Level-triggered: everything comes from the cache, which comes from the watches; a restart at
any instant relists and goes on. A pod is never bound twice: the binding is a compare-and-swap
that refuses a pod with spec.nodeName (409).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import structlog

from nodeagent.cluster.events.recorder import EventRecorder
from nodeagent.cluster.objects import set_condition
from nodeagent.cluster.registry.binding import bind
from nodeagent.cluster.registry.errors import StatusError
from nodeagent.cluster.registry.options import Context, DeleteOptions
from nodeagent.cluster.registry.store import GenericStore
from nodeagent.cluster.scheduler.framework import FitError, Scheduled
from nodeagent.cluster.scheduler.loop import run_batches
from nodeagent.cluster.scheduler.node_table import NOMINATED
from nodeagent.cluster.scheduler.preemption import Preemption, preempt
from nodeagent.cluster.scheduler.queue import QueuedPod, SchedulingQueue
from nodeagent.cluster.scheduling.cache import CachedPod, SchedulerCache
from nodeagent.core.clock import Clock
from nodeagent.core.timefmt import rfc3339
from nodeagent.core.wellknown import DISRUPTION_TARGET, POD_SCHEDULED
from nodeagent.daemonkit.tasks import GuardedTasks

log = structlog.get_logger(__name__)

Obj = dict[str, Any]


class Scheduler:
    def __init__(self, pods: GenericStore, cache: SchedulerCache, recorder: EventRecorder, clock: Clock, *,
                 initial_backoff: float = 1.0, max_backoff: float = 10.0) -> None:
        self.pods, self.cache, self.recorder, self.clock = pods, cache, recorder, clock
        self.name = cache.scheduler_name
        self.queue: SchedulingQueue[str] = SchedulingQueue(clock, initial_backoff, max_backoff)
        self._wake = asyncio.Event()
        self._tasks = GuardedTasks("scheduler")
        self.ctx = Context(field_manager=self.name)
        self.counters = {"scheduled": 0, "bound": 0, "bind_conflicts": 0, "unschedulable": 0,
                         "preemptions": 0, "victims": 0}
        cache.on_pending = self._pending
        cache.on_change = self.cluster_changed
        cache.on_assigned = self._assigned
        cache.on_gone = self.queue.done

    # ---- what the cache tells ------------------------------------------------------------------
    def _pending(self, cp: CachedPod) -> None:
        self.queue.add(cp.key, cp.key, cp.info.priority)
        self._wake.set()

    def cluster_changed(self) -> None:
        """A node appeared or changed, or a pod left one: pods whose backoff ended are tried now, and
        nominated pods at once (the room their victims left is theirs)."""
        self.queue.move_all_to_active()
        for key in list(self.cache.nominations):
            cp = self.cache.pending.get(key)
            if cp is not None and key in self.queue:
                self.queue.add(key, key, cp.info.priority)
        self._wake.set()

    def _assigned(self) -> None:
        """A pod was counted on a node (kube's AssignedPodAdd): unschedulable pods go back to the
        backoff queue, as their topology spread or pod affinity may be met now."""
        self.queue.move_all_to_active()
        self._wake.set()

    # ---- plumbing ------------------------------------------------------------------------------
    def _spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> None:
        self._tasks.start(coro, name=name)

    async def drain(self) -> None:
        """Wait for the bindings and deletions in flight (tests, benchmark)."""
        await self._tasks.drain()

    async def close(self) -> None:
        await self._tasks.close()

    def _requeue(self, key: str, *, unschedulable: bool = False) -> None:
        try:
            self.queue.requeue(key, unschedulable=unschedulable)
        except (KeyError, ValueError):
            cp = self.cache.pending.get(key)
            if cp is not None and key not in self.queue:
                self.queue.add(key, key, cp.info.priority)
        self._wake.set()

    # ---- the loop ------------------------------------------------------------------------------
    async def run(self) -> None:
        """Schedule pods as they become ready, in batches (scheduler/loop.py)."""
        await run_batches(self.queue, self._wake, self.clock, self.schedule_one, lambda qp: self._requeue(qp.key))

    def schedule_one(self, qp: QueuedPod[str]) -> None:
        cache = self.cache
        cp = cache.pending.get(qp.key)
        if cp is None or qp.key in cache.assumed:
            self.queue.done(qp.key)
            return
        nominated = cache.nominations.get(cp.key) or cp.nominated
        cache.unreserve(cp.key)
        result = self._schedule(cp, nominated)
        if isinstance(result, Scheduled):
            cache.assume(cp, result.node)
            self.counters["scheduled"] += 1
            self._spawn(self._bind(cp, result.node), f"bind:{cp.key}")
            return
        message = str(result)
        if nominated is not None and cache.victims_pending(nominated, cp.info.priority):
            cache.reserve(cp, nominated)  # its victims are still stopping: wait, do not preempt again
            self._requeue(cp.key)
            return
        choice = preempt(cache.table, cp.info, result, budgets=tuple(cache.budgets.values()))
        if isinstance(choice, Preemption):
            self._preempt(cp, choice, message)
            return
        self.counters["unschedulable"] += 1
        self._spawn(self._unschedulable(cp, str(choice), clear_nomination=True), f"unschedulable:{cp.key}")
        self._requeue(cp.key, unschedulable=True)  # until a cluster event (or 5 min), as kube's unschedulablePods

    def _schedule(self, cp: CachedPod, nominated: str | None) -> Scheduled | FitError:
        fw, t = self.cache.framework, self.cache.table
        if nominated is not None and (i := t.index.get(nominated)) is not None and fw.filter(cp.info).mask[i]:
            return Scheduled(nominated, 0)
        return fw.schedule(cp.info)

    # ---- binding -------------------------------------------------------------------------------
    async def _bind(self, cp: CachedPod, node: str) -> None:
        meta = cp.obj["metadata"]
        ns, name = meta["namespace"], meta["name"]
        binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "namespace": ns,
                                                                         "uid": cp.uid},
                   "target": {"kind": "Node", "name": node}}
        try:
            await bind(self.pods, ns, name, binding, self.ctx)
        except StatusError as e:
            self.cache.forget_assumed(cp.key)
            if e.code in (404, 409):  # gone, bound by someone else or being deleted: the watch says which
                self.counters["bind_conflicts"] += 1
                log.info("pod_bind_refused", pod=cp.key, node=node, code=e.code, error=e.status.get("message"))
                if cp.key in self.cache.pending:
                    self._requeue(cp.key)
                else:
                    self.queue.done(cp.key)
                return
            log.warning("pod_bind_failed", pod=cp.key, node=node, error=e.status.get("message"))
            self._requeue(cp.key)
            return
        self.counters["bound"] += 1
        self.queue.done(cp.key)
        self.recorder.event(cp.obj, "Normal", "Scheduled", f"Successfully assigned {ns}/{name} to {node}")

    async def _status(self, cp: CachedPod, change: Any) -> None:
        """A status write on the pod (PodScheduled, nominatedNodeName, DisruptionTarget); skipped
        when it changes nothing; a pod gone meanwhile is no error."""
        meta = cp.obj["metadata"]

        def mutate(old: Obj) -> Obj:
            # only the status's top level is changed (set_condition puts a new list, a nomination is
            # a key): the rest is shared with `old`, this write's own decode, and the field manager's
            # compare skips what is shared (a kubelet's containerStatuses) at once
            new = {**old, "status": dict(old.get("status") or {})}
            change(new["status"])
            return new

        try:
            await self.pods.guaranteed_update(meta["namespace"], meta["name"], mutate, self.ctx, subresource="status")
        except StatusError as e:
            if e.code != 404:
                log.warning("pod_status_write_failed", pod=cp.key, error=e.status.get("message"))

    async def _unschedulable(self, cp: CachedPod, message: str, *, nominated: str | None = None,
                             clear_nomination: bool = False) -> None:
        cond = {"type": POD_SCHEDULED, "status": "False", "lastProbeTime": None,
                "lastTransitionTime": rfc3339(self.clock.wall()), "reason": "Unschedulable", "message": message}

        def change(status: Obj) -> bool:
            """Set the condition and the nomination; whether that changed anything."""
            changed = set_condition(status, cond)
            had = status.get("nominatedNodeName")
            if nominated is not None:
                status["nominatedNodeName"] = nominated
            elif clear_nomination:
                status.pop("nominatedNodeName", None)
            return changed or status.get("nominatedNodeName") != had

        self.recorder.event(cp.obj, "Warning", "FailedScheduling", message)
        if change(dict(cp.obj.get("status") or {})):  # as upstream: the cached pod carries it already, no write
            await self._status(cp, change)

    # ---- preemption ----------------------------------------------------------------------------
    def _preempt(self, cp: CachedPod, choice: Preemption, message: str) -> None:
        cache = self.cache
        self.counters["preemptions"] += 1
        victims: list[CachedPod] = []
        for bp in choice.victims:
            if bp.key.startswith(NOMINATED):  # a lower-priority pod's reservation: it loses it
                other = cache.pods.get(bp.key[len(NOMINATED):])
                cache.unreserve(bp.key[len(NOMINATED):])
                if other is not None:
                    self._spawn(self._status(other, lambda s: s.pop("nominatedNodeName", None)),
                                f"denominate:{other.key}")
                continue
            victim = cache.pods.get(bp.key)
            if victim is not None:
                victims.append(victim)
        self.counters["victims"] += len(victims)
        log.info("pod_preempting", pod=cp.key, node=choice.node, victims=[v.key for v in victims])
        cache.reserve(cp, choice.node)
        self._spawn(self._evict(cp, choice.node, victims, message), f"preempt:{cp.key}")
        self._requeue(cp.key)

    async def _evict(self, cp: CachedPod, node: str, victims: list[CachedPod], message: str) -> None:
        await self._unschedulable(cp, message, nominated=node)
        cond = {"type": DISRUPTION_TARGET, "status": "True", "lastProbeTime": None,
                "lastTransitionTime": rfc3339(self.clock.wall()), "reason": "PreemptionByScheduler",
                "message": f"{self.name}: preempting to accommodate a higher priority pod"}
        for victim in victims:
            await self._status(victim, lambda s: set_condition(s, cond))
            meta = victim.obj["metadata"]
            try:
                await self.pods.delete(meta["namespace"], meta["name"], DeleteOptions(uid=victim.uid), self.ctx)
            except StatusError as e:
                if e.code not in (404, 409):
                    log.warning("pod_preemption_delete_failed", pod=victim.key, error=e.status.get("message"))
                continue
            self.recorder.event(victim.obj, "Normal", "Preempted", f"Preempted by pod {cp.uid} on node {node}")
