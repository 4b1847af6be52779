"""Performs a pure core's plan through the client, in order, stopping at the first failure.

What is not a failure: a delete or patch of an object already gone (404: the goal is reached or
moot), a delete skipped because an owner the decision thought absent exists after all (the
uncached re-read of `verify_absent`). A slow-start burst runs its batches concurrently and stops at
the first batch with a failure; the outcome says how many creates were not made and which deletes
failed, so the loop can take them back from its expectations.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import structlog

from nodeagent.cluster.controllers.common.actions import (
    Action,
    Create,
    Delete,
    Event,
    ObjectRef,
    Patch,
    Plan,
    Requeue,
    SlowStart,
    Update,
    UpdateStatus,
)
from nodeagent.cluster.controllers.common.meta import key, name, namespace, resource_version
from nodeagent.cluster.controllers.manager.client import ApiError, Client, Obj, Recorder

log = structlog.get_logger(__name__)


@dataclass(slots=True)
class Outcome:
    error: Exception | None = None
    not_created: int = 0  # creates of a burst that failed or were never attempted
    failed_deletes: list[str] = field(default_factory=list)  # keys of objects whose delete failed
    created: list[Obj] = field(default_factory=list)
    requeue_after: float | None = None
    writes: int = 0
    written: dict[tuple[str, str, str], str] = field(default_factory=dict)  # (kind, ns, name) -> new resourceVersion


class Executor:
    def __init__(self, client: Client, recorder: Recorder | None, controller: str) -> None:
        self.client, self.recorder, self.controller = client, recorder, controller

    async def run(self, plan: Plan, *, keep_going: bool = False) -> Outcome:
        """`keep_going`: run every action and report the first failure (independent actions)."""
        out = Outcome(requeue_after=plan.requeue_after)
        for i, action in enumerate(plan.actions):
            try:
                await self._one(action, out)
            except Exception as e:  # noqa: BLE001  (any failure stops the plan and requeues the key)
                if out.error is None:
                    out.error = e
                if keep_going:
                    log.info("controller_action_failed", controller=self.controller, action=type(action).__name__,
                             error=str(e))
                    continue
                for rest in plan.actions[i + 1 :]:
                    if isinstance(rest, SlowStart):
                        out.not_created += len(rest.creates)
                    elif isinstance(rest, Create):
                        out.not_created += 1
                    elif isinstance(rest, Delete):
                        out.failed_deletes.append(_ref_key(rest.ref))
                if isinstance(action, Delete):
                    out.failed_deletes.append(_ref_key(action.ref))
                elif isinstance(action, Create):
                    out.not_created += 1
                break
        return out

    async def _one(self, action: Action, out: Outcome) -> None:
        if isinstance(action, SlowStart):
            await self._slow_start(action, out)
        elif isinstance(action, Create):
            out.created.append(await self._create(action))
            out.writes += 1
        elif isinstance(action, Delete):
            if await self._delete(action):
                out.writes += 1
        elif isinstance(action, Patch):
            try:
                got = await self.client.resource(action.ref.api_version, action.ref.kind).patch(
                    action.ref.namespace, action.ref.name, action.patch, action.patch_type, action.subresource
                )
                _wrote(out, got)
                out.writes += 1
            except ApiError as e:
                if not e.not_found:
                    raise
        elif isinstance(action, Update | UpdateStatus):
            obj = action.obj
            rv = out.written.get(_coords(obj))
            if rv is not None:  # written earlier in this plan: build on that write, as upstream does
                obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": rv}}
            res = self.client.resource(str(obj.get("apiVersion") or ""), str(obj.get("kind") or ""))
            _wrote(out, await res.update(namespace(obj), obj, "status" if isinstance(action, UpdateStatus) else ""))
            out.writes += 1
        elif isinstance(action, Event):
            if self.recorder is not None:
                ref = action.ref
                involved: Obj = {
                    "apiVersion": ref.api_version,
                    "kind": ref.kind,
                    "metadata": {"name": ref.name, "namespace": ref.namespace, "uid": ref.uid},
                }
                self.recorder.event(involved, action.type, action.reason, action.message)
        elif isinstance(action, Requeue) and (out.requeue_after is None or action.after < out.requeue_after):
            out.requeue_after = action.after

    async def _create(self, action: Create) -> Obj:
        obj = action.obj
        res = self.client.resource(str(obj.get("apiVersion") or ""), str(obj.get("kind") or ""))
        created = await res.create(namespace(obj), obj)
        log.debug("controller_created", controller=self.controller, kind=obj.get("kind"), object=key(created))
        return created

    async def _slow_start(self, action: SlowStart, out: Outcome) -> None:
        attempted = 0
        for batch in action.batches():
            attempted += len(batch)
            results = await asyncio.gather(*(self._create(c) for c in batch), return_exceptions=True)
            failures = [r for r in results if isinstance(r, BaseException)]
            out.created.extend(r for r in results if not isinstance(r, BaseException))
            out.writes += len(batch) - len(failures)
            if failures:
                out.not_created += len(failures) + len(action.creates) - attempted
                err = failures[0]
                raise err if isinstance(err, Exception) else RuntimeError(str(err))

    async def _delete(self, action: Delete) -> bool:
        """Whether a delete was sent and accepted."""
        ref = action.ref
        for owner in action.verify_absent:
            if await self._exists(owner):
                log.info("controller_delete_skipped", controller=self.controller, object=str(ref),
                         owner=str(owner), why="owner exists")
                return False
        try:
            await self.client.resource(ref.api_version, ref.kind).delete(
                ref.namespace,
                ref.name,
                uid=ref.uid or None,
                resource_version=action.resource_version,
                propagation=action.propagation,
                grace_period_seconds=action.grace_period_seconds,
            )
        except ApiError as e:
            if not e.not_found:
                raise
            return False
        log.info("controller_deleted", controller=self.controller, object=str(ref), reason=action.reason,
                 propagation=action.propagation or "")
        return True

    async def _exists(self, ref: ObjectRef) -> bool:
        """An uncached read: the owner with the referenced uid is there."""
        if self.client.namespaced(ref.api_version, ref.kind) is None:
            return True  # not served: never decide it is gone
        ns = ref.namespace if self.client.namespaced(ref.api_version, ref.kind) else ""
        try:
            got = await self.client.resource(ref.api_version, ref.kind).get(ns, ref.name)
        except ApiError as e:
            if e.not_found:
                return False
            raise
        return not ref.uid or str((got.get("metadata") or {}).get("uid") or "") == ref.uid




def _wrote(out: Outcome, obj: Obj) -> None:
    rv = resource_version(obj)
    if rv:
        out.written[_coords(obj)] = rv


def _coords(obj: Obj) -> tuple[str, str, str]:
    return str(obj.get("kind") or ""), namespace(obj), name(obj)


def _ref_key(ref: ObjectRef) -> str:
    return f"{ref.namespace}/{ref.name}" if ref.namespace else ref.name

