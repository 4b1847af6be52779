"""PodManager: admits pods, runs them through PodWorkers, checkpoints them, re-adopts them.

Admission plans each pod once (plan.py: QoS class, requests, cgroup values, launch specs) and
fits its requests against the node allocatable; the cgroup tree under the agent's root is set up
once (kubepods and its QoS tiers) and the QoS tiers' weights follow the pods as they come and go.
A reload reaches it through `reconfigure`. Its background work (checkpoint writes, stopping pods)
runs as guarded tasks (daemonkit/tasks.py).

Durability (the promises of a 2xx), through the group-committed journal (journal.py):
- a create is answered only once the pod's record is on disk, and its first process starts only
  then; the pod holds its name and resources meanwhile, so concurrent creates share one fsync;
- a delete's intent (grace period, deadline) is on disk before its 200; a restarted agent carries
  the termination on with the grace that is left, and never starts a container of that pod;
- a restored container whose process no record names is looked for in its cgroup and adopted
  (worker.py, runtime/adoption.py); only cgroups of pods no record names are orphans.
A record that cannot be written is a DurabilityError (the API answers 500 naming the cause) and
nothing of the pod is left behind.

Progress, for the watchdog (daemonkit/progress.py): one checkpoint write (fsync included) is a
step bounded by CHECKPOINT_STEP_S.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from nodeagent.agent.cgroups import layout
from nodeagent.agent.cgroups.driver import CgroupSpec
from nodeagent.agent.config.settings import Config
from nodeagent.agent.node.allocatable import NodeAllocatable
from nodeagent.agent.pods.checkpoint import CheckpointStore, Deletion
from nodeagent.agent.pods.errors import AdmissionError, AlreadyExists, DurabilityError
from nodeagent.agent.pods.host_process import refuse_images
from nodeagent.agent.pods.journal import CheckpointJournal
from nodeagent.agent.pods.plan import PodPlan
from nodeagent.agent.pods.resize import Resizes
from nodeagent.agent.pods.stats_targets import stats_target
from nodeagent.agent.pods.worker import PodEnv, PodWorker
from nodeagent.agent.probes.exec_probe import ExecTarget
from nodeagent.agent.runtime import logs
from nodeagent.agent.runtime.adoption import scan_shims
from nodeagent.agent.runtime.attach import AttachTarget, AttachUnavailable
from nodeagent.agent.runtime.exec_session import ExecUnavailable
from nodeagent.agent.runtime.state import Running, Waiting
from nodeagent.agent.stats.targets import PodTarget
from nodeagent.core.errors import FieldError
from nodeagent.core.model import Pod, parse_pod
from nodeagent.core.quantity import Quantity
from nodeagent.core.resources import fits
from nodeagent.daemonkit import faults
from nodeagent.daemonkit.tasks import GuardedTasks

log = structlog.get_logger(__name__)

AdmitHook = Callable[[PodPlan], "tuple[str, str] | None"]  # (reason, message) to refuse, else None
CHECKPOINT_STEP_S = 30.0  # one pod's checkpoint: write, fsync, rename, fsync the directory


class PodManager:
    def __init__(
        self,
        env: PodEnv,
        checkpoints: CheckpointStore | CheckpointJournal,
        *,
        allocatable: Mapping[str, Quantity],
        enforced_allocatable: Mapping[str, Quantity] | None,
        max_pods: int,
        extra_admit: AdmitHook | None = None,
        kubepods_memory_high: Callable[[], int | None] = lambda: None,
    ) -> None:
        """`kubepods_memory_high`: the memory.high the eviction wake-ups keep on kubepods now, so a
        rewrite of kubepods' limits keeps it."""
        self.env = env
        self.journal = checkpoints if isinstance(checkpoints, CheckpointJournal) else CheckpointJournal(checkpoints)
        self.checkpoints = self.journal.store
        self.restore_problems: list[str] = []  # what restore() found unreadable (node status, /metrics)
        self.allocatable = dict(allocatable)
        self.enforced_allocatable = dict(enforced_allocatable) if enforced_allocatable else None
        self.max_pods = max_pods
        self.extra_admit = extra_admit
        self.kubepods_memory_high = kubepods_memory_high
        self.pods: dict[tuple[str, str], PodWorker] = {}
        self._dirty: set[tuple[str, str]] = set()
        self._saver: asyncio.Task[None] | None = None
        self._tasks = GuardedTasks("pods")  # checkpoint writes
        self._stopping = GuardedTasks("pods stopping")  # left to the next agent at shutdown (detach_all)
        self._lock = asyncio.Lock()
        self._qos_applied: dict[str, CgroupSpec] = {}
        self._recorded_uids: set[str] = set()  # every uid restore() read, even of a record it could not plan
        self.resizes = Resizes(self, self._lock, self._changed)  # pods/resize: in-place resizes
        # called (no arguments, on the loop) on every change of a pod: the control-plane pod sync
        # writes statuses and confirms deletions from them (cluster_client/podsource.py)
        self.listeners: list[Callable[[], None]] = []

    # ---- setup ----
    def setup_cgroups(self) -> None:
        """kubepods (limited to the enforced allocatable when enforced) and its QoS tiers; with an
        OCI runtime, the cgroup of its monitors next to kubepods (layout.RUNTIME_PATH)."""
        driver = self.env.driver
        spec = layout.kubepods_spec(self.enforced_allocatable) if self.enforced_allocatable else CgroupSpec()
        driver.create(layout.KUBEPODS, spec)
        if self.env.oci is not None:
            driver.create(layout.RUNTIME_PATH, CgroupSpec())
        self.update_qos_cgroups()

    def reconfigure(self, config: Config, allocatable: NodeAllocatable) -> None:
        """A reload: the allocatable pods are admitted against, maxPods, and kubepods' limits
        (its memory.high kept as the eviction wake-ups have it)."""
        self.allocatable = dict(allocatable.allocatable)
        enforced = allocatable.enforced_limits
        self.enforced_allocatable = dict(enforced) if enforced else None
        self.max_pods = config.max_pods
        if enforced:
            spec = layout.kubepods_spec(enforced, memory_high=self.kubepods_memory_high())
            self.env.driver.update(layout.KUBEPODS, spec)

    def update_qos_cgroups(self, *, force: bool = False) -> None:
        """QoS tier weights from the pods that are admitted now (burstable = sum of requests).

        Only a tier whose spec changed is written; `force` rewrites both (housekeeping does, so
        a value changed behind our back is put right within an interval)."""
        admitted = [(w.plan.qos, w.plan.cpu_request_milli) for w in self.pods.values() if not w.terminal]
        for path, spec in layout.qos_cgroup_specs(admitted).items():
            before = self._qos_applied.get(path)
            if force or before is None:
                self.env.driver.create(path, spec)
            elif before != spec:  # a pod came or went: the weight alone moves (one write)
                try:
                    self.env.driver.update(path, spec, previous=before)
                except OSError:  # the tier is gone (removed behind our back): made again
                    self.env.driver.create(path, spec)
            else:
                continue
            self._qos_applied[path] = spec

    async def restore(self) -> list[str]:
        """Re-adopt pods from the checkpoints; remove cgroups of pods nobody knows. Problems as text."""
        records, problems = await asyncio.to_thread(self.journal.load_all)
        messages = [f"{p.path}: {p.reason}" for p in problems]
        shims = await asyncio.to_thread(scan_shims)  # before anything new is spawned
        self._recorded_uids = {r.uid for r in records}
        for record in records:
            try:
                pod = parse_pod(dict(record.manifest))
                plan = self.env.plan(pod)
            except ValueError as e:
                messages.append(f"checkpoint {record.namespace}/{record.name}: {e}")
                log.error("checkpoint_pod_invalid", pod=f"{record.namespace}/{record.name}", error=str(e))
                continue
            worker = PodWorker(plan, self.env, self._changed)
            self.pods[(pod.metadata.namespace, pod.metadata.name)] = worker
            worker.start(record, shims)
            log.info("pod_restored", pod=pod.key, uid=pod.metadata.uid,
                     deleting=record.deletion is not None)
            d = record.deletion
            if d is not None:  # a promised termination: carried on with the grace that is left
                left = max(0.0, d.deadline - self.env.clock.wall())
                self.terminate(worker, left, remove=d.remove, reason=d.reason, message=d.message)
        self.update_qos_cgroups()
        self.remove_orphan_cgroups()
        self.resizes.restored()
        self.restore_problems = messages
        return messages

    def remove_orphan_cgroups(self) -> list[str]:
        """Pod cgroups under kubepods whose uid no admitted pod and no record has: kill and remove them."""
        known = {w.pod.metadata.uid for w in self.pods.values()} | self._recorded_uids
        removed = []
        driver = self.env.driver
        for parent in layout.QOS_PARENTS:
            if not driver.exists(parent):
                continue
            for child in driver.children(parent):
                uid = layout.pod_uid_from_dir(child)
                if uid is None or uid in known:
                    continue
                path = f"{parent}/{child}"
                try:
                    driver.kill(path)
                    driver.remove(path)
                    removed.append(path)
                    log.info("orphan_cgroup_removed", path=path)
                except OSError as e:
                    log.warning("orphan_cgroup_remove_failed", path=path, error=str(e))
        return removed

    # ---- checkpointing (coalesced, off the loop: it fsyncs) ----
    def _changed(self, worker: PodWorker) -> None:
        self._dirty.add((worker.pod.metadata.namespace, worker.pod.metadata.name))
        if self._saver is None or self._saver.done():
            self._saver = self._tasks.start(self._save_dirty(), name="checkpoints")
        self.resizes.changed()  # a deferred resize may fit now
        for listener in self.listeners:
            listener()

    async def _save_dirty(self) -> None:
        """Every dirty pod's record in one group commit, until nothing is dirty."""
        while self._dirty:
            keys, self._dirty = self._dirty, set()
            await asyncio.gather(*(self._save(key) for key in keys))

    async def _save(self, key: tuple[str, str]) -> None:
        worker = self.pods.get(key)
        try:
            with self._step(f"checkpoint of pod {'/'.join(key)}", CHECKPOINT_STEP_S):
                if worker is None or (worker.terminal and worker.finished and worker.deletion is not None
                                      and worker.deletion.remove):
                    await self.journal.delete(*key)
                elif worker.started:  # a pod being created is recorded by create_pod itself
                    deletion = worker.deletion
                    await self.journal.put(worker.record())
                    worker.mark_recorded(deletion)
        except (OSError, ValueError) as e:
            log.error("checkpoint_write_failed", pod="/".join(key), error=str(e))

    def _step(self, what: str, bound: float) -> contextlib.AbstractContextManager[None]:
        steps = self.env.steps
        return steps.step(what, bound) if steps is not None else contextlib.nullcontext()

    async def flush(self) -> None:
        """Wait until every pending checkpoint write is on disk."""
        while self._saver is not None and not self._saver.done():
            await self._saver

    # ---- AgentBackend ----
    def active_plans(self) -> list[PodPlan]:
        """Plans of the pods that hold resources: admitted, not terminal, not finished (the kubelet's filter)."""
        return [w.plan for w in self.pods.values() if w.holds_resources]

    def active_pods(self) -> list[Pod]:
        """Pods that hold resources (active_plans)."""
        return [p.pod for p in self.active_plans()]

    def _plan(self, pod: Pod) -> PodPlan:
        """The pod's plan; what cannot be planned cannot be set up on this node."""
        try:
            return self.env.plan(pod)
        except (OSError, ValueError) as e:
            log.error("pod_start_failed", pod=pod.key, error=str(e))
            raise AdmissionError("CreatePodSandboxError", f"cannot set up the pod: {e}") from e

    def admit(self, plan: PodPlan) -> None:
        """Fit the planned pod's requests next to the admitted pods'; AdmissionError if it does not."""
        requests = {w.plan.uid: w.plan.requests for w in self.pods.values()}
        requests[plan.uid] = plan.requests
        result = fits(plan.pod, self.allocatable, self.active_pods(), self.max_pods,
                      requests_of=lambda p: requests[p.metadata.uid])
        if not result.ok:
            raise AdmissionError(result.reason or "OutOfResources", result.message)
        if self.extra_admit is not None:
            refused = self.extra_admit(plan)
            if refused is not None:
                raise AdmissionError(*refused)

    async def create_pod(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """Admit, record durably (group commit), then start: answered once the record is on disk."""
        pod = parse_pod(manifest)
        # an image runs by the OCI runtime, never as a host process unless the pod says so
        refuse_images(pod, self.env.oci.name if self.env.oci is not None else None)
        async with self._lock:
            key = (pod.metadata.namespace, pod.metadata.name)
            if key in self.pods:
                raise AlreadyExists(*key)
            plan = self._plan(pod)
            self.admit(plan)
            worker = PodWorker(plan, self.env, self._changed)
            self.pods[key] = worker  # holds the name and the resources while the record is written
        try:
            with self._step(f"checkpoint of pod {pod.key}", CHECKPOINT_STEP_S):
                await self.journal.put(worker.record())
        except OSError as e:
            if self.pods.get(key) is worker:
                del self.pods[key]
            log.error("pod_record_failed", pod=pod.key, error=str(e))
            raise DurabilityError(f"cannot record pod {pod.key} in {self.checkpoints.directory}: {e}") from e
        faults.hit("create-after-commit")
        if worker.terminal:  # deleted (or evicted) while its record was being written
            return worker.to_dict()
        try:
            worker.start()
        except (OSError, ValueError) as e:
            if self.pods.get(key) is worker:
                del self.pods[key]
            worker.remove_cgroups()
            log.error("pod_start_failed", pod=pod.key, error=str(e))
            with contextlib.suppress(OSError):
                await self.journal.delete(*key)
            raise AdmissionError("CreatePodSandboxError", f"cannot set up the pod: {e}") from e
        self.update_qos_cgroups()
        log.info("pod_admitted", pod=pod.key, uid=pod.metadata.uid, qos=worker.plan.qos)
        return worker.to_dict()

    async def resize_pod(self, namespace: str, name: str, patch: dict[str, Any],
                         patch_type: str) -> dict[str, Any] | None:
        """The pods/resize subresource (pods/resize.py); None if there is no such pod."""
        return await self.resizes.resize(namespace, name, patch, patch_type)

    def list_pods(self) -> list[dict[str, Any]]:
        return [w.to_dict() for w in self.pods.values()]

    def stats_targets(self) -> list[PodTarget]:
        """What the metrics sampler reads this pass: every pod whose cgroups still exist (on the
        loop, in memory only: the plans plus the containers' current start times)."""
        out = []
        for w in self.pods.values():
            if w.terminal and w.finished:
                continue  # its cgroups are gone
            starts = {name: cw.status.state.started_at if isinstance(cw.status.state, Running) else None
                      for name, cw in w.workers.items()}
            out.append(stats_target(w.plan, start_time=w.start_time, container_starts=starts))
        return out

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        w = self.pods.get((namespace, name))
        return w.to_dict() if w else None

    async def delete_pod(self, namespace: str, name: str, grace_period: int | None) -> dict[str, Any] | None:
        worker = self.pods.get((namespace, name))
        if worker is None:
            return None
        grace = worker.pod.spec.termination_grace_period_seconds if grace_period is None else grace_period
        before = worker.deletion
        if worker.terminal:
            if before is None or before.remove:
                return worker.to_dict()  # already being deleted
            # An evicted pod stays listed as Failed until it is deleted; the delete keeps the
            # eviction's reason and grace and only adds that the pod leaves the list.
            deletion = dataclasses.replace(before, remove=True)
        else:
            deletion = Deletion(float(grace), self.env.clock.wall() + grace, remove=True)
        worker.deletion = deletion
        try:  # the intent is on disk before the 200: a restarted agent carries the termination on
            with self._step(f"checkpoint of pod {worker.pod.key}", CHECKPOINT_STEP_S):
                await self.journal.put(worker.record())
            worker.mark_recorded(deletion)
        except OSError as e:
            worker.deletion = before
            log.error("pod_record_failed", pod=worker.pod.key, error=str(e))
            raise DurabilityError(f"cannot record the deletion of pod {worker.pod.key} in "
                                  f"{self.checkpoints.directory}: {e}") from e
        faults.hit("delete-after-commit")
        if not worker.terminal:
            self.terminate(worker, float(grace), remove=True)
        elif worker.finished:  # the eviction's stop is over: nothing is left to wait for
            await self._remove(worker)
        # else: the eviction's stop is still running; it removes the pod when it ends
        return worker.to_dict()

    def terminate(self, worker: PodWorker, grace: float, *, remove: bool,
                  reason: str | None = None, message: str | None = None) -> asyncio.Task[None]:
        """Stop a pod in the background; with `remove` it leaves the pod list once it has stopped.

        The termination is part of the pod's record from now on (written with the next change;
        a delete has written it already), so a restarted agent carries it on."""
        worker.terminal = True
        worker.deletion_time = worker.deletion_time or self.env.clock.wall()
        if worker.deletion is None:
            worker.deletion = Deletion(grace, self.env.clock.wall() + grace, remove=remove,
                                       reason=reason, message=message)
            self._changed(worker)
        async def run() -> None:
            await worker.stop(grace, reason, message)
            if remove or (worker.deletion is not None and worker.deletion.remove):  # a delete may come mid-eviction
                await self._remove(worker)
            else:
                self.update_qos_cgroups()
                self._changed(worker)

        return self._stopping.start(run(), name=f"stop:{worker.pod.key}")

    async def _remove(self, worker: PodWorker) -> None:
        """A stopped pod leaves the list, its logs and its record."""
        key = (worker.pod.metadata.namespace, worker.pod.metadata.name)
        if self.pods.get(key) is worker:
            del self.pods[key]
            await asyncio.to_thread(logs.remove_pod_dir, worker.plan.log_dir)
            log.info("pod_removed", pod=worker.pod.key)
        self.update_qos_cgroups()
        self._changed(worker)

    def _container(self, namespace: str, name: str, container: str | None) -> tuple[PodWorker, str] | None:
        """The pod and the container a request names or, when it names none, the pod's only app
        container (FieldError when it has several); None if either is unknown."""
        worker = self.pods.get((namespace, name))
        if worker is None:
            return None
        if container is None:
            names = [c.name for c in worker.plan.containers]
            if len(names) != 1:
                raise FieldError("container", "a container name must be given: one of " + ", ".join(names))
            container = names[0]
        return (worker, container) if worker.plan.any_container(container) is not None else None

    def log_source(self, namespace: str, name: str, container: str | None,
                   previous: bool = False) -> logs.LogSource | None:
        """Where a container's log is: its current run's file (or the run before it with
        `previous`) and whether that run still writes to it. None if the pod or the container is
        unknown; FieldError if no container is named and the pod has several; LogUnavailable (the
        kubelet's words) if the container has not started yet or has no previous run."""
        found = self._container(namespace, name, container)
        if found is None:
            return None
        worker, container = found
        cw = worker.workers.get(container)
        if cw is None:
            raise logs.LogUnavailable(f'container "{container}" in pod "{name}" is waiting to start: '
                                      "PodInitializing")
        run = cw.status.restart_count
        if previous:
            path = logs.run_log_path(cw.config.log_dir, run - 1) if run > 0 else None
            if path is None or not os.path.exists(path):
                raise logs.LogUnavailable(f'previous terminated container "{container}" in pod "{name}" not found')
            return logs.LogSource(path, lambda: False)
        path = cw.log_path
        if not os.path.exists(path):
            state = cw.status.state
            reason = state.reason if isinstance(state, Waiting) else "ContainerCreating"
            raise logs.LogUnavailable(f'container "{container}" in pod "{name}" is waiting to start: {reason}')

        def running() -> bool:
            return (self.pods.get((namespace, name)) is worker and worker.workers.get(container) is cw
                    and cw.status.restart_count == run and cw.pid is not None)

        return logs.LogSource(path, running)

    def attach_target(self, namespace: str, name: str, container: str | None) -> AttachTarget | None:
        """Where `kubectl attach` reads and writes (see AgentBackend.attach_target): the current
        run's log while it runs, and its stdin FIFO when the container has `stdin: true`."""
        source = self.log_source(namespace, name, container)
        if source is None:
            return None
        worker = self.pods[(namespace, name)]
        container = container or worker.plan.containers[0].name  # log_source checked there is only one
        plan = worker.plan.any_container(container)
        if plan is None or not source.running():
            raise AttachUnavailable(f'container "{container}" in pod "{name}" is not running')
        launch = plan.config.launch
        return AttachTarget(source, launch.stdin, plan.config.log_dir, tty=launch.tty, stdin_once=launch.stdin_once,
                            container_pids=worker.container_pids(container))

    def exec_target(self, namespace: str, name: str, container: str | None) -> ExecTarget | None:
        """Where `kubectl exec` runs (see AgentBackend.exec_target): the container's cgroup, env,
        working directory and identity while it runs."""
        found = self._container(namespace, name, container)
        if found is None:
            return None
        worker, container = found
        target = worker.exec_target(container)
        if target is None:
            raise ExecUnavailable(f'container "{container}" in pod "{name}" is not running')
        return target

    def read_log(self, namespace: str, name: str, container: str | None, tail: int | None) -> str | None:
        """The log as text at once (blocking reads; tests and small logs): see log_source."""
        try:
            source = self.log_source(namespace, name, container)
        except logs.LogUnavailable:
            return ""
        if source is None:
            return None
        lines = logs.tail(source.path, tail if tail is not None else 10**9)
        return "".join(line + "\n" for line in lines)

    def live_log_dirs(self) -> list[str]:
        """The log directories of every container the agent runs (what the log clock watches)."""
        return [cw.config.log_dir for worker in self.pods.values() for cw in worker.workers.values()]

    def rotate_logs(self) -> None:
        """Rotate every container's current log that grew past its size (blocking: call in a thread)."""
        for worker in list(self.pods.values()):
            for cw in list(worker.workers.values()):
                try:
                    logs.rotate(cw.log_path)
                except OSError as e:
                    log.warning("log_rotate_failed", path=cw.log_path, error=str(e))

    # ---- shutdown ----
    async def wait_stopping(self) -> None:
        """Wait until the pods being stopped are stopped (and their checkpoints written)."""
        await self._stopping.drain()
        await self._tasks.drain()

    async def detach_all(self) -> None:
        """Agent shutdown: checkpoint, then let go of every process (they keep running).

        A pod being stopped is not waited for (its grace period may be long, a process may
        ignore SIGTERM): its termination is in its record, and the next agent carries it on
        with the grace that is left."""
        await self._stopping.cancel_running()
        await self.resizes.close()
        for w in self.pods.values():
            self._changed(w)
        await self.flush()
        await asyncio.gather(*(w.detach() for w in self.pods.values()))
        await self.journal.close()
