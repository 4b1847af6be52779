"""The node lifecycle controller's thin loop (node_lifecycle_controller.go and the taint eviction
controller around the pure core in nodelifecycle/).

Three kinds of key. The monitor key (monitorNodeHealth, every nodeMonitorPeriod) reads every node
and its Lease in kube-node-lease: a node neither renewing its Lease nor posting status within the
grace period gets Ready (and the pressure conditions) Unknown and its pods NotReady; a not-ready
or unreachable node is queued in its zone for the NoExecute taint, which a per-zone token bucket
lets through at the rate the zone's state allows (doNoExecuteTaintingPass: at the end of each pass,
then on its own key every 100 ms while a queue holds nodes); a Ready node loses the taint. A
node's own key (a node or pod event) sets the NoSchedule condition taints and evicts the pods
whose tolerations of the node's NoExecute taints ran out, requeued for the next one due.

The probe times, zone states and queues are this loop's memory, as upstream's: a restart starts
the grace periods over, never shortening them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from nodeagent.cluster.controllers.common.actions import Plan, UpdateStatus
from nodeagent.cluster.controllers.common.meta import name, spec
from nodeagent.cluster.controllers.manager.client import Client, Recorder
from nodeagent.cluster.controllers.manager.executor import Executor, Outcome
from nodeagent.cluster.controllers.manager.informer import Handlers, Informer
from nodeagent.cluster.controllers.manager.loop import Controller
from nodeagent.cluster.controllers.nodelifecycle import eviction, health, monitor, zones
from nodeagent.cluster.controllers.nodelifecycle.tainting import TokenBucket, ZoneQueue
from nodeagent.core.clock import Clock

log = structlog.get_logger(__name__)
Obj = Mapping[str, Any]
MONITOR_KEY = "<monitor>"  # never a node's name (not a DNS subdomain)
TAINT_KEY = "<no-execute-tainting>"
NODE_EVICTION_PERIOD = 0.1  # scheduler.NodeEvictionPeriod: how often the tainting queues are tried
NODE_LEASE_NAMESPACE = "kube-node-lease"


@dataclass(frozen=True, slots=True)
class NodeLifecycleSettings:
    """kube-controller-manager's --node-monitor-grace-period (50 s since 1.32), --node-startup-grace-period,
    --node-monitor-period and the eviction rates."""

    monitor_grace: float = health.MONITOR_GRACE
    startup_grace: float = health.STARTUP_GRACE
    monitor_period: float = health.MONITOR_PERIOD
    rates: zones.Rates = field(default_factory=zones.Rates)


class NodeLifecycleController(Controller):
    name = "nodelifecycle"
    workers = 1  # the monitor pass owns the in-memory state; one worker keeps it unshared

    def __init__(self, clock: Clock, client: Client, recorder: Recorder | None, *, nodes: Informer, leases: Informer,
                 pods: Informer, settings: NodeLifecycleSettings | None = None) -> None:
        super().__init__(clock)
        self.nodes, self.leases, self.pods = nodes, leases, pods
        self.settings = settings or NodeLifecycleSettings()
        self.executor = Executor(client, recorder, "node-controller")
        self.health: dict[str, health.NodeHealth] = {}
        self.zone_states: dict[str, zones.State] = {}
        self.queues: dict[str, ZoneQueue] = {}
        nodes.add_handlers(Handlers(self._node_changed, lambda _o, n: self._node_changed(n), self._node_changed))
        pods.add_handlers(Handlers(self._pod_changed, lambda _o, n: self._pod_changed(n), None))

    # ---- handlers ----
    def _node_changed(self, node: Obj) -> None:
        self.enqueue(name(node))

    def _pod_changed(self, pod: Obj) -> None:
        """A pod bound to a node with NoExecute taints: its eviction time is to be worked out."""
        node_name = str(spec(pod).get("nodeName") or "")
        node = self.nodes.get(node_name) if node_name else None
        if node is not None and any(t.get("effect") == "NoExecute" for t in spec(node).get("taints") or []):
            self.enqueue(node_name)

    async def run(self) -> None:
        self.enqueue(MONITOR_KEY)
        await super().run()

    # ---- sync ----
    async def sync(self, k: str) -> float | None:
        if k == MONITOR_KEY:
            await self.monitor()
            if any(q.queue for q in self.queues.values()):
                self.enqueue(TAINT_KEY)
            return self.settings.monitor_period
        if k == TAINT_KEY:
            await self._taint_due({name(n): n for n in self.nodes.items()}, self.clock.wall())
            return NODE_EVICTION_PERIOD if any(q.queue for q in self.queues.values()) else None
        return await self._sync_node(k)

    def _pods_on(self, node_name: str) -> list[Obj]:
        return self.pods.on_node(node_name)  # an index: scanning every pod per node was O(nodes x pods)

    async def _sync_node(self, node_name: str) -> float | None:
        """doNoScheduleTaintingPass and the taint eviction of the node's pods."""
        node = self.nodes.get(node_name)
        if node is None:
            self._forget(node_name)
            return None
        now = self.clock.wall()
        plan = eviction.decide(node, self._pods_on(node_name), now)
        patch = monitor.condition_taint_patch(node, now)
        if patch is not None:
            plan.actions.insert(0, patch)
        outcome = await self.executor.run(plan, keep_going=True)
        if outcome.error is not None:
            raise outcome.error
        return outcome.requeue_after

    def _forget(self, node_name: str) -> None:
        self.health.pop(node_name, None)
        for q in self.queues.values():
            q.remove(node_name)

    def _queue(self, zone: str) -> ZoneQueue:
        q = self.queues.get(zone)
        if q is None:
            q = self.queues[zone] = ZoneQueue(TokenBucket(self.settings.rates.eviction))
        return q

    async def _write(self, plan: Plan) -> Outcome:
        out = await self.executor.run(plan, keep_going=True)
        if out.error is not None:
            log.info("node_lifecycle_write_failed", error=str(out.error))
        return out

    async def monitor(self) -> None:
        """One monitorNodeHealth pass, then the rate-limited NoExecute tainting."""
        s, now = self.settings, self.clock.wall()
        current: dict[str, Obj] = {}
        ready_of: dict[str, str | None] = {}
        for node in sorted(self.nodes.items(), key=name):
            n = name(node)
            lease = self.leases.get(f"{NODE_LEASE_NAMESPACE}/{n}")
            h = self.health[n] = health.observe(node, self.health.get(n), lease, now)
            was = monitor.ready_status(node)
            stale = health.stale_status(node, h, now, s.monitor_grace, s.startup_grace)
            if stale is not None:
                updated = {**node, "status": stale}
                out = await self._write(Plan([UpdateStatus(updated, reason="NodeStatusUnknown")]))
                if out.error is not None:
                    continue  # the next pass tries again
                rv = out.written.get(("Node", "", n))
                node = {**updated, "metadata": {**node["metadata"], "resourceVersion": rv}} if rv else updated
                log.info("node_status_unknown", node=n, since=round(now - h.probe, 1))
            if monitor.ready_status(node) != "True" and was == "True":
                await self._write(Plan(list(monitor.pods_not_ready(self._pods_on(n), now))))
            current[n] = node
            ready_of[n] = monitor.ready_status(node)
            op, patch = monitor.taint_based_eviction(node, now)
            q = self._queue(zones.zone_key(node))
            if op == "enqueue":
                q.add(n, now)
            elif op == "dequeue":
                q.remove(n)
            if patch is not None:
                await self._write(Plan([patch]))
        for gone in [n for n in self.health if n not in current]:
            self._forget(gone)
        await self._handle_disruption(list(current.values()), ready_of, now)
        await self._taint_due(current, now)

    async def _handle_disruption(self, nodes: list[Obj], ready_of: dict[str, str | None], now: float) -> None:
        """handleDisruption: every zone fully disrupted stops all tainting and takes the NoExecute
        taints off (the control plane is the one cut off); leaving that state restarts every grace
        period; each zone's limiter gets its state's rate."""
        d = zones.handle(nodes, ready_of, self.zone_states, self.settings.rates)
        if d.all_disrupted:
            plan = Plan([p for node in nodes if (p := monitor.reachable_patch(node, now)) is not None])
            if plan.actions:
                log.info("node_lifecycle_full_disruption", zones=len(d.states))
                await self._write(plan)
        if d.exiting:
            for n, h in self.health.items():
                self.health[n] = dataclasses.replace(h, probe=now, ready_transition=now)
        for zone, state in d.states.items():
            if self.zone_states.get(zone) != state:
                log.info("node_lifecycle_zone_state", zone=zone.replace("\x00", ""), state=state,
                         rate=d.rates.get(zone, 0.0))
            self._queue(zone).swap_rate(d.rates.get(zone, 0.0), now)
        self.zone_states = dict(d.states)

    async def _taint_due(self, current: Mapping[str, Obj], now: float) -> None:
        """doNoExecuteTaintingPass: the nodes each zone's limiter lets through get their taint."""
        for q in self.queues.values():
            for n in q.due(now):
                node = current.get(n)
                patch = None if node is None else monitor.no_execute_taint(node, now)
                if patch is not None:
                    out = await self._write(Plan([patch]))
                    if out.error is not None:
                        continue  # stays queued
                    log.info("node_tainted_no_execute", node=n, reason=patch.reason)
                q.remove(n)
