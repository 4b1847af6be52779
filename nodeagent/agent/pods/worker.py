"""PodWorker: one admitted pod on this node: its cgroups, its container workers, its status.

The worker owns the pod's cgroup subtree (`kubepods/<qos>/pod<uid>/<container>`) and one
ContainerWorker per container (init containers included), both made from the pod's plan
(plan.py): it creates what the plan says and derives nothing from the manifest itself. It reports
every container state change to `on_change`, so the manager can checkpoint it, and answers the
Kubernetes-shaped status of the pod.

Around the processes, as the kubelet's pod worker:
- Order (lifecycle/init_sequence.py): init containers run one after the other to completion,
  sidecars (restartPolicy: Always init containers) are started in order and kept running (the
  next one waits until the sidecar has started: its startup probe, and its postStart hook), then
  every app container starts. A regular init container that fails is retried by its supervisor
  with back-off, or fails the pod under restartPolicy Never. Sidecars are stopped once the app
  containers are done. Decisions are re-taken (once per loop turn) whenever a container or a
  probe result moves.
- Probes (probes/pod_probes.py): liveness, readiness and startup runners for every app container
  and sidecar, on the event loop; readiness and startup give each container's `ready` and
  `started` and the pod's Initialized / Ready / ContainersReady conditions; a liveness (or
  startup) failure restarts the container: preStop, SIGTERM, the grace period (the probe's
  terminationGracePeriodSeconds or the pod's), SIGKILL; its supervisor then applies the restart
  policy and back-off to that exit. Events (Unhealthy, Killing, ...) go to the EventRecorder.
- Hooks (lifecycle/hooks.py): postStart after every start of a container (a failure is the
  event FailedPostStartHook and kills the container as a liveness failure does); preStop before
  the SIGTERM of any stop, counting against the grace period (FailedPreStopHook on failure).
- Termination messages (lifecycle/termination_message.py): read when an exit is seen and shown
  as state.terminated.message / lastState.terminated.message (and kept in the checkpoint).
A postStart hook is not run again for a container adopted after an agent restart; probes start
again for adopted containers, their first runs spread over one period.

A container that names an image (plan.ContainerPlan.from_image) runs by the OCI runtime
(image_container.py): its ContainerWorker gets the image's `prepare` step and the runtime's
spawner; the pod gets a sandbox cgroup and process; a deletion removes the bundles, releases
the image leases and stops the sandbox before the cgroups go. Without a runtime such a container
waits (CreateContainerError) and never runs as a host process.

Restart: containers with a record (or a process found in their cgroup) are resumed, the others
are left to the order above, so an init container whose success is recorded is not run again.

Progress, for the watchdog (daemonkit/progress.py): removing the pod's cgroups after a stop is a
step bounded by REMOVE_STEP_S; the containers' own steps are the runtime's (supervisor.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field, replace
from typing import Any

import structlog

from nodeagent.agent.cgroups.driver import CgroupDriver, CgroupSpec
from nodeagent.agent.events import EventRecorder
from nodeagent.agent.eviction.evaluate import EVICTION_REASON
from nodeagent.agent.images.manager import ImageManager
from nodeagent.agent.lifecycle.hooks import HookRunner, HookTarget
from nodeagent.agent.lifecycle.init_sequence import InitSteps, next_steps, waiting_for
from nodeagent.agent.lifecycle.phase import pod_phase
from nodeagent.agent.lifecycle.termination_message import termination_message
from nodeagent.agent.node.procfs import is_same_process
from nodeagent.agent.pods.checkpoint import ContainerCheckpoint, Deletion, PodCheckpoint
from nodeagent.agent.pods.image_container import REASON_CREATE_ERROR, ImageContainer, off_loop
from nodeagent.agent.pods.plan import ContainerPlan, PodPlan, plan_pod
from nodeagent.agent.pods.resize import ResizeState
from nodeagent.agent.pods.volume_plan import plan_volumes
from nodeagent.agent.pods.volume_refresh import DEFAULT_PERIOD_S as VOLUME_REFRESH_PERIOD_S
from nodeagent.agent.pods.volume_refresh import refresh_loop
from nodeagent.agent.pods.volume_setup import ObjectGetter, PodVolumeHost
from nodeagent.agent.probes.exec_probe import ExecTarget, runtime_knows
from nodeagent.agent.probes.http_probe import HttpProber
from nodeagent.agent.probes.pod_probes import PodProbes, ProbeContext
from nodeagent.agent.probes.readiness import Condition
from nodeagent.agent.probes.state import Event
from nodeagent.agent.runtime import logs
from nodeagent.agent.runtime.adoption import find_container_process
from nodeagent.agent.runtime.backoff import CrashBackoff
from nodeagent.agent.runtime.cgroup_handle import DriverCgroup
from nodeagent.agent.runtime.oci.runtime import OciRuntime, cgroup_mounts, container_id, remove_runtime_cgroups
from nodeagent.agent.runtime.oci.sandbox import Sandbox, sandbox_cgroup
from nodeagent.agent.runtime.spawn import clamp_oom_score_adj
from nodeagent.agent.runtime.state import ContainerStatus, Running, Terminated, Waiting
from nodeagent.agent.runtime.supervisor import ContainerWorker
from nodeagent.core.clock import Clock
from nodeagent.core.downward import REASON_CONFIG_ERROR, NodeFacts
from nodeagent.core.model import Pod
from nodeagent.core.timefmt import parse_rfc3339, rfc3339
from nodeagent.core.waits import wait_for
from nodeagent.core.wellknown import DISRUPTION_TARGET, TERMINATION_BY_KUBELET
from nodeagent.daemonkit.progress import Steps
from nodeagent.daemonkit.tasks import GuardedTasks

log = structlog.get_logger(__name__)


REMOVE_STEP_S = 30.0  # kill + rmdir of a stopped pod's cgroups: each bounded by the driver's 5 s timeouts
POST_START_KNOWN_S = 5.0  # how long a postStart exec waits for the runtime to know its container
REASON_POD_INITIALIZING = "PodInitializing"  # a container not created yet in a pod with init containers
REASON_CREATING = "ContainerCreating"
REASON_FAILED = "Failed"  # the event of a container that cannot be configured
# the controllers whose hierarchies the driver may manage: any other cgroup mount is foreign to it
FOREIGN_CHECK_CONTROLLERS = ("memory", "cpu", "cpuacct", "pids", "cpuset", "blkio", "io", "devices", "freezer",
                             "hugetlb")


@dataclass(frozen=True)
class PodEnv:
    """What every pod worker needs from the node, fixed for the agent's lifetime."""

    driver: CgroupDriver
    state_dir: str
    memory_capacity: int
    clock: Clock
    backoff_factory: Callable[[], CrashBackoff] | None = None
    clamp_oom_score_adj: Callable[[int], int] = clamp_oom_score_adj
    steps: Steps | None = None  # where workers report the steps the watchdog bounds (None: nowhere)
    events: EventRecorder | None = None  # where probes and hooks record their events (None: logged only)
    node_facts: Callable[[], NodeFacts] = NodeFacts  # what the downward API reads of the node, at each plan
    http: HttpProber = field(default_factory=HttpProber)  # httpGet probes and hooks
    images: ImageManager | None = None  # the image store: image containers pull and lease through it
    oci: OciRuntime | None = None  # the OCI runtime image containers run with (None: none runs)
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep  # an image container's retry waits
    objects: ObjectGetter | None = None  # ConfigMaps and Secrets for volumes: the server's, when joined to one
    volume_refresh_period: float = VOLUME_REFRESH_PERIOD_S  # their files rewritten this often (volume_refresh.py)

    def plan(self, pod: Pod) -> PodPlan:
        """The pod's plan on this node (see plan.py)."""
        return plan_pod(pod, state_dir=self.state_dir, memory_capacity=self.memory_capacity,
                        clamp_oom_score_adj=self.clamp_oom_score_adj, node=self.node_facts())


