"""`pods/eviction`: a delete that honours PodDisruptionBudgets (kube's EvictionREST.Create).

The decision is the pure core's (controllers/disruption/eviction.py); this module reads and writes:
a pod that no budget guards (terminal, pending, terminating) is deleted at once, retried on a
conflict; otherwise the one matching budget is spent through a compare-and-swap of its status
(disruptionsAllowed - 1, the pod in disruptedPods), re-read and re-checked when another eviction
won the race, and only then is the pod marked DisruptionTarget and deleted with the Eviction's
deleteOptions. A refusal is upstream's Status: 429 TooManyRequests with a DisruptionBudget cause,
403 for a broken budget, 500 when several budgets select the pod.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import structlog

from nodeagent.cluster.controllers.disruption.eviction import (
    Denied,
    can_ignore_budget,
    check_and_decrement,
    decide,
    enforce_resource_version,
    still_processing,
    with_disruption_target,
)
from nodeagent.cluster.registry import errors
from nodeagent.cluster.registry.options import Context, DeleteOptions, ListOptions, parse_delete_options
from nodeagent.cluster.registry.store import GenericStore
from nodeagent.cluster.registry.strategy import Obj
from nodeagent.core.errors import FieldError

log = structlog.get_logger(__name__)

EVICTION_VERSIONS = (None, "", "policy/v1", "policy/v1beta1")
EVICTIONS_RETRY = 20  # upstream's EvictionsRetry steps
SUCCESS: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}


def parse_eviction(body: Any, name: str) -> DeleteOptions:
    """The deleteOptions of a policy/v1 (or v1beta1) Eviction; 400/422 as kube-apiserver."""
    if not isinstance(body, dict):
        raise errors.bad_request("the body of the request must be an Eviction object")
    if body.get("kind") not in (None, "", "Eviction") or body.get("apiVersion") not in EVICTION_VERSIONS:
        raise errors.bad_request(f"the kind in the data ({str(body.get('kind'))[:40]}) does not match the expected "
                                 "kind (Eviction)")
    meta = body.get("metadata")
    if not isinstance(meta, dict) or meta.get("name") != name:
        raise errors.bad_request("name in URL does not match name in Eviction object")
    opts = body.get("deleteOptions")
    if opts is not None and not isinstance(opts, dict):
        raise errors.invalid("Eviction", "policy", name,
                             [FieldError("deleteOptions", "Invalid value: must be an object")])
    return parse_delete_options(opts, {})


def _precondition_conflict(name: str, what: str, want: str, got: str) -> errors.StatusError:
    return errors.conflict("pods", "", name, f"the {what} in the precondition ({want}) does not match the {what} in "
                                             f"record ({got}). The object might have been "
                                             f"{'deleted and then recreated' if what == 'UID' else 'modified'}")


async def _mark_and_delete(pods: GenericStore, namespace: str, name: str, opts: DeleteOptions, ctx: Context) -> None:
    """addConditionAndDeletePod: DisruptionTarget on the latest pod (its preconditions checked), then
    the delete, whose resourceVersion precondition follows that write."""
    if not ctx.dry_run:
        now = pods.clock.wall()

        def mark(latest: Obj) -> Obj:
            meta = latest["metadata"]
            if opts.uid and opts.uid != meta.get("uid"):
                raise _precondition_conflict(name, "UID", opts.uid, str(meta.get("uid")))
            if opts.resource_version and opts.resource_version != meta.get("resourceVersion"):
                raise _precondition_conflict(name, "ResourceVersion", opts.resource_version,
                                             str(meta.get("resourceVersion")))
            return with_disruption_target(latest, now)

        marked = await pods.guaranteed_update(namespace, name, mark, ctx, subresource="status")
        if opts.resource_version:
            opts = dataclasses.replace(opts, resource_version=marked["metadata"]["resourceVersion"])
    await pods.delete(namespace, name, opts, ctx)


async def evict(pods: GenericStore, pdbs: GenericStore, namespace: str, name: str, body: Any, ctx: Context
                ) -> dict[str, Any]:
    """Evict the pod; the Status to answer (its code is the HTTP status). Refusals raise StatusError."""
    original = parse_eviction(body, name)
    ctx.dry_run = ctx.dry_run or original.dry_run
    retry_conflicts = original.resource_version is None
    pod: Obj | None = None
    for attempt in range(EVICTIONS_RETRY):
        pod = await pods.get(namespace, name)
        if not can_ignore_budget(pod):
            break
        opts = original
        if enforce_resource_version(pod) and original.resource_version is None:
            opts = dataclasses.replace(original, resource_version=pod["metadata"]["resourceVersion"])
        try:
            await _mark_and_delete(pods, namespace, name, opts, ctx)
        except errors.StatusError as e:
            if e.code == 409 and retry_conflicts and attempt + 1 < EVICTIONS_RETRY:
                continue
            raise
        log.info("pod_evicted", namespace=namespace, pod=name, budget="", why="no budget guards it")
        return SUCCESS
    assert pod is not None
    verdict = decide(pod, (await pdbs.list(namespace, ListOptions())).items)
    if verdict.status is not None:
        return verdict.status
    budget = verdict.budget
    if budget is not None:
        now = pdbs.clock.wall()
        try:
            if ctx.dry_run:
                check_and_decrement(budget, name, now=now, dry_run=True)
            else:
                await pdbs.guaranteed_update(
                    namespace, verdict.budget_name, lambda latest: check_and_decrement(latest, name, now=now),
                    Context(field_manager="kube-apiserver", user="system:apiserver"), subresource="status")
        except Denied as d:
            st = d.status
            raise errors.StatusError(st["code"], st["reason"], st["message"], st.get("details")) from None
    opts = original
    if verdict.precondition and original.resource_version is None:
        opts = dataclasses.replace(original, resource_version=pod["metadata"]["resourceVersion"])
    try:
        await _mark_and_delete(pods, namespace, name, opts, ctx)
    except errors.StatusError as e:
        if e.code == 409 and verdict.precondition and original.resource_version is None:
            st = still_processing(verdict.budget_name)
            raise errors.StatusError(429, "TooManyRequests", st["message"], st["details"]) from None
        raise
    log.info("pod_evicted", namespace=namespace, pod=name, budget=verdict.budget_name, dry_run=ctx.dry_run)
    return SUCCESS

