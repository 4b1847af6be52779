"""The Job controller's thin loop (job_controller.go around the pure core in job/) and the
TTL-after-finished controller (ttlafterfinished_controller.go around job/ttl.py).

Job handlers turn Job and pod events into keys (pod events and status-only Job updates batched by
one second, as upstream's syncJobBatchPeriod; spec changes at once), creation/deletion expectations
and finalizer-removal expectations; `sync` reads the caches, asks the core for a plan and runs it:
first the managing part (adoption, creates, deletes), then the status tracking even when managing
failed (upstream's manageJobErr is returned after trackJobStatusAndRemoveFinalizers). The
pod-failure back-off record is the loop's memory and is kept once the Job's status carrying those
failures is written. A pod left with the tracking finalizer and no unfinished Job (its Job deleted
or finished, or released) is queued under an `orphan-pod:` key and has the finalizer removed
(upstream's orphanQueue), so cascading deletes of Jobs complete.

The TTL loop deletes a finished Job with `ttlSecondsAfterFinished` once it expires, with foreground
propagation and its uid as precondition, after an uncached re-read (the cache may hold a stale TTL).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodeagent.cluster.controllers.common import selectors
from nodeagent.cluster.controllers.common.actions import Delete, Plan
from nodeagent.cluster.controllers.common.expectations import Expectations
from nodeagent.cluster.controllers.common.meta import (
    being_deleted,
    controller_ref,
    finalizers,
    generation,
    key,
    labels,
    name,
    namespace,
    parse_time,
    resource_version,
    spec,
    status,
    uid,
)
from nodeagent.cluster.controllers.job import backoff, reconcile, ttl
from nodeagent.cluster.controllers.job.tracking import FinalizerExpectations
from nodeagent.cluster.controllers.manager.client import ApiError, Client, Recorder
from nodeagent.cluster.controllers.manager.executor import Executor
from nodeagent.cluster.controllers.manager.informer import Handlers, Informer
from nodeagent.cluster.controllers.manager.loop import Controller
from nodeagent.core.clock import Clock

Obj = Mapping[str, Any]
SYNC_JOB_BATCH_PERIOD = 1.0  # syncJobBatchPeriod
ORPHAN = "orphan-pod:"


def _has_finalizer(pod: Obj) -> bool:
    return reconcile.TRACKING_FINALIZER in finalizers(pod)


class JobController(Controller):
    name = "job"
    workers = 2

    def __init__(self, clock: Clock, client: Client, recorder: Recorder | None, *, jobs: Informer, pods: Informer,
                 batch_period: float = SYNC_JOB_BATCH_PERIOD) -> None:
        super().__init__(clock)
        self.jobs, self.pods, self.batch_period = jobs, pods, batch_period
        self.expectations = Expectations()
        self.finalizer_expectations = FinalizerExpectations()
        self.backoffs: dict[str, backoff.BackoffRecord] = {}  # upstream's podBackoffStore
        self.executor = Executor(client, recorder, "job-controller")
        self.recorder = recorder
        jobs.add_handlers(Handlers(self._job_added, self._job_updated, self._job_deleted))
        pods.add_handlers(Handlers(self._pod_added, self._pod_updated, lambda p: self._pod_deleted(p, final=True)))

    def _batched(self, k: str) -> None:
        """enqueueSyncJobBatched: pod events and status updates fold into one sync a second later."""
        self.queue.add_after(k, self.batch_period)

    # ---- Job handlers ----
    def _job_added(self, job: Obj) -> None:
        self.enqueue(key(job))

    def _job_updated(self, old: Obj, new: Obj) -> None:
        k = key(new)
        if generation(old) == generation(new):
            self._batched(k)
        else:
            self.enqueue(k)
        if reconcile.is_finished(new):
            self._cleanup_pod_finalizers(new)  # a backup: a finished Job's pods carry none
        ads, start = spec(new).get("activeDeadlineSeconds"), parse_time(status(new).get("startTime"))
        if ads is not None and start is not None and spec(old).get("activeDeadlineSeconds") != ads:
            self.queue.add_after(k, start + int(ads) - self.clock.wall())

    def _job_deleted(self, job: Obj) -> None:
        self.enqueue(key(job))
        self._cleanup_pod_finalizers(job)

    def _cleanup_pod_finalizers(self, job: Obj) -> None:
        for pod in self.pods.controlled_by(uid(job)):
            if _has_finalizer(pod):
                self.enqueue(ORPHAN + key(pod))

    # ---- pod handlers ----
    def _owner_key(self, ref: Mapping[str, Any] | None, ns: str) -> str | None:
        return self.owner_key(self.jobs, reconcile.KIND, ref, ns)

    def _enqueue_matching(self, pod: Obj) -> None:
        """getPodJobs: an orphan may be adopted by any Job of its namespace selecting it."""
        for job in self.jobs.in_namespace(namespace(pod)):
            if selectors.matches(spec(job).get("selector"), labels(pod)):
                self._batched(key(job))

    def _pod_added(self, pod: Obj) -> None:
        if being_deleted(pod):
            self._pod_deleted(pod, final=False)  # a restart can list a pod already being deleted
            return
        ref = controller_ref(pod)
        if ref is not None:
            k = self._owner_key(ref, namespace(pod))
            if k is not None:
                self.expectations.creation_observed(k)
                self._batched(k)
            return
        if _has_finalizer(pod):
            self.enqueue(ORPHAN + key(pod))
        self._enqueue_matching(pod)

    def _pod_updated(self, old: Obj, new: Obj) -> None:
        if resource_version(old) == resource_version(new):
            return
        if being_deleted(new):
            self._pod_deleted(new, final=False)
            return
        removed = not _has_finalizer(new)
        old_ref, new_ref = controller_ref(old), controller_ref(new)
        if old_ref != new_ref and old_ref is not None:
            old_k = self._owner_key(old_ref, namespace(old))
            if old_k is not None:
                if removed:
                    self.finalizer_expectations.removal_observed(old_k, uid(new))
                self._batched(old_k)
        if new_ref is not None:
            k = self._owner_key(new_ref, namespace(new))
            if k is not None:
                if removed:
                    self.finalizer_expectations.removal_observed(k, uid(new))
                self._batched(k)
            return
        if _has_finalizer(new):
            self.enqueue(ORPHAN + key(new))
        if labels(old) != labels(new) or old_ref != new_ref:
            self._enqueue_matching(new)

    def _pod_deleted(self, pod: Obj, *, final: bool) -> None:
        ref = controller_ref(pod)
        k = self._owner_key(ref, namespace(pod)) if ref is not None else None
        job = self.jobs.get(k) if k is not None else None
        if job is None or reconcile.is_finished(job):
            if _has_finalizer(pod) and not final:
                self.enqueue(ORPHAN + key(pod))  # syncJob will not remove it
            return
        assert k is not None
        self.expectations.deletion_observed(k, key(pod))
        if final or not _has_finalizer(pod):
            self.finalizer_expectations.removal_observed(k, uid(pod))
        self._batched(k)

    # ---- sync ----
    def _record(self, job: Obj, created: list[dict[str, Any]], deleted: list[str]) -> None:
        """The events upstream's pod control records on the Job."""
        if self.recorder is None:
            return
        for pod in created:
            self.recorder.event(dict(job), "Normal", "SuccessfulCreate", f"Created pod: {pod['metadata']['name']}")
        for pod_key in deleted:
            self.recorder.event(dict(job), "Normal", "SuccessfulDelete", f"Deleted pod: {pod_key.split('/', 1)[-1]}")

    async def _sync_orphan(self, pod_key: str) -> None:
        pod = self.pods.get(pod_key)
        if pod is None:
            return
        k = self._owner_key(controller_ref(pod), namespace(pod))
        plan = reconcile.orphan_pod_plan(pod, self.jobs.get(k) if k is not None else None)
        outcome = await self.executor.run(plan)
        if outcome.error is not None:
            raise outcome.error

    async def sync(self, k: str) -> float | None:
        if k.startswith(ORPHAN):
            await self._sync_orphan(k.removeprefix(ORPHAN))
            return None
        job = self.jobs.get(k)
        if job is None:
            self.expectations.delete(k)
            self.finalizer_expectations.delete(k)
            self.backoffs.pop(k, None)
            return None
        if reconcile.is_finished(job):
            self.backoffs.pop(k, None)
            return None
        mono, now = self.clock.now(), self.clock.wall()
        satisfied = self.expectations.satisfied(k, mono)
        record = self.backoffs.get(k, backoff.BackoffRecord())
        s = reconcile.sync(job, self.pods.in_namespace(namespace(job)), now=now, satisfied=satisfied, record=record,
                           expected_removed=self.finalizer_expectations.expected(k))
        if s.expect_creations:
            self.expectations.expect_creations(k, s.expect_creations, mono)
        elif s.expect_deletions:
            self.expectations.expect_deletions(k, s.expect_deletions, mono)
        self.finalizer_expectations.expect_removed(k, s.expect_finalizer_removals)
        managing = await self.executor.run(Plan(s.plan.actions[: s.tracking_from]))
        self._record(job, managing.created, [p for p in s.expect_deletions if p not in managing.failed_deletes])
        for _ in range(managing.not_created):
            self.expectations.creation_observed(k)
        for pod_key in managing.failed_deletes:
            self.expectations.deletion_observed(k, pod_key)
        tracking = await self.executor.run(Plan(s.plan.actions[s.tracking_from :], s.plan.requeue_after))
        by_uid = {uid(p): p for p in self.pods.controlled_by(uid(job))}
        written = {**managing.written, **tracking.written}
        for pod_uid in s.expect_finalizer_removals:  # a removal not written is not expected to be seen
            pod = by_uid.get(pod_uid)
            if pod is None or ("Pod", namespace(pod), name(pod)) not in written:
                self.finalizer_expectations.removal_observed(k, pod_uid)
        if ("Job", namespace(job), name(job)) in tracking.written:
            self.backoffs[k] = s.backoff  # as upstream: kept once the status with those pods is written
        if managing.error is not None:
            raise managing.error
        if tracking.error is not None:
            raise tracking.error
        return tracking.requeue_after