def terminated_from_dict(data: Any) -> Terminated | None:
    """Inverse of Terminated.to_dict() (as stored in a checkpoint); None if absent or malformed."""
    t = data.get("terminated") if isinstance(data, dict) else None
    if not isinstance(t, dict):
        return None
    try:
        sig = t.get("signal")
        return Terminated(exit_code=int(t.get("exitCode", 0)), reason=str(t.get("reason", "")),
                          started_at=parse_rfc3339(t.get("startedAt")), finished_at=parse_rfc3339(t.get("finishedAt")),
                          signal=int(sig) if sig is not None else None, message=str(t.get("message", "")),
                          container_id=str(t.get("containerID", "")))
    except (TypeError, ValueError):
        return None


def _container_record(name: str, w: ContainerWorker, clock: Clock,
                      shown: Callable[[Terminated], Terminated] = lambda t: t) -> ContainerCheckpoint:
    """pid + start time while running; the exit the restart policy decides on under "current" once
    it exited (done, or waiting out its back-off), so a completed container is not run again and a
    crash-looping one keeps its count and back-off after an agent restart. `shown`: the exit as
    reported (with its termination message)."""
    st = w.status
    saved: dict[str, Any] = dict(shown(st.last_state).to_dict()) if st.last_state else {}
    current = w.last_exit if w.pid is None else None
    if current is None and w.pid is None and isinstance(st.state, Terminated):
        current = st.state
    if current is not None:
        saved["current"] = shown(current).to_dict()
    snap = w.backoff.snapshot()  # (delay, last restart on the monotonic scale) -> wall time, which a file keeps
    backoff = (snap[0], clock.wall() - (clock.now() - snap[1])) if snap else None
    return ContainerCheckpoint(name=name, pid=w.pid, start_time=w.start_time,
                               restart_count=st.restart_count, last_state=saved, backoff=backoff)


def field_path(c: ContainerPlan) -> str:
    """involvedObject.fieldPath of a container's events."""
    return f"spec.{'initContainers' if c.init else 'containers'}{{{c.name}}}"


