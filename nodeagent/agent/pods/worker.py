"""PodWorker: one admitted pod on this node: its cgroups, its container workers, its status.

The worker owns the pod's cgroup subtree (`kubepods/<qos>/pod<uid>/<container>`) and one
ContainerWorker per container, both made from the pod's plan (plan.py): it creates what the plan
says and derives nothing from the manifest itself. It reports every container state change to
`on_change`, so the manager can checkpoint it, and answers the Kubernetes-shaped status of the pod.

Progress, for the watchdog (daemonkit/progress.py): removing the pod's cgroups after a stop is a
step bounded by REMOVE_STEP_S; the containers' own steps are the runtime's (supervisor.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from nodeagent.agent.cgroups.driver import CgroupDriver
from nodeagent.agent.eviction.evaluate import EVICTION_REASON
from nodeagent.agent.pods.checkpoint import ContainerCheckpoint, Deletion, PodCheckpoint
from nodeagent.agent.pods.plan import ContainerPlan, PodPlan, plan_pod
from nodeagent.agent.runtime import logs
from nodeagent.agent.runtime.adoption import find_container_process
from nodeagent.agent.runtime.backoff import CrashBackoff
from nodeagent.agent.runtime.cgroup_handle import DriverCgroup
from nodeagent.agent.runtime.spawn import clamp_oom_score_adj
from nodeagent.agent.runtime.state import ContainerStatus, Terminated, pod_phase
from nodeagent.agent.runtime.supervisor import ContainerWorker
from nodeagent.core.clock import Clock
from nodeagent.core.model import Pod
from nodeagent.core.timefmt import parse_rfc3339, rfc3339
from nodeagent.daemonkit.progress import Steps
from nodeagent.daemonkit.tasks import GuardedTasks

log = structlog.get_logger(__name__)


REMOVE_STEP_S = 30.0  # kill + rmdir of a stopped pod's cgroups: each bounded by the driver's 5 s timeouts


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

    def plan(self, pod: Pod) -> PodPlan:
        """The pod's plan on this node (see plan.py)."""
        return plan_pod(pod, state_dir=self.state_dir, memory_capacity=self.memory_capacity,
                        clamp_oom_score_adj=self.clamp_oom_score_adj)


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


def _container_record(name: str, w: ContainerWorker, clock: Clock) -> ContainerCheckpoint:
    """pid + start time while running; the exit the restart policy decides on under "current" once
    it exited (done, or waiting out its back-off), so a completed container is not run again and a
    crash-looping one keeps its count and back-off after an agent restart."""
    st = w.status
    saved: dict[str, Any] = dict(st.last_state.to_dict()) if st.last_state else {}
    current = w.last_exit if w.pid is None else None
    if current is None and w.pid is None and isinstance(st.state, Terminated):
        current = st.state
    if current is not None:
        saved["current"] = current.to_dict()
    snap = w.backoff.snapshot()  # (delay, last restart on the monotonic scale) -> wall time, which a file keeps
    backoff = (snap[0], clock.wall() - (clock.now() - snap[1])) if snap else None
    return ContainerCheckpoint(name=name, pid=w.pid, start_time=w.start_time,
                               restart_count=st.restart_count, last_state=saved, backoff=backoff)


