"""The scheduler process: loads the store, learns the nodes, runs the loops, serves the API.

Long-lived tasks, all owned here: the scheduling loop (binder.py), one poll loop per node with a
URL (GET /api/v1/node and /api/v1/pods every nodePollInterval, then reconcile.py), and a monitor
(once a second: node readiness by nodeMonitorGracePeriod, pods of nodes NotReady past
podEvictionTimeout marked Failed, namespaces whose pods are gone finally deleted).

Wiring: `build_scheduler` does the I/O (the store's database created and checked, the agent and API
token files read, NOTIFY_SOCKET taken from the environment); `SchedulerService.__init__` only wires.
Every long-lived task is started through one GuardedTasks (daemonkit/tasks.py); the systemd
watchdog pings only while none of the loops (scheduling, node monitor) has died
(daemonkit/progress.py).

Restart: everything is read back from the store. Pending pods are queued again; bound pods are
counted on their nodes at once; the scheduling loop starts only after one poll round, so that
what the agents really run (reconcile) is known before anything new is placed.
"""

from __future__ import annotations

import asyncio
import signal
import time
from typing import Any

import structlog
from aiohttp import web

from nodeagent.cluster.admission.priority import PREEMPT_LOWER_PRIORITY
from nodeagent.cluster.agents.client import AgentError, Agents, HttpAgents
from nodeagent.cluster.agents.reconcile import (
    Action,
    Adopt,
    AdoptBinding,
    DeleteOnAgent,
    Foreign,
    Gone,
    Status,
    reconcile,
)
from nodeagent.cluster.apiserver.app import create_app
from nodeagent.cluster.binder import Binder
from nodeagent.cluster.config import SchedulerConfig
from nodeagent.cluster.objects import (
    POD_SCHEDULED,
    SYSTEM_NAMESPACES,
    PodRecord,
    agent_manifest,
    condition,
    merge_agent_status,
    set_condition,
)
from nodeagent.cluster.scheduler.framework import PodInfo
from nodeagent.cluster.scheduler.nodes import URL_ANNOTATION, NodeState, check_report, node_object
from nodeagent.cluster.state import ClusterState
from nodeagent.cluster.store.sqlite import AsyncStore, SchedulerStore
from nodeagent.cluster.store.writer import ProcessStore
from nodeagent.core.clock import Clock, SystemClock
from nodeagent.core.model import parse_pod
from nodeagent.daemonkit.auth import Authenticator, bound_port, make_ssl_context, read_token
from nodeagent.daemonkit.configfile import AuthenticationConfig
from nodeagent.daemonkit.progress import ProgressMonitor
from nodeagent.daemonkit.sdnotify import Notifier, watchdog_loop
from nodeagent.daemonkit.tasks import GuardedTasks

log = structlog.get_logger(__name__)


def build_scheduler(config: SchedulerConfig, *, store: SchedulerStore | None = None, agents: Agents | None = None,
                    clock: Clock | None = None) -> SchedulerService:
    """Do the I/O the scheduler's wiring needs and wire it; OSError or ValueError (FieldError naming
    the key) when it cannot run on this config, before anything is started."""
    backend: AsyncStore | ProcessStore = (
        AsyncStore(store) if store is not None
        else ProcessStore.open(config.db_path, config.store_sync))  # creates the file, checks the settings
    if agents is None:
        agent_token = read_token(config.agent_token_file).decode() if config.agent_token_file else None
        agents = HttpAgents(agent_token, config.agent_request_timeout, config.agent_ca_file)
    return SchedulerService(config, store=backend, agents=agents, clock=clock,
                            # reads the token file now: fail at start
                            auth=Authenticator.from_config(config, loopback_reads=True),
                            notifier=Notifier.from_env())  # also removes NOTIFY_SOCKET from our environment