class PodWorker:
    def __init__(self, plan: PodPlan, env: PodEnv, on_change: Callable[[PodWorker], None]) -> None:
        self.plan = plan
        self.env = env
        self._on_change = on_change
        self.workers: dict[str, ContainerWorker] = {}  # every container created so far, init containers too
        self._tasks: dict[str, asyncio.Task[Terminated | None]] = {}
        self._spare: dict[str, ContainerWorker] = {}  # resumed from a record with nothing to adopt: started in turn
        self._guard = GuardedTasks(f"pod {plan.pod.key}")
        self._side: set[asyncio.Task[Any]] = set()  # hooks and probe-driven kills in flight
        self.start_time: float = env.clock.wall()
        self.deletion_time: float | None = None
        self.reason: str | None = None
        self.message: str | None = None
        self.terminal = False  # stopped for good (deleted or evicted): containers won't restart
        self.deletion: Deletion | None = None  # the recorded termination, carried on after a restart
        # the termination (with its reason) as the journal has it: an eviction is shown only once
        # it is on disk, so what was reported survives a crash (the kill itself never waits for it)
        self.recorded_deletion: Deletion | None = None
        self.started = False
        self.probes: PodProbes | None = None
        self.hooks = HookRunner(env.http, clock=env.clock)
        self.conditions: list[Condition] = []
        self._hooked: dict[str, str] = {}  # container -> the container ID its postStart ran for (or adopted)
        self._hook_running: set[str] = set()
        self._killing: set[str] = set()
        self._stopping: set[str] = set()  # sidecars stopped by the sequence
        self._messages: dict[str, dict[str, str]] = {}  # container -> {container ID: termination message}
        self._manifest: tuple[Pod, dict[str, Any]] | None = None  # the pod's dict, written in every record
        self._exec_targets: dict[str, ExecTarget] = {}
        self._reported: set[str] = set()  # containers whose config error was recorded as an event
        self._restoring = False
        self._kicked = False
        self._detached = False
        self._init_failed: str | None = None
        self.resize = ResizeState()  # in-place resizes (resize.py); `plan` is the allocation
        self.image_containers: dict[str, ImageContainer] = {}  # containers run from their image (the OCI runtime)
        self.sandbox: Sandbox | None = None  # the pod's sandbox process, once an image container needs it
        self.volume_host: PodVolumeHost | None = None  # the pod's volumes, once an image container needs them
        self._log = log.bind(pod=plan.pod.key, uid=plan.uid)

    @property
    def pod(self) -> Pod:
        return self.plan.pod

    # ---- lifecycle ----
    def create_cgroups(self) -> None:
        """Pod cgroup, then one child per container (init containers too), each with its limits (idempotent)."""
        driver = self.env.driver  # a resize not carried through yet: the looser of both (resize.py)
        driver.create(self.plan.cgroup_path, self.resize.pod_cgroup_spec(self.plan))
        for c in self.plan.all_containers:
            driver.create(c.cgroup_path, self.resize.container_cgroup_spec(c))
        if any(c.from_image for c in self.plan.all_containers):  # the sandbox and the runtime's exec sessions
            driver.create(sandbox_cgroup(self.plan.cgroup_path), CgroupSpec())

    def _container_worker(self, c: ContainerPlan) -> ContainerWorker:
        logs.prepare_log_dir(c.config.log_dir)
        backoff = self.env.backoff_factory() if self.env.backoff_factory else None
        worker: ContainerWorker | None = None

        def changed(status: ContainerStatus) -> None:
            if worker is not None:
                self._container_changed(c, worker, status)

        extra: dict[str, Any] = {}
        config = c.config
        if c.from_image:  # never a host process: the OCI runtime runs its bundle, or nothing runs
            image = self._image_container(c)
            extra = {"spawner": image.spawner(), "prepare": image.prepare} if image else {"prepare": self._no_runtime}
            if image is not None and image.oci.hands_over_console:
                config = replace(config, runtime_console=True)
        worker = ContainerWorker(config, DriverCgroup(self.env.driver, c.cgroup_path), clock=self.env.clock,
                                 backoff=backoff, on_change=changed, steps=self.env.steps, **extra)
        return worker

    def _image_container(self, c: ContainerPlan) -> ImageContainer | None:
        """The container's image side (image_container.py); None when the agent has no OCI runtime."""
        env = self.env
        if env.oci is None or env.images is None:
            return None
        if self.sandbox is None:
            path = sandbox_cgroup(self.plan.cgroup_path)
            self.sandbox = Sandbox(os.path.join(self.plan.log_dir, "oci"), lambda: env.driver.procs_files(path))
        if self.volume_host is None:
            volumes = plan_volumes(self.plan.pod, self.plan.log_dir, self.plan.cgroup_spec.memory_max)
            self.volume_host = PodVolumeHost(self.plan.pod, volumes, facts=env.node_facts)
            if self.volume_host.refreshable and env.objects is not None:
                self._side_task(refresh_loop(self.volume_host, env.objects, env.volume_refresh_period),
                                "refresh volumes")
        image = self.image_containers.get(c.name)
        if image is None:
            image = ImageContainer(self.plan, c, images=env.images, oci=env.oci, driver=env.driver,
                                   sandbox=self.sandbox, sleep=env.sleep, volumes=self.volume_host,
                                   objects=env.objects,
                                   on_event=lambda reason, message: self._record_event(
                                       c.name, Event(reason, message)))
            self.image_containers[c.name] = image
        return image

    async def _no_runtime(self, waiting: Callable[[Waiting], None]) -> None:
        """An image container on an agent without an OCI runtime (restored after the config
        changed): it waits, named, and never runs as a host process."""
        waiting(Waiting(REASON_CREATE_ERROR, "this node has no OCI runtime (ociRuntime) to run images with"))
        await asyncio.Event().wait()

    async def remove_image_containers(self) -> None:
        """After the containers stopped for good: each bundle removed (runc delete, unmount), its
        image lease released, then the sandbox; blocking parts off the loop."""
        for image in self.image_containers.values():
            try:
                await off_loop(image.cleanup)
            except OSError as e:
                self._log.warning("image_container_cleanup_failed", container=image.c.name, error=str(e))
            await image.release()
        if self.sandbox is not None:
            await off_loop(self.sandbox.stop)
        if self.volume_host is not None:
            await off_loop(self.volume_host.teardown)
        await off_loop(self._remove_runtime_cgroups)

    def _remove_runtime_cgroups(self) -> None:
        """What runc made of the pod's path in the hierarchies the driver does not manage (v1)."""
        driver = self.env.driver
        if driver.version != 1:  # v2: one hierarchy, the driver's own
            return
        managed = {driver.hierarchy(c) for c in FOREIGN_CHECK_CONTROLLERS} - {None}
        foreign = [m for m in cgroup_mounts() if m not in managed]
        if not foreign:
            return
        paths = [p for image in self.image_containers.values() for p in (image.cgroup, image.c.cgroup_path)]
        parts = self.plan.cgroup_path.split("/")
        paths += ["/".join(parts[:i]) for i in range(len(parts), 0, -1)]  # the pod, its QoS tier, kubepods
        remove_runtime_cgroups(foreign, driver.root, paths)

    def start(self, record: PodCheckpoint | None = None, shims: dict[str, int] | None = None) -> None:
        """Create cgroups, re-adopt what a checkpoint record names, start the probes and whatever
        container is due (init containers first).

        From a record, a container whose recorded process is gone is looked for in its cgroup
        (and among `shims`, adoption.scan_shims) before anything is started: it may have been
        spawned after the last record. A recorded deletion holds every start back."""
        self.started = True
        if record is not None:
            self.resize.restore(record.resize, self.plan)
        self.create_cgroups()
        if record is not None and record.deletion is not None:
            self.deletion = self.recorded_deletion = record.deletion
            self.terminal = True
            self.reason, self.message = record.deletion.reason, record.deletion.message
        self.probes = PodProbes(
            self.pod, ProbeContext(self.env.http, exec_target=self.exec_target),
            status=self._status_of, deleting=lambda: self.terminal, on_event=self._probe_event,
            on_kill=self._probe_kill, on_change=self._kick, clock=self.env.clock,
            terminal=lambda: self.terminal and not self.running,
            spread=random.Random() if record is not None else None)
        if record is not None:
            self._restoring = True
            try:
                for c in self.plan.all_containers:
                    if c.config_error is not None:
                        continue
                    worker = self._container_worker(c)
                    if self.terminal:
                        worker.hold()
                    saved = record.container(c.name) or ContainerCheckpoint(c.name)
                    if self._resume(worker, c, saved, shims or {}):
                        self.workers[c.name] = worker
                    elif not self.terminal:
                        self._spare[c.name] = worker
            finally:
                self._restoring = False
            for name, worker in self.workers.items():
                # a bug in one container's loop is logged by the guard and must not take the agent down
                self._tasks[name] = self._guard.start(self._run(worker), name=f"container:{self.pod.key}/{name}")
        self.probes.start(lambda coro, name: self._guard.start(coro, name=name))
        self._advance()

    def _resume(self, worker: ContainerWorker, c: ContainerPlan, saved: ContainerCheckpoint,
                shims: dict[str, int]) -> bool:
        """Adopt the container's process (recorded, or found in its cgroup) or resume its last exit;
        False when there is nothing to resume (it never ran: it starts in its turn)."""
        if saved.backoff is not None:
            delay, at_wall = saved.backoff
            clock = self.env.clock
            worker.backoff.restore((delay, clock.now() - max(0.0, clock.wall() - at_wall)))
        last = terminated_from_dict(saved.last_state)
        current = terminated_from_dict(saved.last_state.get("current"))
        recorded = saved.pid is not None and saved.start_time is not None
        if recorded and worker.adopt(int(saved.pid or 0), int(saved.start_time or 0),
                                     restart_count=saved.restart_count, last_state=last, probe=True):
            return True
        driver = self.env.driver
        try:
            found = (None if c.from_image  # its monitor is not in its cgroup: not looked for there
                     else find_container_process(driver.procs_files(c.cgroup_path), driver.pids(c.cgroup_path), shims))
        except OSError:
            found = None
        if c.from_image and self.env.oci is not None and self.env.oci.has_state(container_id(self.plan.uid, c.name)):
            # spawned after the last record, or its monitor is gone: its next start deletes it (runc
            # delete --force kills what is left), so it is never left running unsupervised
            self._log.warning("image_container_not_adopted", container=c.name,
                              reason="no recorded monitor process alive; the container is deleted at its next start")
        ran_before = saved.pid is not None or current is not None
        if found is not None:  # spawned after the last record: adopt it, never start it again
            self._log.info("container_found_in_cgroup", container=c.name, pid=found[0])
            count = saved.restart_count + (1 if ran_before else 0)
            worker.adopt(found[0], found[1], restart_count=count, last_state=current or last)
            return True
        if saved.pid is not None and saved.start_time is not None:
            worker.adopt(int(saved.pid), int(saved.start_time), restart_count=saved.restart_count,
                         last_state=last)  # gone: recorded as an unknown exit, the policy decides
            return True
        if current is not None:  # it had exited: the restart policy decides again
            worker.restore_exit(current, restart_count=saved.restart_count, last_state=last)
            return True
        return False

    async def _run(self, worker: ContainerWorker) -> Terminated | None:
        result = await worker.run()
        self._on_change(self)
        self._kick()
        return result

    # ---- the sequence: what to start or stop next ----
    def _kick(self) -> None:
        """Something moved (a container, a probe result, a hook): decide again, once, soon."""
        if self._kicked:
            return
        self._kicked = True
        try:
            asyncio.get_running_loop().call_soon(self._advance)
        except RuntimeError:  # no loop (a test building a worker by hand): decide now
            self._advance()

    def _steps(self) -> InitSteps:
        statuses = self._statuses()
        return next_steps(self.pod.spec, statuses, {name: self._sequence_started(name) for name in statuses})

    def _advance(self) -> None:
        self._kicked = False
        if not self.started or self._detached:
            return
        self._refresh_conditions()
        if self.terminal:
            return
        statuses = self._statuses()
        started = {name: self._sequence_started(name) for name in statuses}
        steps = next_steps(self.pod.spec, statuses, started)
        if steps.failed is not None and self._init_failed is None:
            self._init_failed = steps.failed
            self._log.info("init_container_failed", container=steps.failed)
            for init in reversed(self.plan.init_containers):  # the pod has failed: its sidecars stop
                if init.sidecar:
                    self._stop_sidecar(init)
        for name in steps.start:
            due = self.plan.any_container(name)
            if due is not None and name not in self.workers:
                self._start_container(due)
        waited = waiting_for(self.pod.spec, statuses, started)
        for c in self.plan.all_containers:  # due but cannot be configured: said once, as the kubelet's event
            if (c.config_error is not None and c.name not in self._reported
                    and (c.name == waited if c.init else steps.initialized)):
                self._reported.add(c.name)
                self._log.warning("container_config_error", container=c.name, error=c.config_error)
                self._record_event(c.name, Event(REASON_FAILED, f"Error: {c.config_error}"))
        for name in steps.stop:
            sidecar = self.plan.any_container(name)
            if sidecar is not None:
                self._stop_sidecar(sidecar)

    def _start_container(self, c: ContainerPlan) -> None:
        worker = self._spare.pop(c.name, None) or self._container_worker(c)
        self.workers[c.name] = worker
        self._tasks[c.name] = self._guard.start(self._run(worker), name=f"container:{self.pod.key}/{c.name}")
        self._log.info("container_due", container=c.name, init=c.init)

    def _stop_sidecar(self, c: ContainerPlan) -> None:
        w = self.workers.get(c.name)
        if w is None or c.name in self._stopping or isinstance(w.status.state, Terminated):
            return
        self._stopping.add(c.name)
        self._side_task(self._stop_one(c, float(self.pod.spec.termination_grace_period_seconds)),
                        f"stop sidecar {c.name}")

    def _side_task(self, coro: Coroutine[Any, Any, Any], what: str) -> None:
        task = self._guard.start(coro, name=f"pod {self.pod.key}: {what}")
        self._side.add(task)
        task.add_done_callback(self._side.discard)

    # ---- a container moved ----
    def _container_changed(self, c: ContainerPlan, worker: ContainerWorker, status: ContainerStatus) -> None:
        state = status.state
        if isinstance(state, Terminated) and not self._restoring:
            self._note_exit(c, worker, status)
        if isinstance(state, Running) and status.container_id and self._hooked.get(c.name) != status.container_id:
            self._hooked[c.name] = status.container_id
            if not self._restoring:  # the kubelet's event for each run (kuberuntime startContainer)
                self._record_event(c.name, Event("Started", f"Started container {c.name}", "Normal"))
            lifecycle = c.spec.lifecycle
            if not self._restoring and lifecycle is not None and lifecycle.post_start is not None:
                self._hook_running.add(c.name)
                self._side_task(self._post_start(c, status.container_id), f"postStart {c.name}")
        if self.probes is not None:
            self.probes.container_changed(c.name)
        self._on_change(self)
        self._kick()

    def _note_exit(self, c: ContainerPlan, worker: ContainerWorker, status: ContainerStatus) -> None:
        """The termination message of an exit just seen (read once, kept while it is shown)."""
        state = status.state
        if not isinstance(state, Terminated) or not state.container_id:
            return
        known = self._messages.get(c.name, {})
        if state.container_id in known:
            return
        try:
            spec = c.spec.model_copy(update={"termination_message_path": ""}) if c.from_image else c.spec
            message = termination_message(spec, state, log_path=worker.log_path,  # an image's file is not the host's
                                          run_as_user=c.config.launch.run_as_user)
        except OSError as e:  # the log's tail could not be read
            self._log.warning("termination_message_failed", container=c.name, error=str(e))
            message = state.message
        keep = {status.last_state.container_id} if status.last_state is not None else set()
        self._messages[c.name] = {k: v for k, v in known.items() if k in keep} | {state.container_id: message}

    def _shown_exit(self, name: str) -> Callable[[Terminated], Terminated]:
        known = self._messages.get(name, {})

        def shown(t: Terminated) -> Terminated:
            message = known.get(t.container_id) if t.container_id else None
            return t if message is None or message == t.message else replace(t, message=message)

        return shown

    def _shown(self, name: str, st: ContainerStatus) -> ContainerStatus:
        """The status as reported: exits with their termination messages."""
        if name not in self._messages:
            return st
        shown = self._shown_exit(name)
        state = shown(st.state) if isinstance(st.state, Terminated) else st.state
        last = shown(st.last_state) if st.last_state is not None else None
        return st if state is st.state and last is st.last_state else replace(st, state=state, last_state=last)

    def container_pids(self, name: str) -> Callable[[], list[int]] | None:
        """The processes of a container run from its image (the runtime's child of its cgroup),
        None for a host process."""
        image = self.image_containers.get(name)
        if image is None:
            return None
        return lambda: image.driver.pids(image.cgroup)

    # ---- probes and hooks ----
    def exec_target(self, name: str) -> ExecTarget | None:
        """Where an exec probe, an exec hook or `kubectl exec` runs in the container: its cgroup,
        env, identity; in an image container, through its OCI runtime's `exec` (None: not running)."""
        w = self.workers.get(name)
        if w is None or not isinstance(w.status.state, Running):
            return None
        c = self.plan.any_container(name)
        if c is not None and c.from_image:
            image = self.image_containers.get(name)
            if image is None or self.env.oci is None:
                return None
            return ExecTarget(cgroup=DriverCgroup(self.env.driver, sandbox_cgroup(self.plan.cgroup_path)),
                              oci=self.env.oci.exec_handle(image.cid, image.dirs, c.cgroup_path))
        target = self._exec_targets.get(name)
        if target is None:
            if c is None:
                return None
            launch = c.config.launch
            uid, gid = launch.identity()
            target = ExecTarget(cgroup=DriverCgroup(self.env.driver, c.cgroup_path), env=dict(launch.env),
                                working_dir=launch.working_dir, run_as_user=uid, run_as_group=gid,
                                oom_score_adj=c.config.oom_score_adj)
            self._exec_targets[name] = target
        return target

    def _record_event(self, name: str, event: Event) -> None:
        c = self.plan.any_container(name)
        meta = self.pod.metadata
        if self.env.events is None:
            self._log.info("pod_event", reason=event.reason, message=event.message, container=name)
            return
        self.env.events.record(event.reason, event.message, namespace=meta.namespace, name=meta.name,
                               uid=meta.uid, type_=event.type_, field_path=field_path(c) if c else "",
                               container=name)

    def _probe_event(self, name: str, event: Event) -> None:
        self._record_event(name, event)

    def _probe_kill(self, name: str, message: str, grace: int | None) -> None:
        """A liveness or startup probe failed: restart the container (its policy decides)."""
        w = self.workers.get(name)
        if self.terminal or w is None:
            return
        self._side_task(self._restart(name, grace, w.status.container_id), f"kill {name}")

    async def _post_start(self, c: ContainerPlan, container_id: str) -> None:
        try:
            target = self.exec_target(c.name)
            if target is not None:  # exec through the runtime once it knows the container
                await runtime_knows(target, POST_START_KNOWN_S)
            result = await self.hooks.post_start(HookTarget(self.pod, c.spec, target))
        finally:
            self._hook_running.discard(c.name)
            self._kick()
        if result.ok or self.terminal:
            return
        for event in result.events:
            self._record_event(c.name, event)
        await self._restart(c.name, None, container_id)

    async def _pre_stop(self, c: ContainerPlan, grace: float) -> float:
        """Run the container's preStop hook within `grace`; the grace left for its SIGTERM."""
        lifecycle = c.spec.lifecycle
        if lifecycle is None or lifecycle.pre_stop is None or int(grace) <= 0:
            return grace
        result = await self.hooks.pre_stop(HookTarget(self.pod, c.spec, self.exec_target(c.name)), int(grace))
        for event in result.events:
            self._record_event(c.name, event)
        self._log.info("pre_stop_hook_ran", container=c.name, elapsed=result.elapsed, completed=result.completed)
        return float(result.grace_left)

    async def _restart(self, name: str, grace: int | None, container_id: str) -> None:
        """Kill this run of the container (preStop, SIGTERM, grace, SIGKILL) so its supervisor
        applies the restart policy to the exit, as the kubelet kills a container that failed its
        liveness probe or its postStart hook."""
        w = self.workers.get(name)
        c = self.plan.any_container(name)
        if (w is None or c is None or name in self._killing or self.terminal
                or (container_id and w.status.container_id != container_id)):
            return
        pid, start_time = w.pid, w.start_time
        if pid is None or start_time is None:
            return
        self._killing.add(name)
        try:
            period = float(self.pod.spec.termination_grace_period_seconds if grace is None else grace)
            left = await self._pre_stop(c, period)
            self._log.info("container_killing", container=name, pid=pid, grace_period=left)
            if w.pid == pid and w.start_time == start_time:  # still this run (preStop may have outlived it)
                w.kill_to_restart()
            await kill_process(pid, start_time, left)
        finally:
            self._killing.discard(name)

    def container_running(self, name: str) -> bool:
        w = self.workers.get(name)
        return w is not None and w.pid is not None and isinstance(w.status.state, Running)

    async def restart_container(self, name: str) -> None:
        """Kill the container's current run so its supervisor starts it again (a resize whose
        resizePolicy says RestartContainer); returns once that run is gone."""
        w = self.workers.get(name)
        if w is not None and w.pid is not None:
            await self._restart(name, None, w.status.container_id)

    # ---- stopping ----
    async def _stop_one(self, c: ContainerPlan, grace: float) -> None:
        w = self.workers.get(c.name)
        if w is None:
            return
        left = grace
        if w.pid is not None and isinstance(w.status.state, Running):
            self._record_event(c.name, Event("Killing", f"Stopping container {c.name}", "Normal"))  # killContainer's
            left = await self._pre_stop(c, grace)
        await w.stop(left)

    def kill_now(self) -> None:
        """SIGKILL every container's processes at once (a hard eviction, before its bookkeeping);
        stop() follows and waits for them, kills what is left in the cgroups and removes them.
        Terminal from now on: nothing in the pod starts or restarts."""
        self.terminal = True
        for w in self._spare.values():
            w.hold()
        for w in self.workers.values():
            w.kill_now()

    async def stop(self, grace_period: float, reason: str | None = None, message: str | None = None) -> None:
        """Terminate every container (preStop, SIGTERM, grace, kill): the app containers together,
        then the init containers (sidecars) in reverse order with what is left of the grace
        period; then remove the pod's cgroups."""
        self.terminal = True
        self.deletion_time = self.deletion_time or self.env.clock.wall()
        if reason:
            self.reason, self.message = reason, message
        self._on_change(self)
        for w in self._spare.values():
            w.hold()
        clock = self.env.clock
        began = clock.now()
        await asyncio.gather(*(self._stop_one(c, grace_period) for c in self.plan.containers))
        for c in reversed(self.plan.init_containers):
            await self._stop_one(c, max(0.0, grace_period - (clock.now() - began)))
        for task in list(self._side):  # hooks and kills still in flight: the stop has taken over
            task.cancel()
        if self.probes is not None:
            await self.probes.stop()
        await self._guard.drain()
        if self.image_containers or self.sandbox is not None:
            with self._step(f"pod {self.pod.key}: remove its image containers", REMOVE_STEP_S):
                await self.remove_image_containers()
        with self._step(f"pod {self.pod.key}: remove its cgroups", REMOVE_STEP_S):
            await asyncio.to_thread(self.remove_cgroups)  # kill/rmdir may wait for the kernel to reap
        self._refresh_conditions()
        self._on_change(self)

    def _step(self, what: str, bound: float) -> contextlib.AbstractContextManager[None]:
        return self.env.steps.step(what, bound) if self.env.steps is not None else contextlib.nullcontext()

    def remove_cgroups(self) -> None:
        try:
            self.env.driver.kill(self.plan.cgroup_path)
            self.env.driver.remove(self.plan.cgroup_path)
        except OSError as e:
            self._log.warning("pod_cgroup_remove_failed", path=self.plan.cgroup_path, error=str(e))

    async def detach(self) -> None:
        """Agent shutdown: stop watching and probing, leave the processes running for the next agent."""
        self._detached = True
        await self._guard.close()
        for w in self.workers.values():
            w.detach()

    # ---- reporting ----
    def _status_of(self, name: str) -> ContainerStatus | None:
        """The container's status as its supervisor has it (one that cannot be configured: waiting)."""
        w = self.workers.get(name)
        if w is not None:
            return w.status
        c = self.plan.any_container(name)
        if c is not None and c.config_error is not None:
            return ContainerStatus(c.name, Waiting(REASON_CONFIG_ERROR, c.config_error), image=c.config.image)
        return None

    def _statuses(self) -> dict[str, ContainerStatus]:
        out = {}
        for c in self.plan.all_containers:
            st = self._status_of(c.name)
            if st is not None:
                out[c.name] = st
        return out

    def _sequence_started(self, name: str) -> bool:
        """Started for the sequence: the startup probe succeeded and the postStart hook is done."""
        return self.probes is not None and self.probes.started(name) and name not in self._hook_running

    @property
    def statuses(self) -> dict[str, ContainerStatus]:
        """Every created container's status, init containers too, as reported."""
        return {name: self._shown(name, w.status) for name, w in self.workers.items()}

    @property
    def shown_reason(self) -> tuple[str | None, str | None]:
        """The termination's reason and message once its record is on disk (None, None before)."""
        if not self._termination_recorded:
            return None, None
        return self.reason, self.message

    @property
    def _termination_recorded(self) -> bool:
        return self.deletion is None or self.recorded_deletion is self.deletion

    def mark_recorded(self, deletion: Deletion | None) -> None:
        """The journal holds a record written with `deletion`: its reason may be shown."""
        if deletion is not None and deletion is self.deletion:
            self.recorded_deletion = deletion

    @property
    def phase(self) -> str:
        if self.shown_reason[0] == EVICTION_REASON:
            return "Failed"
        statuses = self._statuses()
        started = {name: self.probes is not None and self.probes.started(name) for name in statuses}
        recorded = self._termination_recorded
        terminal = self.terminal and recorded  # a crash now would restart it
        phase = pod_phase(self.pod.spec, statuses, started, pod_is_terminal=terminal and not self.running,
                          is_static=self.plan.static)
        if self.terminal and not recorded and phase in ("Succeeded", "Failed"):
            # killed by an eviction whose record is on its way (the kill never waits for it): still
            # terminating, as a pod being deleted is; Failed comes with its reason, as the kubelet
            # reports them, so a Job's podFailurePolicy never sees a bare exit 137. (A delete is
            # recorded before it kills, so a pod that had ended keeps its phase meanwhile.)
            return "Running"
        return phase

    @property
    def holds_resources(self) -> bool:
        """Admitted, not terminal, neither Succeeded nor Failed (the kubelet's filter for admission).

        Admission asks this of every pod, so it is cheap in the common case: without an exit (a
        Terminated state, now or as a last state) pod_phase can only be Pending or Running."""
        if self.terminal:
            return False
        if not any(isinstance(w.status.state, Terminated) or w.status.last_state is not None
                   for w in self.workers.values()):
            return self.shown_reason[0] != EVICTION_REASON
        return self.phase not in ("Succeeded", "Failed")

    @property
    def running(self) -> bool:
        return any(w.pid is not None for w in self.workers.values())

    @property
    def finished(self) -> bool:
        """No container runs and none will be (re)started."""
        if not self.started or not all(t.done() for t in self._tasks.values()):
            return False
        if self.terminal:
            return True
        steps = self._steps()
        return bool(self._tasks) and (steps.failed is not None or (steps.initialized and not steps.start))

    def record(self) -> PodCheckpoint:
        containers = tuple(_container_record(name, w, self.env.clock, self._shown_exit(name))
                           for name, w in self.workers.items())
        pod = self.pod
        if self._manifest is None or self._manifest[0] is not pod:  # a frozen model: dumped once per pod object
            self._manifest = (pod, pod.to_dict())
        meta = pod.metadata
        return PodCheckpoint(namespace=meta.namespace, name=meta.name, uid=meta.uid,
                             manifest=self._manifest[1], containers=containers, deletion=self.deletion,
                             resize=self.resize.to_record())

    def _refresh_conditions(self) -> None:
        if self.probes is not None:
            self.conditions = self.probes.conditions(self.phase, self.conditions, self.env.clock.wall())

    def _container_status_dict(self, c: ContainerPlan) -> dict[str, Any]:
        w = self.workers.get(c.name)
        if w is None:
            st = self._status_of(c.name)
            if st is None:
                waiting = REASON_POD_INITIALIZING if self.plan.init_containers else REASON_CREATING
                st = ContainerStatus(c.name, Waiting(waiting), image=c.config.image)
            return st.to_status_dict(ready=False, started=False)
        probes = self.probes
        out = self._shown(c.name, w.status).to_status_dict(
            ready=probes.ready(c.name) if probes is not None else None,
            started=probes.started(c.name) if probes is not None else None)
        image = self.image_containers.get(c.name)
        if image is not None and image.image_id:
            out["imageID"] = image.image_id  # the repo digest the container runs, as the kubelet reports it
        return out

    def to_dict(self) -> dict[str, Any]:
        out = self.pod.to_dict()
        if self.deletion_time is not None:
            out["metadata"]["deletionTimestamp"] = rfc3339(self.deletion_time)
        self._refresh_conditions()
        status: dict[str, Any] = {"phase": self.phase}
        reason, message = self.shown_reason
        conditions = self.conditions
        if reason == EVICTION_REASON:  # the kubelet's (PodDisruptionConditions): why the pod is gone
            conditions = [*conditions, Condition(DISRUPTION_TARGET, True, self.deletion_time or self.start_time,
                                                 TERMINATION_BY_KUBELET, message or "")]
        if conditions:
            status["conditions"] = [c.to_dict() for c in conditions]
        if self.plan.host_ips:
            status["hostIP"] = self.plan.host_ips[0]
            status["hostIPs"] = [{"ip": ip} for ip in self.plan.host_ips]
        if self.plan.pod_ips:
            status["podIP"] = self.plan.pod_ips[0]
            status["podIPs"] = [{"ip": ip} for ip in self.plan.pod_ips]
        status["qosClass"] = self.plan.qos
        status["startTime"] = rfc3339(self.start_time)
        if self.plan.init_containers:
            status["initContainerStatuses"] = [self._container_status_dict(c) for c in self.plan.init_containers]
        status["containerStatuses"] = [self._container_status_dict(c) for c in self.plan.containers]
        if reason:
            status["reason"] = reason
        if message:
            status["message"] = message
        out["status"] = status
        self.resize.decorate(out, self.plan)
        return out


async def kill_process(pid: int, start_time: int, grace: float) -> bool:
    """SIGTERM the process (and its group), wait up to `grace` s for it to exit, then SIGKILL;
    True when it was there to kill. The pidfd is opened before the start time is checked, so a
    reused PID is never signalled; the exit is seen through that pidfd on the loop."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    loop = asyncio.get_running_loop()
    try:
        if not is_same_process(pid, start_time):
            return False
        gone: asyncio.Future[None] = loop.create_future()

        def exited() -> None:
            if not gone.done():
                gone.set_result(None)

        loop.add_reader(pidfd, exited)
        try:
            _signal(pidfd, pid, signal.SIGTERM)
            try:
                await wait_for(asyncio.shield(gone), max(grace, 0.0))
            except TimeoutError:
                _signal(pidfd, pid, signal.SIGKILL)
        finally:
            loop.remove_reader(pidfd)
        return True
    finally:
        os.close(pidfd)


def _signal(pidfd: int, pid: int, sig: int) -> None:
    """The process through its pidfd, then its process group (the container's PID leads it)."""
    try:
        signal.pidfd_send_signal(pidfd, sig)
    except ProcessLookupError:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