class PodWorker:
    def __init__(self, plan: PodPlan, env: PodEnv, on_change: Callable[[PodWorker], None]) -> None:
        self.plan = plan
        self.env = env
        self._on_change = on_change
        self.workers: dict[str, ContainerWorker] = {}
        self._tasks: dict[str, asyncio.Task[Terminated | None]] = {}
        self._guard = GuardedTasks(f"pod {plan.pod.key}")
        self.start_time: float = env.clock.wall()
        self.deletion_time: float | None = None
        self.reason: str | None = None
        self.message: str | None = None
        self.terminal = False  # stopped for good (deleted or evicted): containers won't restart
        self.deletion: Deletion | None = None  # the recorded termination, carried on after a restart
        self.started = False
        self._log = log.bind(pod=plan.pod.key, uid=plan.uid)

    @property
    def pod(self) -> Pod:
        return self.plan.pod

    # ---- lifecycle ----
    def create_cgroups(self) -> None:
        """Pod cgroup, then one child per container, each with its limits (idempotent)."""
        driver = self.env.driver
        driver.create(self.plan.cgroup_path, self.plan.cgroup_spec)
        for c in self.plan.containers:
            driver.create(c.cgroup_path, c.cgroup_spec)

    def _container_worker(self, c: ContainerPlan) -> ContainerWorker:
        logs.prepare_log_dir(c.config.log_dir)
        backoff = self.env.backoff_factory() if self.env.backoff_factory else None
        return ContainerWorker(c.config, DriverCgroup(self.env.driver, c.cgroup_path), clock=self.env.clock,
                               backoff=backoff, on_change=lambda _s: self._on_change(self), steps=self.env.steps)

    def start(self, record: PodCheckpoint | None = None, shims: dict[str, int] | None = None) -> None:
        """Create cgroups and start (or, from a checkpoint record, re-adopt) every container.

        From a record, a container whose recorded process is gone is looked for in its cgroup
        (and among `shims`, adoption.scan_shims) before anything is started: it may have been
        spawned after the last record. A recorded deletion holds every start back."""
        self.started = True
        self.create_cgroups()
        if record is not None and record.deletion is not None:
            self.deletion = record.deletion
            self.terminal = True
            self.reason, self.message = record.deletion.reason, record.deletion.message
        for c in self.plan.containers:
            worker = self._container_worker(c)
            self.workers[c.name] = worker
            if self.terminal:
                worker.hold()
            if record is not None:  # a container the record does not name yet may have been spawned
                saved = record.container(c.name) or ContainerCheckpoint(c.name)
                self._resume(worker, c, saved, shims or {})
            # a bug in one container's loop is logged by the guard and must not take the agent down
            self._tasks[c.name] = self._guard.start(self._run(worker), name=f"container:{self.pod.key}/{c.name}")

    def _resume(self, worker: ContainerWorker, c: ContainerPlan, saved: ContainerCheckpoint,
                shims: dict[str, int]) -> None:
        """Adopt the container's process (recorded, or found in its cgroup) or resume its last exit."""
        if saved.backoff is not None:
            delay, at_wall = saved.backoff
            clock = self.env.clock
            worker.backoff.restore((delay, clock.now() - max(0.0, clock.wall() - at_wall)))
        last = terminated_from_dict(saved.last_state)
        current = terminated_from_dict(saved.last_state.get("current"))
        recorded = saved.pid is not None and saved.start_time is not None
        if recorded and worker.adopt(int(saved.pid or 0), int(saved.start_time or 0),
                                     restart_count=saved.restart_count, last_state=last, probe=True):
            return
        driver = self.env.driver
        try:
            found = find_container_process(driver.procs_files(c.cgroup_path), driver.pids(c.cgroup_path), shims)
        except OSError:
            found = None
        ran_before = saved.pid is not None or current is not None
        if found is not None:  # spawned after the last record: adopt it, never start it again
            self._log.info("container_found_in_cgroup", container=c.name, pid=found[0])
            count = saved.restart_count + (1 if ran_before else 0)
            worker.adopt(found[0], found[1], restart_count=count, last_state=current or last)
            return
        if saved.pid is not None and saved.start_time is not None:
            worker.adopt(int(saved.pid), int(saved.start_time), restart_count=saved.restart_count,
                         last_state=last)  # gone: recorded as an unknown exit, the policy decides
        elif current is not None:  # it had exited: the restart policy decides again
            worker.restore_exit(current, restart_count=saved.restart_count, last_state=last)

    async def _run(self, worker: ContainerWorker) -> Terminated | None:
        result = await worker.run()
        self._on_change(self)
        return result

    async def stop(self, grace_period: float, reason: str | None = None, message: str | None = None) -> None:
        """Terminate every container (SIGTERM, grace, kill), then remove the pod's cgroups."""
        self.terminal = True
        self.deletion_time = self.deletion_time or self.env.clock.wall()
        if reason:
            self.reason, self.message = reason, message
        self._on_change(self)
        await asyncio.gather(*(w.stop(grace_period) for w in self.workers.values()))
        await self._guard.drain()
        with self._step(f"pod {self.pod.key}: remove its cgroups", REMOVE_STEP_S):
            await asyncio.to_thread(self.remove_cgroups)  # kill/rmdir may wait for the kernel to reap
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
        """Agent shutdown: stop watching, leave the processes running for the next agent."""
        await self._guard.close()
        for w in self.workers.values():
            w.detach()

    # ---- reporting ----
    @property
    def statuses(self) -> dict[str, ContainerStatus]:
        return {name: w.status for name, w in self.workers.items()}

    @property
    def phase(self) -> str:
        if self.reason == EVICTION_REASON:
            return "Failed"
        names = [c.name for c in self.plan.containers]
        return pod_phase(self.pod.spec.restart_policy, names, self.statuses,
                         pod_is_terminal=self.terminal and not self.running,
                         is_static=self.plan.static)

    @property
    def running(self) -> bool:
        return any(w.pid is not None for w in self.workers.values())

    @property
    def finished(self) -> bool:
        """No container runs and none will be restarted."""
        return all(t.done() for t in self._tasks.values()) and bool(self._tasks)

    def record(self) -> PodCheckpoint:
        containers = tuple(_container_record(name, w, self.env.clock) for name, w in self.workers.items())
        meta = self.pod.metadata
        return PodCheckpoint(namespace=meta.namespace, name=meta.name, uid=meta.uid,
                             manifest=self.pod.to_dict(), containers=containers, deletion=self.deletion)

    def to_dict(self) -> dict[str, Any]:
        out = self.pod.to_dict()
        if self.deletion_time is not None:
            out["metadata"]["deletionTimestamp"] = rfc3339(self.deletion_time)
        status: dict[str, Any] = {
            "phase": self.phase,
            "qosClass": self.plan.qos,
            "startTime": rfc3339(self.start_time),
            "containerStatuses": [self.workers[c.name].status.to_status_dict()
                                  for c in self.plan.containers if c.name in self.workers],
        }
        if self.reason:
            status["reason"] = self.reason
        if self.message:
            status["message"] = self.message
        out["status"] = status
        return out
