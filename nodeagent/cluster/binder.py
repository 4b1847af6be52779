"""The scheduling loop and everything it does to agents: bind, preempt, delete.

One cycle (`schedule_one`, synchronous, on the event loop): pop the highest-priority pod, drop its
own reservation, filter/score (the core). A node found: "assume" it there (the table counts it at
once) and POST it to that agent in a task of its own, so the loop goes on with the next pod
meanwhile. The agent's 201 confirms the binding: spec.nodeName, PodScheduled=True and the agent's
status are written in one change; a refusal (422: it knows better, e.g. under pressure) or
no answer puts the pod back in the queue with backoff. No node: preemption (the core picks the
node and the victims); the victims are deleted through their agents with their own grace period,
the pod records status.nominatedNodeName and reserves its room there, and it is tried again as
soon as a victim is gone. Neither: it stays Pending with PodScheduled=False, reason
Unschedulable and the core's message, and backs off.

Deleting a bound pod marks it (deletionTimestamp, saved), asks its agent to stop it, and watches
until the agent no longer has it; only then does it leave the store and free its room. If the
agent cannot be reached the pod stays Terminating and the node poll retries (as Kubernetes does).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import structlog

from nodeagent.cluster.agents.client import AgentConflict, AgentError, AgentRefused, Agents, AgentUnavailable
from nodeagent.cluster.objects import (
    DISRUPTION_TARGET,
    POD_SCHEDULED,
    PodRecord,
    agent_manifest,
    condition,
    merge_agent_status,
    set_condition,
)
from nodeagent.cluster.scheduler.framework import FitError, Scheduled
from nodeagent.cluster.scheduler.loop import run_batches
from nodeagent.cluster.scheduler.node_table import NOMINATED
from nodeagent.cluster.scheduler.preemption import Preemption, preempt
from nodeagent.cluster.scheduler.queue import QueuedPod, SchedulingQueue
from nodeagent.cluster.state import FOREIGN, ClusterState
from nodeagent.core.clock import Clock
from nodeagent.core.timefmt import rfc3339
from nodeagent.daemonkit.tasks import GuardedTasks

log = structlog.get_logger(__name__)

SCHEDULER_NAME = "nodeagent-scheduler"
WATCH_SLACK = 10.0  # seconds past a victim's grace period we keep watching it go


class Binder:
    def __init__(self, state: ClusterState, agents: Agents, clock: Clock, *,
                 initial_backoff: float = 1.0, max_backoff: float = 10.0) -> None:
        self.state, self.agents, self.clock = state, agents, clock
        self.queue: SchedulingQueue[PodRecord] = SchedulingQueue(clock, initial_backoff, max_backoff)
        self._wake = asyncio.Event()
        self._tasks = GuardedTasks("scheduler")  # binds and deletions in flight
        self._refused: dict[str, dict[str, float]] = {}  # pod -> node -> until (monotonic)
        self.refusal_memory = max(10.0, 3 * max_backoff)
        self.counters = {"scheduled": 0, "bound": 0, "unschedulable": 0, "preemptions": 0,
                         "victims": 0, "bind_failures": 0}

    # ---- plumbing ----------------------------------------------------------------------------
    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        return self._tasks.start(coro, name=name)

    async def drain(self) -> None:
        """Wait for the binds and deletions in flight (tests, benchmark, shutdown)."""
        await self._tasks.drain()

    async def cancel_all(self) -> None:
        await self._tasks.close()

    def wake(self) -> None:
        self._wake.set()

    def enqueue(self, rec: PodRecord) -> None:
        self.queue.add(rec.key, rec, rec.info.priority)
        self._wake.set()

    def cluster_changed(self) -> None:
        """A node appeared or got room or readiness: pods whose backoff ended are tried now."""
        self.queue.move_all_to_active()
        self._wake.set()

    def room_freed(self, node: str | None) -> None:
        """A pod left `node`: the pods nominated there are tried at once (their backoff cut)."""
        for key in list(self.state.nominated_on.get(node or "", ())):
            rec = self.state.pods.get(key)
            if rec is not None:
                self.queue.add(key, rec, rec.info.priority)
        self.cluster_changed()

    def _requeue(self, rec: PodRecord) -> None:
        try:
            self.queue.requeue(rec.key)
        except (KeyError, ValueError):  # not in flight: queue it afresh (after a restart, say)
            if rec.key not in self.queue:
                self.queue.add(rec.key, rec, rec.info.priority)
        self._wake.set()

    # ---- the loop ----------------------------------------------------------------------------
    async def run(self) -> None:
        """Schedule pods as they become ready, in batches (scheduler/loop.py)."""
        await run_batches(self.queue, self._wake, self.clock, self.schedule_one, self._cycle_failed)

    def _cycle_failed(self, qp: QueuedPod[PodRecord]) -> None:
        rec = self.state.pods.get(qp.key)
        if rec is not None:
            self._requeue(rec)

    def schedule_one(self, qp: QueuedPod[PodRecord]) -> None:
        st = self.state
        rec = st.pods.get(qp.key)
        if rec is None or rec.deleting or rec.terminal or rec.node is not None:
            self.queue.done(qp.key)
            return
        st.unreserve(rec)
        avoid = self._avoid(rec.key)
        result = self._schedule(rec, avoid)
        if isinstance(result, Scheduled):
            self._assume(rec, result.node)
            return
        if result is None:  # only nodes that just refused it would do: wait for them
            self._requeue(rec)
            return
        message = str(result)
        nominated = rec.nominated
        if nominated in st.nodes and self._victims_pending(nominated, rec.info.priority):
            st.reserve(rec, nominated)  # its victims are still stopping: wait, do not preempt again
            self._unschedulable(rec, message)
            self._requeue(rec)
            return
        choice = preempt(st.table, rec.info, result)
        if isinstance(choice, Preemption):
            self._preempt(rec, choice, message)
            return
        changed = rec.status.pop("nominatedNodeName", None) is not None
        self._unschedulable(rec, str(choice), save=changed)
        self._requeue(rec)

    def _schedule(self, rec: PodRecord, avoid: set[str]) -> Scheduled | FitError | None:
        """The core's choice, leaving out the nodes that refused this pod lately (an agent
        knows better: it will not take the pod again before its status says why). None when
        those are the only feasible nodes. A nominated pod takes its nominated node first when
        it fits there (no scoring: the room was made for it)."""
        fw, t = self.state.framework, self.state.table
        nominated = rec.nominated
        if nominated is not None and nominated not in avoid and (i := t.index.get(nominated)) is not None:
            filtered = fw.filter(rec.info)  # kube's PreferNominatedNode: its victims made room there
            if filtered.mask[i]:
                return Scheduled(nominated, 0)
            if not avoid:
                return fw.schedule(rec.info)
        elif not avoid:
            return fw.schedule(rec.info)
        else:
            filtered = fw.filter(rec.info)
        if not filtered.mask.any():
            return fw.schedule(rec.info)
        mask = filtered.mask.copy()
        for name in avoid:
            if (i := t.index.get(name)) is not None:
                mask[i] = False
        if not mask.any():
            return None
        scores = fw.score(rec.info)
        scores[~mask] = -1.0
        i = int(scores.argmax())
        return Scheduled(t.names[i], int(scores[i]))

    def _avoid(self, key: str) -> set[str]:
        refused = self._refused.get(key)
        if not refused:
            return set()
        now = self.clock.now()
        for node, until in list(refused.items()):
            if until <= now:
                del refused[node]
        if not refused:
            del self._refused[key]
        return set(refused)

    def _victims_pending(self, node: str, priority: int) -> bool:
        pods = self.state.pods
        return any((v := pods.get(k)) is not None and v.deleting and v.info.priority < priority
                   for k in self.state.by_node.get(node, ()))

    def _unschedulable(self, rec: PodRecord, message: str, save: bool = False, quiet: bool = False) -> None:
        """PodScheduled=False with the core's message; written (and logged) when it changed."""
        self.counters["unschedulable"] += 1
        cond = condition(POD_SCHEDULED, False, self.clock.wall(), "Unschedulable", message)
        if set_condition(rec.status, cond) or save:
            self.state.save_pod(rec)
            if not quiet:
                log.info("pod_unschedulable", pod=rec.key, message=message)

    def _preempt(self, rec: PodRecord, choice: Preemption, message: str) -> None:
        st = self.state
        self.counters["preemptions"] += 1
        evicted: list[str] = []
        for victim in choice.victims:
            if victim.key.startswith(NOMINATED):  # a lower-priority pod's reservation
                other = st.pods.get(victim.key[len(NOMINATED):])
                if other is not None:
                    st.unreserve(other)
                    if other.status.pop("nominatedNodeName", None) is not None:
                        st.save_pod(other)
                continue
            vrec = st.pods.get(victim.key)
            if vrec is None or victim.key.startswith(FOREIGN):
                continue
            self.counters["victims"] += 1
            cond = condition(DISRUPTION_TARGET, True, self.clock.wall(), "PreemptionByScheduler",
                             f"{SCHEDULER_NAME}: preempting to accommodate a higher priority pod")
            evicted.append(vrec.key)
            self.delete(vrec, None, cond=cond)
        log.info("pod_preempting", pod=rec.key, node=choice.node, victims=evicted, message=message)
        rec.status["nominatedNodeName"] = choice.node
        st.reserve(rec, choice.node)
        self._unschedulable(rec, message, save=True, quiet=True)
        if choice.victims:
            self._requeue(rec)
        else:
            self.queue.done(rec.key)
            self.enqueue(rec)

    # ---- binding -----------------------------------------------------------------------------
    def _assume(self, rec: PodRecord, node: str) -> None:
        """Count the pod on `node` now and POST it there. The binding is written once the agent
        has accepted it (one write per bind): if the scheduler dies in between, the store still
        has the pod Pending and the first poll after the restart finds it on the agent and adopts
        the binding (reconcile.py) before anything is scheduled again."""
        rec.obj["spec"]["nodeName"] = node
        rec.status.pop("nominatedNodeName", None)
        rec.changed_at = self.clock.now()
        self.state.account(rec)
        self.counters["scheduled"] += 1
        self.spawn(self._bind(rec, node, None), f"bind:{rec.key}")

    def rebind(self, rec: PodRecord) -> None:
        """POST a pod bound in the store to its node again (the agent does not have it)."""
        if rec.node is not None and rec.busy == 0:
            self.spawn(self._bind(rec, rec.node, None), f"rebind:{rec.key}")

    async def _bind(self, rec: PodRecord, node: str, written: asyncio.Future[None] | None) -> None:
        rec.busy += 1
        try:
            if written is not None:
                await written
            st = self.state.nodes.get(node)
            if st is None or not st.url:
                raise AgentUnavailable(node, "no URL is known for this node")
            meta = rec.obj["metadata"]
            try:
                ap = await self.agents.create_pod(node, st.url, agent_manifest(rec.obj))
            except AgentConflict as e:
                there = await self.agents.get_pod(node, st.url, meta["namespace"], meta["name"])
                if there is None or (there.get("metadata") or {}).get("uid") != rec.uid:
                    raise AgentRefused(node, f"another pod of this name is there: {e.message}",
                                       409, "AlreadyExists") from None
                ap = there
            self._confirmed(rec, node, ap)
        except AgentError as e:
            self._bind_failed(rec, node, e)
        except OSError as e:  # the store write failed
            self._bind_failed(rec, node, AgentUnavailable(node, f"cannot save the binding: {e}"))
        finally:
            rec.busy -= 1

    def _confirmed(self, rec: PodRecord, node: str, agent_pod: dict[str, Any]) -> None:
        st = self.state
        if st.pods.get(rec.key) is not rec or rec.deleting or rec.node != node:
            # deleted (or moved) while the POST was on its way: the agent must let it go
            grace = int(rec.obj["metadata"].get("deletionGracePeriodSeconds", rec.grace))
            self.spawn(self._delete_on_agent(rec, node, grace), f"unbind:{rec.key}")
            return
        set_condition(rec.status, condition(POD_SCHEDULED, True, self.clock.wall()))
        merge_agent_status(rec, agent_pod)
        rec.changed_at = self.clock.now()
        st.account(rec)
        st.save_pod(rec)
        self.queue.done(rec.key)
        self._refused.pop(rec.key, None)
        self.counters["bound"] += 1
        log.debug("pod_bound", pod=rec.key, node=node)

    def _bind_failed(self, rec: PodRecord, node: str, err: AgentError) -> None:
        st = self.state
        self.counters["bind_failures"] += 1
        if st.pods.get(rec.key) is not rec or rec.node != node:
            return
        if rec.deleting:
            if isinstance(err, AgentRefused):
                self._finish_delete(rec)
            return
        if rec.confirmed:  # it ran there: a pod does not move (the kubelet would fail it too)
            if isinstance(err, AgentRefused):
                self.fail(rec, err.reason or "Rejected", err.message)
            return  # unreachable: the node poll tries again
        log.info("pod_bind_failed", pod=rec.key, node=node, reason=err.reason, error=err.message)
        self._refused.setdefault(rec.key, {})[node] = self.clock.now() + self.refusal_memory
        del rec.obj["spec"]["nodeName"]
        msg = f"binding to node {node} failed: {err.reason + ': ' if err.reason else ''}{err.message}"
        set_condition(rec.status, condition(POD_SCHEDULED, False, self.clock.wall(), "SchedulerError", msg))
        rec.changed_at = self.clock.now()
        st.account(rec)
        st.save_pod(rec)
        self._requeue(rec)
        self.cluster_changed()

    def fail(self, rec: PodRecord, reason: str, message: str) -> None:
        """Mark a bound pod Failed (its node lost it or refuses it); it stops counting."""
        rec.status.update(phase="Failed", reason=reason, message=message)
        rec.changed_at = self.clock.now()
        self.state.account(rec)
        self.state.save_pod(rec)
        self.queue.done(rec.key)
        log.info("pod_failed", pod=rec.key, node=rec.node, reason=reason, message=message)

    # ---- deletion ----------------------------------------------------------------------------
    def delete(self, rec: PodRecord, grace: int | None, cond: dict[str, Any] | None = None
               ) -> asyncio.Future[None]:
        """Begin deleting `rec` (see the module docstring); the future is the store write."""
        st = self.state
        grace = rec.grace if grace is None else grace
        self.queue.delete(rec.key)
        if rec.node is None:
            written = st.drop_pod(rec)
            self.cluster_changed()
            return written
        if rec.deleting:
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return done
        meta = rec.obj["metadata"]
        meta["deletionTimestamp"] = rfc3339(self.clock.wall())
        meta["deletionGracePeriodSeconds"] = grace
        if cond is not None:
            set_condition(rec.status, cond)
        rec.changed_at = self.clock.now()
        st.account(rec)
        written = st.save_pod(rec)
        self.spawn(self._delete_on_agent(rec, rec.node, grace, written), f"delete:{rec.key}")
        return written

    async def _delete_on_agent(self, rec: PodRecord, node: str, grace: int,
                               written: asyncio.Future[None] | None = None) -> None:
        rec.busy += 1
        try:
            if written is not None:
                await written
            st = self.state.nodes.get(node)
            if st is None or not st.url:
                return
            ns, name = rec.obj["metadata"]["namespace"], rec.obj["metadata"]["name"]
            try:
                gone = await self.agents.delete_pod(node, st.url, ns, name, grace) is None
                deadline = self.clock.now() + grace + WATCH_SLACK
                delay = 0.1
                while not gone and self.clock.now() < deadline:
                    await asyncio.sleep(delay)
                    delay = min(delay * 1.5, 2.0)
                    ap = await self.agents.get_pod(node, st.url, ns, name)
                    gone = ap is None or (ap.get("metadata") or {}).get("uid") != rec.uid
            except AgentError as e:
                log.warning("pod_delete_on_agent_failed", pod=rec.key, node=node, error=e.message)
                return  # the node poll tries again
            if gone:
                self._finish_delete(rec)
        finally:
            rec.busy -= 1

    def delete_on_agent(self, node: str, ns: str, name: str, grace: int | None, why: str) -> None:
        """Stop a pod the store does not want there (a duplicate, a stale copy)."""
        st = self.state.nodes.get(node)
        if st is None or not st.url:
            return
        url = st.url
        log.info("pod_delete_on_agent", pod=f"{ns}/{name}", node=node, why=why)

        async def run() -> None:
            try:
                await self.agents.delete_pod(node, url, ns, name, grace)
            except AgentError as e:
                log.warning("pod_delete_on_agent_failed", pod=f"{ns}/{name}", node=node, error=e.message)

        self.spawn(run(), f"delete-stray:{node}/{ns}/{name}")

    def _finish_delete(self, rec: PodRecord) -> None:
        if self.state.pods.get(rec.key) is rec:
            node = rec.node
            self.state.drop_pod(rec)
            log.debug("pod_deleted", pod=rec.key, node=node)
            self.room_freed(node)
