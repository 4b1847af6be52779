"""The CronJob controller's thin loop (cronjob_controllerv2.go around the pure core in cronjob/).

Handlers turn CronJob and Job events into keys (a Job's controlling CronJob); `sync` gathers the
Jobs the CronJob controls from the cache, confirms with an uncached read any active Job the cache
does not show (a slow watch is not a missing Job), asks the core for a plan, and runs it: the Job
creates first, then the status write with the created Jobs' references (their uids, which only the
create returns, as upstream's getRef(jobResp)), then the rest. The key comes back at the next
schedule time the core computed from the injected clock (100 ms after it, as upstream).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodeagent.cluster.controllers.common.actions import Create, Plan, UpdateStatus
from nodeagent.cluster.controllers.common.meta import controller_ref, key, name, namespace, status, uid
from nodeagent.cluster.controllers.cronjob import reconcile
from nodeagent.cluster.controllers.manager.client import ApiError, Client, Recorder
from nodeagent.cluster.controllers.manager.executor import Executor
from nodeagent.cluster.controllers.manager.informer import Handlers, Informer
from nodeagent.cluster.controllers.manager.owned import OwnerOf
from nodeagent.core.clock import Clock

Obj = Mapping[str, Any]
JOB_API_VERSION, JOB_KIND = "batch/v1", "Job"


class CronJobController(OwnerOf):
    name = "cronjob"
    workers = 2
    owner_kind = reconcile.KIND

    def __init__(self, clock: Clock, client: Client, recorder: Recorder | None, *, cronjobs: Informer,
                 jobs: Informer) -> None:
        super().__init__(clock)
        self.cronjobs, self.jobs, self.client = cronjobs, jobs, client
        self.owners = cronjobs
        self.executor = Executor(client, recorder, "cronjob-controller")
        cronjobs.add_handlers(Handlers(self._cj_changed, lambda _o, n: self._cj_changed(n), self._cj_changed))
        jobs.add_handlers(self.owned_handlers())

    def _cj_changed(self, cj: Obj) -> None:
        self.enqueue(key(cj))

    async def _created_before(self, cj: Obj, plan: Plan) -> dict[str, Any] | None:
        """AlreadyExists: a Job this CronJob made for that time earlier, its status write lost (a
        crash between the two) is put back in the active list, as upstream does; None otherwise."""
        (create,) = plan.of_type(Create)
        got = await self.client.resource(JOB_API_VERSION, JOB_KIND).get(namespace(cj), name(create.obj))
        ref = controller_ref(got)
        if ref is None or str(ref.get("uid") or "") != uid(cj):
            return None
        if any(str(a.get("uid") or "") == uid(got) for a in status(cj).get("active") or []):
            return None
        return got

    async def _jobs_to_reconcile(self, cj: Obj) -> list[Obj]:
        """getJobsToBeReconciled, plus the active Jobs the cache does not show yet but the API does."""
        jobs = list(self.jobs.controlled_by(uid(cj)))
        seen = {uid(j) for j in jobs}
        res = self.client.resource(JOB_API_VERSION, JOB_KIND)
        for ref in status(cj).get("active") or []:
            if str(ref.get("uid") or "") in seen:
                continue
            try:
                got = await res.get(str(ref.get("namespace") or namespace(cj)), str(ref.get("name") or ""))
            except ApiError as e:
                if e.not_found:
                    continue  # really missing: the core drops it from the active list
                raise
            if uid(got) == str(ref.get("uid") or ""):
                jobs.append(got)
        return jobs

    async def sync(self, k: str) -> float | None:
        cj = self.cronjobs.get(k)
        if cj is None:
            return None
        jobs = await self._jobs_to_reconcile(cj)
        active = {str(a.get("uid") or "") for a in status(cj).get("active") or []}
        if any(uid(j) not in active and not reconcile.finished(j) for j in jobs):
            # a Job it does not list: the cached CronJob may predate the status write that lists it
            try:
                cj = await self.client.resource(reconcile.API_VERSION, reconcile.KIND).get(namespace(cj), name(cj))
            except ApiError as e:
                if e.not_found:
                    return None
                raise
        plan = reconcile.sync(cj, jobs, now=self.clock.wall())
        cut = next((i for i, a in enumerate(plan.actions) if isinstance(a, UpdateStatus)), len(plan.actions))
        first = await self.executor.run(Plan(plan.actions[:cut]))
        created = first.created
        if isinstance(first.error, ApiError) and first.error.already_exists:
            existing = await self._created_before(cj, plan)
            if existing is None:
                return None  # another actor's Job of that name: it keeps the status
            created = [existing]
        elif first.error is not None:
            raise first.error
        rest = plan.actions[cut:]
        if rest and isinstance(rest[0], UpdateStatus) and created:
            rest[0] = UpdateStatus(_with_refs(rest[0].obj, created), rest[0].reason)
        outcome = await self.executor.run(Plan(rest, plan.requeue_after))
        if outcome.error is not None:
            raise outcome.error
        return outcome.requeue_after


def _with_refs(cj: dict[str, Any], created: list[dict[str, Any]]) -> dict[str, Any]:
    """The active references of the Jobs just created, completed with what the create returned."""
    by_name = {name(j): j for j in created if j.get("kind") == JOB_KIND}
    active = []
    for ref in (cj.get("status") or {}).get("active") or []:
        job = by_name.get(str(ref.get("name") or ""))
        if job is not None and not ref.get("uid"):
            ref = {**ref, "uid": uid(job), "resourceVersion": job["metadata"].get("resourceVersion", "")}
        active.append(ref)
    return {**cj, "status": {**cj["status"], "active": active}}
