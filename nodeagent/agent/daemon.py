"""The composition root: builds every part from the config, wires them, owns the long-lived tasks.

    observe (capacity, cgroup stats, static pod files) -> decide (allocatable, admission, plans)
    -> act (cgroup driver, process runtime, checkpoints, image store) -> report (HTTP API, metrics, systemd)

`build_agent` does the I/O the wiring needs (the state and checkpoint directories, capacity and
node facts, the token file, TLS, the systemd environment, NODEAGENT_EVICTION_WAKEUPS, the OCI
runtime's detection); the image store is opened by `start()`;
`Agent.__init__` only wires; `run()` starts the parts, then every long-lived task through one
GuardedTasks (daemonkit/tasks.py). A reload builds a new config and hands it, with its
allocatable, to each part's `reconfigure`. Shutdown (SIGTERM, SIGINT) stops the API and lets go
of the pods without stopping them: the next agent re-adopts them from the checkpoints.

The systemd watchdog pings only while every component makes progress (daemonkit/progress.py):
- the event loop: the pings are sent from it, so a blocked loop sends none;
- the eviction manager: a pass completed within its bound (eviction/manager.py);
- the pod workers: no step (a container stop, a cgroup kill or removal, a checkpoint write) open
  past its bound (runtime/supervisor.py, pods/worker.py, pods/manager.py);
- the long-lived tasks: none has died.
So a wedged component gets the agent restarted by systemd after WatchdogSec, while the pods,
outside the service's cgroup, keep running and are re-adopted.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import ssl
from dataclasses import dataclass

import structlog
from aiohttp import web

from nodeagent.agent.api.adapter import Backend, reaction_observer
from nodeagent.agent.api.app import create_app
from nodeagent.agent.api.images import add_image_routes
from nodeagent.agent.api.metrics import Metrics
from nodeagent.agent.api.registration import agent_api_url, registration_loop
from nodeagent.agent.api.stats import add_stats_routes
from nodeagent.agent.cgroups.detect import make_driver
from nodeagent.agent.cgroups.driver import CgroupDriver
from nodeagent.agent.cluster_client.objects import ObjectSource
from nodeagent.agent.cluster_client.podsource import PodSync, pod_sync_loop
from nodeagent.agent.cluster_client.sync import control_plane_loop
from nodeagent.agent.config.reload import ReloadResult, plan
from nodeagent.agent.config.settings import Config, load_config
from nodeagent.agent.events import EventRecorder
from nodeagent.agent.eviction.manager import EvictionManager
from nodeagent.agent.eviction.signals import NodeObserver
from nodeagent.agent.eviction.wakeups import MECHANISMS, WAKEUPS_ENV, MemoryWakeups, parse_mechanisms
from nodeagent.agent.images.manager import ImageManager, manager_from_config
from nodeagent.agent.node.allocatable import NodeAllocatable, allocatable_for
from nodeagent.agent.node.capacity import Capacity, discover_capacity
from nodeagent.agent.node.priority import set_own_oom_score_adj, set_own_priority
from nodeagent.agent.node.reporter import NodeReporter
from nodeagent.agent.node.status import read_node_info
from nodeagent.agent.pods.checkpoint import CheckpointStore
from nodeagent.agent.pods.eviction_access import PodEvictionAccess
from nodeagent.agent.pods.manager import PodManager
from nodeagent.agent.pods.static_sync import StaticPodSync
from nodeagent.agent.pods.worker import PodEnv
from nodeagent.agent.runtime.logclock import LogClock
from nodeagent.agent.runtime.oci import select as oci_select
from nodeagent.agent.runtime.oci.runtime import OciRuntime
from nodeagent.agent.stats.sampler import Sampler
from nodeagent.core.clock import Clock, SystemClock
from nodeagent.core.downward import NodeFacts as DownwardFacts
from nodeagent.core.errors import FieldError
from nodeagent.daemonkit import stackdump
from nodeagent.daemonkit.auth import (
    Authenticator,
    bind_unix_socket,
    bound_port,
    check_bind_safety,
    make_ssl_context,
    unlink_unix_socket,
)
from nodeagent.daemonkit.configfile import ConfigError
from nodeagent.daemonkit.heap import freeze_startup_heap, trim_malloc
from nodeagent.daemonkit.logsetup import configure_logging
from nodeagent.daemonkit.progress import ProgressMonitor, Steps
from nodeagent.daemonkit.sdnotify import Notifier, watchdog_loop
from nodeagent.daemonkit.tasks import GuardedTasks

log = structlog.get_logger(__name__)


def oci_runtime_for(config: Config, cgroup_version: int) -> OciRuntime | None:
    """The OCI runtime `ociRuntime` asks for, as this host allows it (runtime/oci/select.py):
    FieldError naming the key when the one named is missing or cannot run here; None for `none`
    or when `auto` finds nothing usable. Logged once (oci_runtime_selected)."""
    hybrid = oci_select.is_hybrid(cgroup_version)
    chosen = oci_select.detect(config.oci_runtime, cgroup_version)
    if chosen is None:
        if config.oci_runtime == "none":
            log.info("oci_runtime_selected", requested="none", runtime=None, hybrid=hybrid)
        else:
            log.warning("oci_runtime_selected", requested=config.oci_runtime, runtime=None, hybrid=hybrid,
                        found=sorted(oci_select.installed_runtimes()),
                        reason="no usable OCI runtime found: containers from images cannot run")
        return None
    name, binary = chosen
    root = oci_select.runtime_root(config.state_dir, name)
    log.info("oci_runtime_selected", requested=config.oci_runtime, runtime=name, binary=binary, root=root,
             hybrid=hybrid)
    return OciRuntime(name, binary, root)


@dataclass(frozen=True)
class NodeFacts:
    """What the factory read about this machine before anything is wired."""

    capacity: Capacity
    allocatable: NodeAllocatable
    name: str
    info: dict[str, str]


def build_agent(config: Config, *, config_path: str | None = None, clock: Clock | None = None,
                driver: CgroupDriver | None = None) -> Agent:
    """Read what the agent needs from the machine and wire it; OSError or ValueError (FieldError
    naming the key) when it cannot run on this config, before anything is started."""
    unsafe = check_bind_safety(config.address, config.authentication, tls=config.tls_cert_file is not None)
    if unsafe:
        raise FieldError("address", unsafe)
    driver = driver or make_driver(config.cgroup_driver, config.cgroup_root)
    os.makedirs(config.state_dir, mode=0o700, exist_ok=True)
    capacity = discover_capacity(config.nodefs_path or config.state_dir, config.max_pods)
    allocatable = allocatable_for(capacity, config)
    if allocatable.problems:
        raise FieldError("allocatable", "; ".join(allocatable.problems))
    version = driver.version
    facts = NodeFacts(capacity, allocatable, config.node_name or socket.gethostname().lower(),
                      read_node_info(f"v{version}", f"cgroupfs-v{version}"))
    return Agent(config, facts, driver=driver, clock=clock or SystemClock(), config_path=config_path,
                 checkpoints=CheckpointStore.open(config.state_dir),  # makes <stateDir>/checkpoints
                 oci=oci_runtime_for(config, version),  # FieldError naming ociRuntime if unusable
                 wakeup_mechanisms=parse_mechanisms(os.environ.get(WAKEUPS_ENV)),  # ValueError if unknown
                 ssl_context=make_ssl_context(config),  # FieldError naming the key if unusable
                 # reads the token file now: fail at start
                 auth=Authenticator.from_config(config, loopback_reads=config.anonymous_loopback_reads),
                 notifier=Notifier.from_env())  # also removes NOTIFY_SOCKET from our environment


class Agent:
    """Every part of the running agent, wired; `run()` until a stop signal."""

    def __init__(self, config: Config, facts: NodeFacts, *, driver: CgroupDriver, clock: Clock,
                 checkpoints: CheckpointStore, auth: Authenticator, ssl_context: ssl.SSLContext | None,
                 notifier: Notifier, config_path: str | None = None,
                 wakeup_mechanisms: frozenset[str] = MECHANISMS, oci: OciRuntime | None = None,
                 images: ImageManager | None = None) -> None:
        """`wakeup_mechanisms`: the kernel notifications eviction may arm (eviction/wakeups.py).
        `oci`: the OCI runtime build_agent chose (None: no image runs). `images`: default, the
        store under imagefsPath (manager_from_config: no I/O until start())."""
        self.config = config
        self.config_path = config_path
        self.facts = facts
        self.allocatable = facts.allocatable
        self.driver = driver
        self.clock = clock
        self.auth = auth
        self.ssl_context = ssl_context
        self.notifier = notifier
        self.tasks = GuardedTasks("agent")
        self.steps = Steps(clock)
        allocatable = facts.allocatable
        enforced_memory = allocatable.enforced_memory
        # ---- act: pods, eviction ----
        self.events = EventRecorder(clock, facts.name)
        self.oci = oci
        self.images = images or manager_from_config(config, self.events, clock)
        # the server's ConfigMaps and Secrets for volumes, while kubeconfig is set (read each time: reload-safe)
        self.objects = ObjectSource(lambda: self.config)
        env = PodEnv(driver=driver, state_dir=config.state_dir, memory_capacity=facts.capacity.memory,
                     clock=clock, steps=self.steps, events=self.events, node_facts=self.downward_facts,
                     images=self.images, oci=oci, objects=self.objects.get,
                     volume_refresh_period=config.volume_refresh_period)
        self.pods = PodManager(env, checkpoints, allocatable=allocatable.allocatable,
                               enforced_allocatable=allocatable.enforced_limits, max_pods=config.max_pods)
        self.log_clock = LogClock(clock)  # per-line log times (kubectl logs --timestamps/--since)
        self._log_sync_queued = False
        self.observer = NodeObserver(driver, config.nodefs_path or config.state_dir,
                                     config.imagefs_path or config.nodefs_path or config.state_dir,
                                     enforced_memory, clock.now)
        eviction_access = PodEvictionAccess(self.pods)
        self.eviction = EvictionManager(
            config.thresholds, self.observer.observe, eviction_access, self.events, clock,
            transition_period=config.eviction_pressure_transition_period,
            max_pod_grace_period=config.eviction_max_pod_grace_period,
            interval=config.housekeeping_interval,
            images=self.images, dedicated_imagefs=lambda: self.observer.dedicated_imagefs,
            local_storage=eviction_access.local_storage, observe_memory=self.observer.observe_memory,
        )
        self.pods.extra_admit = self.eviction.admit
        self.wakeups = MemoryWakeups(driver, self.eviction, enforced_memory, self.observer.memory,
                                     mechanisms=wakeup_mechanisms)
        self.eviction.on_pass.append(self.wakeups.after_pass)
        self.pods.kubepods_memory_high = lambda: self.wakeups.memory_high
        self.static = StaticPodSync(self.pods, facts.name, config.static_pod_path,
                                    pressure=lambda: self.eviction.conditions)
        # ---- report: node status, API, metrics, systemd ----
        self.reporter = NodeReporter(name=facts.name, capacity=facts.capacity, allocatable=allocatable,
                                     driver=driver, clock=clock, node_info=facts.info,
                                     pressure=lambda: self.eviction.conditions, images=self.images.node_images)
        self.sampler = Sampler(driver, self.pods.stats_targets, clock, node_name=facts.name,
                               nodefs_path=config.nodefs_path or config.state_dir, settings=config.stats)
        self.backend = Backend(pods=self.pods, reporter=self.reporter, static=self.static, events=self.events,
                               eviction=self.eviction, reload=self.reload)
        self.metrics = Metrics(self.backend)
        self.eviction.on_pass.append(reaction_observer(self.metrics, clock))
        self.progress = ProgressMonitor()
        self.progress.add("tasks", self.tasks.problems)
        self.progress.add("eviction", self.eviction.stalled)
        self.progress.add("pods", self.steps.overdue)
        self.runner: web.AppRunner | None = None
        self._stop = asyncio.Event()

    def downward_facts(self) -> DownwardFacts:
        """What a pod's env reads of the node (valueFrom fieldRef / resourceFieldRef), at its plan:
        its name, its InternalIPs (also the pods' IPs: host processes share the node's network)
        and the allocatable a container without a limit reads."""
        ips = tuple(a["address"] for a in self.reporter.addresses if a.get("type") == "InternalIP")
        return DownwardFacts(node_name=self.facts.name, host_ips=ips, pod_ips=ips,
                             allocatable=self.allocatable.allocatable)

    def status_line(self) -> str:
        """One line for `systemctl status` (sd_notify STATUS=)."""
        running = sum(1 for w in self.pods.pods.values() if w.running)
        conditions = ", ".join(self.eviction.conditions) or "no pressure"
        api = f"{self.config.address}:{self.port}"
        return f"{len(self.pods.pods)} pods ({running} running); {conditions}; API on {api}"

    async def start(self) -> None:
        """Re-adopt the pods, arm the eviction wake-ups, start the static pods, open the API."""
        nice = set_own_priority(self.config.nice)  # this (loop) thread runs every eviction pass
        adj = set_own_oom_score_adj()
        self.notifier.status("restoring pods from checkpoints")
        self.pods.setup_cgroups()
        await self.images.start()  # opens the store under imagefsPath (empties its tmp/, sweeps leftovers)
        await self.reporter.start()  # the node's addresses, before any pod's env is resolved
        for problem in await self.pods.restore():
            log.error("restore_problem", problem=problem)
        self.eviction.observe_now()
        await self.wakeups.start()
        await self.static.sync()
        self.runner = web.AppRunner(self.build_app(), access_log=None)
        await self.runner.setup()
        await web.TCPSite(self.runner, self.config.address, self.config.port, ssl_context=self.ssl_context).start()
        if self.config.unix_socket:
            await web.SockSite(self.runner, bind_unix_socket(self.config.unix_socket)).start()
        auth = self.config.authentication
        log.info("agent_ready", address=self.config.address, port=self.port, driver=f"v{self.driver.version}",
                 pods=len(self.pods.pods), images=len(self.images.images()),
                 oci_runtime=self.oci.name if self.oci else None, oom_score_adj=adj, nice=nice,
                 unix_socket=self.config.unix_socket,
                 tls=self.ssl_context is not None,
                 authentication=auth if isinstance(auth, str) or auth is None else "token/x509",
                 allocatable={k: str(v) for k, v in self.allocatable.allocatable.items()})
        self.notifier.ready(status=self.status_line())  # after restore and with the API listening

    def build_app(self) -> web.Application:
        """The HTTP API: pods and node (api/app.py), resource metrics, images."""
        app = create_app(self.backend, max_body=self.config.max_request_body_bytes, auth=self.auth,
                         metrics=self.metrics)
        add_stats_routes(app, self.sampler)  # /metrics/resource, /stats/summary
        add_image_routes(app, self.images)  # /api/v1/images*: `nodeagent image pull|import|ls|rm`
        return app

    @property
    def port(self) -> int:
        return bound_port(self.runner, self.config.port)

    async def housekeeping(self) -> None:
        """Every housekeepingInterval: static pods, log rotation, QoS weights, the status line,
        malloc's free pages back to the system."""
        while True:
            await asyncio.sleep(self.config.housekeeping_interval)
            try:
                await self.static.sync()
                await asyncio.to_thread(self.pods.rotate_logs)
                self._sync_log_clock()  # a directory not there at the last change
                self.pods.update_qos_cgroups(force=True)
                self.notifier.status(self.status_line())
                trim_malloc()  # what a burst of requests freed (0.01-0.2 ms; bench/README.md)
            except Exception:
                log.exception("housekeeping_failed")

    def _sync_log_clock(self) -> None:
        self._log_sync_queued = False
        self.log_clock.sync(self.pods.live_log_dirs())

    def _sync_log_clock_soon(self) -> None:
        """A pod changed: sync the log clock's watches once, after this pass of the loop. Every
        sync walks every pod's containers, and a burst of 100 creates makes hundreds of changes
        in a few passes (py-spy of pod_start_bench's burst: 6.5% of the loop's samples)."""
        if not self._log_sync_queued:
            self._log_sync_queued = True
            asyncio.get_running_loop().call_soon(self._sync_log_clock)

    def request_stop(self) -> None:
        self._stop.set()

    def request_reload(self) -> None:
        """SIGHUP: reload the config file in the background (the loop keeps serving)."""
        self.tasks.start(self.reload(), name="reload")

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
        allocatable = allocatable_for(self.facts.capacity, new)
        if allocatable.problems:
            errors = [f"allocatable.{p}" for p in allocatable.problems]
            log.error("config_reload_rejected", path=self.config_path, errors=errors)
            return ReloadResult(ok=False, errors=errors)
        try:
            self.auth.reload() if new.authentication == self.config.authentication else None
        except Exception as e:  # noqa: BLE001 - a bad token file keeps the old token and the old config
            log.error("config_reload_rejected", path=self.config_path, errors=[str(e)])
            return ReloadResult(ok=False, errors=[f"authentication.tokenFile: {e}"])
        result = plan(self.config, new)
        self.reconfigure(new, allocatable)
        log.info("config_reloaded", path=self.config_path, applied=result.applied,
                 restart_required=result.restart_required)
        return result

    def reconfigure(self, new: Config, allocatable: NodeAllocatable) -> None:
        """Hand the new config to every part, in the order their values depend on each other:
        the eviction manager's thresholds and a fresh observation before the wake-up lines move,
        the lines (and kubepods' memory.high) before the pods cgroup's limits are rewritten."""
        configure_logging(new.logging.level, new.logging.format)
        self.reporter.reconfigure(new, allocatable)
        self.observer.reconfigure(new, allocatable)
        self.eviction.reconfigure(new)
        self.eviction.observe_now()
        self.wakeups.reconfigure(new, allocatable)
        self.pods.reconfigure(new, allocatable)
        self.static.reconfigure(new, allocatable)
        self.sampler.reconfigure(new.stats)
        self.images.reconfigure(new)
        self.config, self.allocatable = new, allocatable

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)
        loop.add_signal_handler(signal.SIGHUP, self.request_reload)
        stackdump.install(loop)  # SIGUSR1: where every thread and task is
        await self.start()
        frozen = freeze_startup_heap()  # full collections would walk start-up's heap: 30-54 ms loop stalls
        trimmed = trim_malloc()  # start-up's freed pages back to the system (~1.3 MiB)
        log.debug("startup_heap_frozen", objects=frozen, trimmed=trimmed)
        self.tasks.start(self.eviction.run(), name="eviction", forever=True)
        self.tasks.start(self.housekeeping(), name="housekeeping", forever=True)
        self.log_clock.start()
        self.pods.listeners.append(self._sync_log_clock_soon)
        self._sync_log_clock()
        self.tasks.start(self.log_clock.run(), name="log-clock", forever=True)
        self.tasks.start(self.sampler.run(), name="stats", forever=True)
        self.tasks.start(self.images.gc_loop(), name="image-gc", forever=True)  # every 5 min, as the kubelet
        # pings from the loop while every component makes progress (see the module docstring)
        self.tasks.start(watchdog_loop(self.notifier, healthy=self.progress.healthy), name="sd-watchdog")
        # idles while schedulerURL is unset; reads config, node and port each round (reload-safe)
        self.tasks.start(registration_loop(lambda: self.config, self.reporter.node, lambda: self.port),
                         name="scheduler-registration", forever=True)
        # idles while kubeconfig is unset: the Node, its status and its Lease on `nodeagent server run`
        self.tasks.start(control_plane_loop(lambda: self.config, self.reporter.node, lambda: self.port,
                                            agent_api_url), name="control-plane-sync", forever=True)
        # idles while kubeconfig is unset: runs the pods the server binds here, writes their status
        pod_sync = PodSync(self.pods, self.facts.name, clock=self.clock, events=self.events)
        self.tasks.start(pod_sync_loop(lambda: self.config, pod_sync), name="control-plane-pods", forever=True)
        try:
            await self._stop.wait()
        finally:
            await self.tasks.close()
            await self.shutdown()

    async def shutdown(self) -> None:
        log.info("agent_stopping")
        self.notifier.stopping("stopping; pods keep running for the next agent")
        if self.runner is not None:
            await self.runner.cleanup()
            unlink_unix_socket(self.config.unix_socket)
        self.wakeups.close()
        self.log_clock.close()
        await self.pods.detach_all()  # pods being stopped are not waited for: the next agent carries them on
        await self.objects.close()
        log.info("agent_stopped", pods_left_running=len(self.pods.pods))
