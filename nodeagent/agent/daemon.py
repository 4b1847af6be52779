"""The composition root: builds every part from the config and owns the long-lived tasks.

    observe (capacity, cgroup stats, static pod files) -> decide (allocatable, admission, layout)
    -> act (cgroup driver, process runtime, checkpoints) -> report (HTTP API, logs)

Nothing else creates long-lived tasks. Shutdown (SIGTERM/SIGINT) stops the API and lets go of
the pods without stopping them: the next agent re-adopts them from the checkpoints.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog
from aiohttp import web

from nodeagent.agent.api.app import create_app
from nodeagent.agent.api.metrics import (
    Metrics,
    NodeSnapshot,
    pod_samples,
    quantity_numbers,
    signal_samples,
    threshold_samples,
)
from nodeagent.agent.api.registration import registration_loop
from nodeagent.agent.cgroups import layout
from nodeagent.agent.cgroups.detect import make_driver
from nodeagent.agent.cgroups.driver import CgroupDriver
from nodeagent.agent.config.reload import ReloadResult, plan
from nodeagent.agent.config.settings import Config, load_config
from nodeagent.agent.events import EventRecorder
from nodeagent.agent.eviction.evaluate import DISK_PRESSURE, MEMORY_PRESSURE, PID_PRESSURE
from nodeagent.agent.eviction.manager import EvictionManager, PassResult
from nodeagent.agent.eviction.notify import AdaptivePoll, rate_floor
from nodeagent.agent.eviction.signals import NodeObserver
from nodeagent.agent.eviction.wakeups import MemoryWakeups
from nodeagent.agent.node.addresses import node_addresses_async, to_node_addresses
from nodeagent.agent.node.allocatable import allocatable_for
from nodeagent.agent.node.capacity import Capacity, discover_capacity
from nodeagent.agent.node.priority import set_own_oom_score_adj, set_own_priority
from nodeagent.agent.node.static_pods import StaticPodSource
from nodeagent.agent.node.status import ConditionTracker, NodeStatusInput, build_node, read_node_info
from nodeagent.agent.pods.checkpoint import CheckpointStore
from nodeagent.agent.pods.eviction_access import PodEvictionAccess
from nodeagent.agent.pods.manager import PodManager
from nodeagent.agent.pods.worker import PodEnv
from nodeagent.agent.runtime import logs
from nodeagent.core.clock import Clock, SystemClock
from nodeagent.core.errors import FieldError
from nodeagent.core.quantity import Quantity
from nodeagent.core.wellknown import CONFIG_HASH as STATIC_HASH_ANNOTATION
from nodeagent.core.wellknown import CONFIG_SOURCE as STATIC_SOURCE_ANNOTATION
from nodeagent.daemonkit.auth import (
    Authenticator,
    bind_unix_socket,
    bound_port,
    check_bind_safety,
    make_ssl_context,
    unlink_unix_socket,
)
from nodeagent.daemonkit.configfile import ConfigError
from nodeagent.daemonkit.logsetup import configure_logging
from nodeagent.daemonkit.sdnotify import Notifier, watchdog_loop

log = structlog.get_logger(__name__)

@dataclass
class NodeReporter:
    """Builds the Node object from fixed facts plus current usage of the pods cgroup."""

    config: Config
    capacity: Capacity
    allocatable: dict[str, Quantity]
    driver: CgroupDriver
    clock: Clock
    node_info: dict[str, str]
    addresses: list[dict[str, str]] = field(default_factory=list)
    tracker: ConditionTracker | None = None
    pressure: Callable[[], tuple[str, ...]] = lambda: ()

    def __post_init__(self) -> None:
        self.tracker = self.tracker or ConditionTracker(self.clock)

    def usage(self) -> dict[str, Quantity]:
        try:
            stats = self.driver.stats(layout.KUBEPODS)
        except OSError:
            return {}
        return {
            "memory": Quantity.from_value(stats.working_set, "BinarySI"),
            "cpuUsageSeconds": Quantity.from_milli(stats.cpu_usage_usec // 1000, "DecimalSI"),
            "pods": Quantity.from_value(stats.pids_current, "DecimalSI"),
        }

    def node(self) -> dict[str, Any]:
        assert self.tracker is not None
        inp = NodeStatusInput(
            name=self.config.node_name or socket.gethostname().lower(),
            capacity=self.capacity.as_quantities(),
            allocatable=self.allocatable,
            usage={k: v for k, v in self.usage().items() if k != "pods"},
            addresses=self.addresses,
            node_info=self.node_info,
            memory_pressure=MEMORY_PRESSURE in (conditions := self.pressure()),
            disk_pressure=DISK_PRESSURE in conditions,
            pid_pressure=PID_PRESSURE in conditions,
        )
        return build_node(inp, self.tracker)


class Backend:
    """The AgentBackend: pods from the PodManager, the node from the NodeReporter, plus an entry
    for every static pod file that cannot be run (so operators see it in the pod list)."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.manager = agent.manager

    def node(self) -> dict[str, Any]:
        return self.agent.reporter.node()

    def list_pods(self) -> list[dict[str, Any]]:
        return self.manager.list_pods() + [static_error_entry(e) for e in self.agent.static_errors]

    def events(self) -> list[dict[str, Any]]:
        return self.agent.events.list()

    async def reload_config(self) -> dict[str, Any]:
        return (await self.agent.reload()).to_dict()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.manager, name)