class TTLAfterFinishedController(Controller):
    name = "ttl-after-finished"
    workers = 2

    def __init__(self, clock: Clock, client: Client, recorder: Recorder | None, *, jobs: Informer) -> None:
        super().__init__(clock)
        self.jobs, self.client = jobs, client
        self.executor = Executor(client, recorder, "ttl-after-finished-controller")
        jobs.add_handlers(Handlers(self._changed, lambda _o, n: self._changed(n)))

    def _changed(self, job: Obj) -> None:
        """needsCleanup: a finished Job with a TTL, not being deleted."""
        if (not being_deleted(job) and spec(job).get("ttlSecondsAfterFinished") is not None
                and reconcile.is_finished(job)):
            self.enqueue(key(job))

    async def sync(self, k: str) -> float | None:
        job = self.jobs.get(k)
        if job is None:
            return None
        now = self.clock.wall()
        plan = ttl.decide(job, now)
        if plan.of_type(Delete):
            try:  # the cached TTL may be stale: decide again on a fresh read before deleting
                fresh = await self.client.resource(reconcile.API_VERSION, reconcile.KIND).get(namespace(job), name(job))
            except ApiError as e:
                if e.not_found:
                    return None
                raise
            plan = ttl.decide(fresh, now)
        outcome = await self.executor.run(plan)
        if outcome.error is not None:
            raise outcome.error
        return outcome.requeue_after