class SchedulerService:
    """The scheduler's parts, wired (`build_scheduler` reads what they need); `run()` until a stop signal.

    Without `auth` the API knows no token (a config naming authentication.tokenFile needs
    `build_scheduler`); without `notifier` nothing is sent to systemd.
    """

    def __init__(self, config: SchedulerConfig, *, store: SchedulerStore | AsyncStore | ProcessStore | None = None,
                 agents: Agents, clock: Clock | None = None, auth: Authenticator | None = None,
                 notifier: Notifier | None = None) -> None:
        self.config = config
        self.clock = clock or SystemClock()
        if store is None:
            store = ProcessStore(config.db_path, config.store_sync)
        self.store: AsyncStore | ProcessStore = (
            store if isinstance(store, AsyncStore | ProcessStore) else AsyncStore(store))
        if isinstance(self.store, ProcessStore) and self.store.on_failure is None:
            self.store.on_failure = self._fail
        self.failure: str | None = None
        self.state = ClusterState(self.store, self.clock, scoring=config.scoring,
                                  grace=config.node_monitor_grace_period)
        self.agents = agents
        self.binder = Binder(self.state, agents, self.clock, initial_backoff=config.pod_initial_backoff,
                             max_backoff=config.pod_max_backoff)
        if auth is None:
            mode = config.authentication
            if isinstance(mode, AuthenticationConfig) and mode.token_file:
                raise ValueError("authentication.tokenFile: build_scheduler reads the token file")
            auth = Authenticator(mode, loopback_reads=True)
        self.auth = auth  # the scheduler's reads stay open on loopback
        self.tasks = GuardedTasks("scheduler-service")
        self.progress = ProgressMonitor()
        self.progress.add("tasks", self.tasks.problems)
        self._polls: dict[str, asyncio.Task[None]] = {}
        self._unreachable: set[str] = set()
        self._stop = asyncio.Event()
        self._stopping = False
        self.runner: web.AppRunner | None = None
        self.notifier = notifier or Notifier(None)

    # ---- lifecycle ---------------------------------------------------------------------------
    async def load(self) -> None:
        t0 = time.perf_counter()
        snapshot = await asyncio.to_thread(self.store.load)
        await self.store.start()
        problems = self.state.load(snapshot, self.config.nodes)
        for p in problems:
            log.error("store_object_unreadable", problem=p)
        writes = [w for ns in SYSTEM_NAMESPACES if (w := self.state.ensure_namespace(ns)) is not None]
        if writes:
            await asyncio.gather(*writes)
        queued = 0
        for rec in self.state.pods.values():
            if rec.node is None and not rec.deleting and not rec.terminal:
                self.binder.enqueue(rec)
                queued += 1
        log.info("scheduler_state_loaded", seconds=round(time.perf_counter() - t0, 3),
                 pods=len(self.state.pods), queued=queued, nodes=len(self.state.nodes),
                 namespaces=len(self.state.namespaces), quotas=len(self.state.quotas))

    async def start(self, *, serve: bool = True) -> None:
        await self.load()
        if serve:
            self.runner = web.AppRunner(create_app(self), access_log=None)
            await self.runner.setup()
            await web.TCPSite(self.runner, self.config.address, self.config.port,
                              ssl_context=self.ssl_context()).start()
        first = [self.poll_node(name) for name, st in self.state.nodes.items() if st.url]
        await asyncio.gather(*first)  # each bounded by agentRequestTimeout
        for name in list(self.state.nodes):
            self._ensure_poll(name)
        self.tasks.start(self.binder.run(), name="scheduling", forever=True)
        self.tasks.start(self._monitor(), name="node-monitor", forever=True)
        log.info("scheduler_ready", address=self.config.address, port=self.port,
                 nodes=sorted(self.state.nodes))
        self.notifier.ready(status=f"{len(self.state.pods)} pods, {len(self.state.nodes)} nodes")

    def ssl_context(self) -> Any:
        return make_ssl_context(self.config)

    @property
    def port(self) -> int:
        return bound_port(self.runner, self.config.port)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop.set)
        await self.start()
        # pings from the loop while no long-lived task has died
        self.tasks.start(watchdog_loop(self.notifier, healthy=self.progress.healthy), name="sd-watchdog")
        try:
            await self._stop.wait()
        finally:
            await self.stop()
        if self.failure is not None:
            raise OSError(self.failure)

    async def stop(self) -> None:
        self.notifier.stopping()
        self._stopping = True
        await self.tasks.close()  # the loops, the polls and the watchdog
        self._polls = {}
        await self.binder.cancel_all()
        if self.runner is not None:
            await self.runner.cleanup()
        await self.store.aclose()
        await self.agents.close()
        log.info("scheduler_stopped")

    def _fail(self, message: str) -> None:
        """The store cannot take writes any more: stop (systemd restarts us from the store)."""
        self.failure = message
        self._stop.set()

    # ---- nodes -------------------------------------------------------------------------------
    def _ensure_poll(self, name: str) -> None:
        st = self.state.nodes.get(name)
        task = self._polls.get(name)
        if st is not None and st.url and (task is None or task.done()) and not self._stopping:
            self._polls[name] = self.tasks.start(self._poll_loop(name), name=f"poll:{name}")

    async def _poll_loop(self, name: str) -> None:
        while name in self.state.nodes:
            await asyncio.sleep(self.config.node_poll_interval)
            try:
                await self.poll_node(name)
            except Exception:
                log.exception("node_poll_failed", node=name)

    async def poll_node(self, name: str) -> None:
        """Read the agent's node status and pods, and reconcile the store with them."""
        st = self.state.nodes.get(name)
        if st is None or not st.url:
            return
        since = self.clock.now()
        try:
            report = await self.agents.get_node(name, st.url)
            reported = (report.get("metadata") or {}).get("name")
            if reported != name:
                raise AgentError(name, f"the agent at {st.url} calls itself {reported!r}")
            self.node_heard(name, report)
            pods = await self.agents.list_pods(name, st.url)
        except AgentError as e:
            if name not in self._unreachable:
                log.warning("node_unreachable", node=name, url=st.url, error=e.message)
            self._unreachable.add(name)
            return
        if name in self._unreachable:
            self._unreachable.discard(name)
            log.info("node_reachable", node=name)
        self.apply(name, reconcile(name, self.state.pods, list(self.state.by_node.get(name, ())),
                                   pods, since))

    def node_heard(self, name: str, report: dict[str, Any]) -> None:
        st = self.state.node(name)
        st.report, st.heard_at, st.heard_wall = report, self.clock.now(), self.clock.wall()
        was, ready, changed = self.state.refresh_node(name, reported=True)
        if ready and not was:
            log.info("node_ready", node=name)
        if changed:
            self.binder.cluster_changed()

    async def report_node(self, name: str, body: Any) -> dict[str, Any]:
        """An agent's status report (registration): remember its URL, then as a poll would."""
        report = check_report(name, body)
        st = self.state.node(name)
        url = ((report.get("metadata") or {}).get("annotations") or {}).get(URL_ANNOTATION)
        dirty = not st.registered
        st.registered = True
        if url and not st.configured and url.rstrip("/") != st.url:
            st.url, dirty = url.rstrip("/"), True
        self.node_heard(name, report)
        if dirty:
            log.info("node_registered", node=name, url=st.url)
            await self.state.save_node(st)
        self._ensure_poll(name)
        return self.node_object(name)

    def node_object(self, name: str) -> dict[str, Any]:
        st = self.state.nodes[name]
        return node_object(st, self.state.table.spec(name), self.clock.now(), self.config.node_monitor_grace_period)

    async def set_unschedulable(self, name: str, value: bool) -> dict[str, Any]:
        st = self.state.nodes[name]
        if st.unschedulable != value:
            st.unschedulable = value
            self.state.refresh_node(name, reported=True)
            await self.state.save_node(st)
            log.info("node_cordoned" if value else "node_uncordoned", node=name)
            if not value:
                self.binder.cluster_changed()
        return self.node_object(name)

    async def forget_node(self, name: str) -> None:
        """DELETE a node: its pods leave the store (the pod garbage collector's rule for pods
        bound to a node that no longer exists); an agent that reports again comes back."""
        task = self._polls.pop(name, None)
        if task is not None:
            task.cancel()
        writes = [self.state.drop_pod(self.state.pods[k]) for k in list(self.state.by_node.get(name, ()))
                  if k in self.state.pods]
        self.state.forget_node(name)
        writes.append(self.store.delete("nodes", name))
        await asyncio.gather(*writes)
        self.binder.cluster_changed()

    async def _monitor(self) -> None:
        period = min(1.0, self.config.node_monitor_grace_period / 4)
        while True:
            await asyncio.sleep(period)
            try:
                self.check_nodes()
                await self.finish_namespaces()
            except Exception:
                log.exception("node_monitor_failed")

    def check_nodes(self) -> None:
        now = self.clock.now()
        for name, st in list(self.state.nodes.items()):
            was, ready, changed = self.state.refresh_node(name)
            if was and not ready:
                log.warning("node_not_ready", node=name, grace=self.config.node_monitor_grace_period)
            if changed:
                self.binder.cluster_changed()
            if ready or st.not_ready_since is None or now - st.not_ready_since <= self.config.pod_eviction_timeout:
                continue
            for key in list(self.state.by_node.get(name, ())):
                rec = self.state.pods.get(key)
                if rec is not None and not rec.terminal and not rec.deleting:
                    self.binder.fail(rec, "NodeLost", f"Node {name} which was running pod "
                                                      f"{rec.pod.metadata.name} is unresponsive")

    async def finish_namespaces(self) -> None:
        """Namespaces being deleted go once their pods are gone."""
        for name, obj in list(self.state.namespaces.items()):
            if obj.get("status", {}).get("phase") != "Terminating":
                continue
            if any(r.pod.metadata.namespace == name for r in self.state.pods.values()):
                continue
            del self.state.namespaces[name]
            await self.store.delete("namespaces", name)
            log.info("namespace_deleted", namespace=name)

    # ---- reconcile ---------------------------------------------------------------------------
    def apply(self, node: str, actions: list[Action]) -> None:
        st, binder = self.state, self.binder
        foreign: dict[str, dict[str, Any]] = {}
        for a in actions:
            if isinstance(a, Adopt):
                self._adopt(node, dict(a.agent_pod))
                continue
            if isinstance(a, Foreign):
                foreign[a.key] = dict(a.agent_pod)
                continue
            if isinstance(a, DeleteOnAgent):
                binder.delete_on_agent(node, a.namespace, a.name, a.grace, a.why)
                continue
            rec = st.pods.get(a.key)  # Status, AdoptBinding, Gone, Rebind: about a pod we may still have
            if rec is None:
                continue
            if isinstance(a, Status):
                was_terminal = rec.terminal
                if merge_agent_status(rec, a.agent_pod):
                    st.account(rec)
                    st.save_pod(rec)
                    if rec.terminal and not was_terminal:
                        log.info("pod_finished", pod=rec.key, node=node, phase=rec.phase,
                                 reason=rec.status.get("reason"))
                        binder.room_freed(node)
            elif isinstance(a, AdoptBinding):
                rec.obj["spec"]["nodeName"] = node
                self._mark_bound(rec, a.agent_pod)
                binder.queue.done(rec.key)
                log.info("pod_binding_adopted", pod=rec.key, node=node)
            elif isinstance(a, Gone):
                binder._finish_delete(rec)
            else:
                log.info("pod_rebind", pod=rec.key, node=node, confirmed=rec.confirmed)
                binder.rebind(rec)
        st.set_foreign(node, foreign)

    def _mark_bound(self, rec: PodRecord, agent_pod: Any) -> None:
        set_condition(rec.status, condition(POD_SCHEDULED, True, self.clock.wall()))
        rec.status.pop("nominatedNodeName", None)
        merge_agent_status(rec, agent_pod)
        rec.changed_at = self.clock.now()
        self.state.unreserve(rec)
        self.state.account(rec)
        self.state.save_pod(rec)

    def _adopt(self, node: str, agent_pod: dict[str, Any]) -> None:
        try:
            pod = parse_pod(agent_manifest({**agent_pod, "spec": agent_pod.get("spec") or {}}))
        except ValueError as e:
            log.warning("pod_adopt_failed", node=node, error=str(e))
            return
        pc = self.state.priority.get(pod.spec.priority_class_name or "")
        policy = pc.preemption_policy if pc is not None else PREEMPT_LOWER_PRIORITY
        self.state.ensure_namespace(pod.metadata.namespace)
        obj = pod.to_dict()
        obj["spec"]["nodeName"] = node
        obj["spec"]["preemptionPolicy"] = policy
        obj["status"] = {}
        rec = PodRecord(obj, pod, PodInfo.from_pod(pod, preemption_policy=policy))
        self.state.pods[rec.key] = rec
        self._mark_bound(rec, agent_pod)
        log.info("pod_adopted", pod=rec.key, node=node, uid=rec.uid)

    # ---- for the API -------------------------------------------------------------------------
    def node_state(self, name: str) -> NodeState | None:
        return self.state.nodes.get(name)