def static_error_entry(error: Any) -> dict[str, Any]:
    """A Pod-shaped list entry for a static pod file that could not be parsed."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": error.path.name, "namespace": "",
                     "annotations": {"kubernetes.io/config.source": "file",
                                     "nodeagent.io/manifest-path": str(error.path)}},
        "status": {"phase": "Pending", "reason": "InvalidManifest", "message": str(error)},
    }


class Agent:
    """Everything the running agent holds; `run()` until a stop signal."""

    def __init__(self, config: Config, *, config_path: str | None = None, clock: Clock | None = None,
                 driver: CgroupDriver | None = None) -> None:
        self.config = config
        self.config_path = config_path
        self.clock = clock or SystemClock()
        self.driver = driver or make_driver(config.cgroup_driver, config.cgroup_root)
        os.makedirs(config.state_dir, mode=0o700, exist_ok=True)
        self.capacity = discover_capacity(config.nodefs_path or config.state_dir, config.max_pods)
        resources = allocatable_for(self.capacity, config)
        if resources.problems:
            raise FieldError("allocatable", "; ".join(resources.problems))
        self.allocatable = resources.allocatable
        enforced = resources.enforced_limits
        env = PodEnv(driver=self.driver, state_dir=config.state_dir,
                     memory_capacity=self.capacity.memory, clock=self.clock)
        self.manager = PodManager(env, CheckpointStore(config.state_dir), allocatable=self.allocatable,
                                  enforced_allocatable=enforced, max_pods=config.max_pods)
        version = str(self.driver.version)
        node_name = config.node_name or socket.gethostname().lower()
        self.events = EventRecorder(self.clock, node_name)
        observer = NodeObserver(self.driver, config.nodefs_path or config.state_dir,
                                config.imagefs_path or config.nodefs_path or config.state_dir,
                                resources.enforced_memory,
                                self.clock.now)
        self.eviction = EvictionManager(
            config.thresholds, observer.observe, PodEvictionAccess(self.manager), self.events, self.clock,
            transition_period=config.eviction_pressure_transition_period,
            max_pod_grace_period=config.eviction_max_pod_grace_period,
            interval=config.housekeeping_interval,
        )
        self.manager.extra_admit = self.eviction.admit
        self.wakeups = MemoryWakeups(self.driver, self.eviction, resources.enforced_memory, observer.memory)
        self.eviction.on_pass.append(self.wakeups.after_pass)
        self.reporter = NodeReporter(config, self.capacity, self.allocatable, self.driver, self.clock,
                                     read_node_info(f"v{version}", f"cgroupfs-v{version}"),
                                     pressure=lambda: self.eviction.conditions)
        self.static = StaticPodSource(config.static_pod_path, node_name) if config.static_pod_path else None
        self.static_errors: list[Any] = []
        self._static_seen: set[tuple[str, str]] = set()  # static pod keys the files gave since start
        # ---- report: API access, metrics, systemd ----
        unsafe = check_bind_safety(config.address, config.authentication, tls=config.tls_cert_file is not None)
        if unsafe:
            raise FieldError("address", unsafe)
        self.ssl_context = make_ssl_context(config)  # FieldError naming the key if unusable
        self.auth = Authenticator.from_config(config)  # reads the token file now: fail at start
        self.metrics = Metrics(self)
        self.eviction.on_pass.append(self._observe_eviction_reaction)
        self.notifier = Notifier.from_env()  # also removes NOTIFY_SOCKET from our environment
        self.runner: web.AppRunner | None = None
        self._stop = asyncio.Event()
        self._background: set[asyncio.Task[Any]] = set()

    def metrics_snapshot(self) -> NodeSnapshot:
        """The SnapshotProvider for /metrics: in-memory values only (called on the loop)."""
        observations = self.eviction.last_observations
        return NodeSnapshot(
            capacity=quantity_numbers(self.capacity.as_quantities()),
            allocatable=quantity_numbers(self.allocatable),
            pods=pod_samples(self.manager.list_pods()),
            evictions=dict(self.eviction.evictions_total),
            signals=signal_samples(observations),
            thresholds=threshold_samples(self.eviction.thresholds, observations),
            conditions=self.eviction.conditions,
        )

    def _adaptive_poll(self, config: Config) -> AdaptivePoll:
        return AdaptivePoll(config.thresholds, max_s=config.housekeeping_interval,
                            rate_floor=rate_floor(self.wakeups.notified_at_line))

    def _observe_eviction_reaction(self, result: PassResult) -> None:
        """From the stats that met the threshold to the victims gone (the pass awaited the kills)."""
        if result.evicted and result.signal and result.observed is not None and result.observed.time:
            self.metrics.observe_eviction_reaction(result.signal, self.clock.now() - result.observed.time)

    def status_line(self) -> str:
        """One line for `systemctl status` (sd_notify STATUS=)."""
        running = sum(1 for w in self.manager.pods.values() if w.running)
        conditions = ", ".join(self.eviction.conditions) or "no pressure"
        api = f"{self.config.address}:{self.port}"
        return f"{len(self.manager.pods)} pods ({running} running); {conditions}; API on {api}"

    async def start(self) -> None:
        nice = set_own_priority(self.config.nice)  # this (loop) thread runs every eviction pass
        adj = set_own_oom_score_adj()
        self.notifier.status("restoring pods from checkpoints")
        self.manager.setup_cgroups()
        problems = await self.manager.restore()
        for p in problems:
            log.error("restore_problem", problem=p)
        try:
            self.reporter.addresses = await node_addresses_async()
        except (OSError, ValueError, TimeoutError) as e:  # the node still comes up, reachable as loopback
            log.warning("node_addresses_failed", error=str(e))
            self.reporter.addresses = to_node_addresses([], socket.gethostname())
        self.eviction.observe_now()
        await self.wakeups.start()
        self.eviction.next_interval = self._adaptive_poll(self.config)  # its floor depends on what got armed
        await self.sync_static_pods()
        app = create_app(Backend(self), max_body=self.config.max_request_body_bytes, auth=self.auth,
                         metrics=self.metrics)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        await web.TCPSite(self.runner, self.config.address, self.config.port, ssl_context=self.ssl_context).start()
        if self.config.unix_socket:
            await web.SockSite(self.runner, bind_unix_socket(self.config.unix_socket)).start()
        auth = self.config.authentication
        log.info("agent_ready", address=self.config.address, port=self.port, driver=f"v{self.driver.version}",
                 pods=len(self.manager.pods), oom_score_adj=adj, nice=nice, unix_socket=self.config.unix_socket,
                 tls=self.ssl_context is not None,
                 authentication=auth if isinstance(auth, str) or auth is None else "token/x509",
                 allocatable={k: str(v) for k, v in self.allocatable.items()})
        self.notifier.ready(status=self.status_line())  # after restore and with the API listening

    @property
    def port(self) -> int:
        return bound_port(self.runner, self.config.port)

    async def sync_static_pods(self) -> None:
        """Start, replace or stop static pods as their files appeared, changed or went away.

        Every file's pod that is not running is (re)tried each interval, so a static pod refused
        once (e.g. no room yet) starts when it can; broken files are listed by the API.
        """
        if self.static is None:
            return
        diff = await asyncio.to_thread(self.static.scan)
        self.static_errors = diff.errors
        wanted = self.static.pods
        removed = {sp.key for sp in diff.removed}
        self._static_seen |= wanted.keys()
        replacing = []
        # Compare what runs with what the files say, not only with the previous scan: pods
        # restored from checkpoints must follow files edited or removed while the agent was down.
        for key, worker in list(self.manager.pods.items()):
            annotations = worker.pod.metadata.annotations
            if worker.terminal or annotations.get(STATIC_SOURCE_ANNOTATION) != "file":
                continue
            sp = wanted.get(key)
            if sp is None and key not in removed and (key in self._static_seen or diff.errors):
                continue  # a restored pod whose file may be the broken one: a bad edit never stops a pod
            if sp is None or annotations.get(STATIC_HASH_ANNOTATION) != sp.hash:
                grace = float(worker.pod.spec.termination_grace_period_seconds)
                task = self.manager.terminate(worker, grace, remove=True)
                if sp is not None:
                    replacing.append(task)
        if replacing:
            await asyncio.gather(*replacing)
        for key, sp in self.static.pods.items():
            current = self.manager.pods.get(key)
            evicted = current is not None and current.reason == "Evicted" and current.finished
            if current is not None and evicted and not self.eviction.conditions:
                del self.manager.pods[key]  # the kubelet leaves it dead (kubernetes#76598); we bring it back
                log.info("static_pod_readmitted", pod="/".join(key))
            elif current is not None:
                continue
            try:
                await self.manager.create_pod(sp.pod.to_dict())
            except Exception as e:  # noqa: BLE001 - one bad static pod never stops the others
                log.error("static_pod_start_failed", pod="/".join(key), path=str(sp.path), error=str(e))

    async def housekeeping(self) -> None:
        """Every housekeepingInterval: static pods, log rotation, QoS weights, the status line."""
        while True:
            await asyncio.sleep(self.config.housekeeping_interval)
            try:
                await self.sync_static_pods()
                await asyncio.to_thread(self._rotate_logs)
                self.manager.update_qos_cgroups(force=True)
                self.notifier.status(self.status_line())
            except Exception:
                log.exception("housekeeping_failed")

    def _rotate_logs(self) -> None:
        for worker in list(self.manager.pods.values()):
            for cw in list(worker.workers.values()):
                try:
                    logs.rotate(cw.log_path)
                except OSError as e:
                    log.warning("log_rotate_failed", path=cw.log_path, error=str(e))

    def request_stop(self) -> None:
        self._stop.set()

    def request_reload(self) -> None:
        """SIGHUP: reload the config file in the background (the loop keeps serving)."""
        task = asyncio.get_running_loop().create_task(self.reload(), name="reload")
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def reload(self) -> ReloadResult:
        """Re-read the config file; apply thresholds, reservations, limits and logging live.

        A file that fails validation changes nothing: the running config and every pod stay.
        Keys that need a restart (address, port, cgroupRoot, stateDir, ...) are reported.
        """
        self.notifier.reloading("reloading")
        try:
            result = await self._reload()
        finally:
            self.notifier.ready(status=self.status_line())
        return result

    async def _reload(self) -> ReloadResult:
        if self.config_path is None:
            return ReloadResult(ok=False, errors=["the agent runs on the embedded defaults: no file to reload"])
        try:
            new = await asyncio.to_thread(load_config, self.config_path)
        except ConfigError as e:
            log.error("config_reload_rejected", path=self.config_path, errors=e.errors)
            return ReloadResult(ok=False, errors=list(e.errors))
        problems = allocatable_for(self.capacity, new).problems
        if problems:
            errors = [f"allocatable.{p}" for p in problems]
            log.error("config_reload_rejected", path=self.config_path, errors=errors)
            return ReloadResult(ok=False, errors=errors)
        try:
            self.auth.reload() if new.authentication == self.config.authentication else None
        except Exception as e:  # noqa: BLE001 - a bad token file keeps the old token and the old config
            log.error("config_reload_rejected", path=self.config_path, errors=[str(e)])
            return ReloadResult(ok=False, errors=[f"authentication.tokenFile: {e}"])
        result = plan(self.config, new)
        self._apply(new)
        log.info("config_reloaded", path=self.config_path, applied=result.applied,
                 restart_required=result.restart_required)
        return result

    def _apply(self, new: Config) -> None:
        """Swap in the new config: thresholds, allocatable, the pods cgroup, logging, intervals."""
        configure_logging(new.logging.level, new.logging.format)
        resources = allocatable_for(self.capacity, new)
        self.allocatable = resources.allocatable
        enforced = resources.enforced_limits
        self.manager.allocatable = dict(self.allocatable)
        self.manager.enforced_allocatable = dict(enforced) if enforced else None
        self.manager.max_pods = new.max_pods
        self.reporter.allocatable = self.allocatable
        self.reporter.config = new
        self.eviction.set_thresholds(new.thresholds, transition_period=new.eviction_pressure_transition_period,
                                     max_pod_grace_period=new.eviction_max_pod_grace_period)
        self.eviction.interval = new.housekeeping_interval
        self.wakeups.enforced_memory = resources.enforced_memory
        if enforced:
            high = self.wakeups.lines[0] if self.driver.version == 2 and self.wakeups.lines else None
            if high is not None and self.wakeups.enforced_memory:
                high = min(high, self.wakeups.enforced_memory)
            self.driver.update(layout.KUBEPODS, layout.kubepods_spec(enforced, memory_high=high))
        if new.static_pod_path != self.config.static_pod_path:
            self.static = StaticPodSource(new.static_pod_path, self.events.node_name) if new.static_pod_path else None
            self._static_seen = set()  # pods of the old directory are no longer wanted
        self.config = new
        self.eviction.observe_now()
        self.wakeups.after_pass(PassResult(conditions=self.eviction.conditions))
        self.eviction.next_interval = self._adaptive_poll(new)  # after the lines moved: what is armed now

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)
        loop.add_signal_handler(signal.SIGHUP, self.request_reload)
        await self.start()
        eviction = asyncio.create_task(self.eviction.run(), name="eviction")
        tasks = [asyncio.create_task(self.housekeeping(), name="housekeeping"), eviction,
                 # pings from the loop: a blocked loop or a dead eviction loop gets us restarted
                 asyncio.create_task(watchdog_loop(self.notifier, healthy=lambda: not eviction.done()),
                                     name="sd-watchdog"),
                 # idles while schedulerURL is unset; reads config, node and port each round (reload-safe)
                 asyncio.create_task(registration_loop(lambda: self.config, self.reporter.node, lambda: self.port),
                                     name="scheduler-registration")]
        try:
            await self._stop.wait()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.shutdown()

    async def shutdown(self) -> None:
        log.info("agent_stopping")
        self.notifier.stopping("stopping; pods keep running for the next agent")
        if self.runner is not None:
            await self.runner.cleanup()
            unlink_unix_socket(self.config.unix_socket)
        self.wakeups.close()
        await self.manager.wait_stopping()
        await self.manager.detach_all()
        log.info("agent_stopped", pods_left_running=len(self.manager.pods))
