"""One Job sync (syncJob, manageJob, trackJobStatusAndRemoveFinalizers) with finalizer-based
tracking, as upstream does it since 1.26:

every pod is created with the `batch.kubernetes.io/job-tracking` finalizer; a finished pod's uid
first goes into `status.uncountedTerminatedPods` (written), then its finalizer is removed, then
the uid moves into `status.succeeded`/`failed` (a merge patch of the status, no resourceVersion:
the counters are the controller's own). A crash between two steps is repaired by the next sync
from what is stored, and no pod is counted twice or lost.

Terminal conditions as upstream with JobManagedBy/JobPodReplacementPolicy on (1.31+):
FailureTarget (BackoffLimitExceeded, DeadlineExceeded, PodFailurePolicy) or SuccessCriteriaMet
first, active pods deleted, then Failed/Complete once no pod is terminating and nothing is
uncounted. Not implemented: backoffLimitPerIndex/maxFailedIndexes, successPolicy, managedBy.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cmp_to_key
from typing import Any

from nodeagent.cluster.controllers.common import conditions, ownership
from nodeagent.cluster.controllers.common.actions import (
    Create,
    Delete,
    Event,
    ObjectRef,
    Patch,
    Plan,
    SlowStart,
    UpdateStatus,
)
from nodeagent.cluster.controllers.common.meta import (
    being_deleted,
    controller_ref,
    finalizers,
    format_time,
    int_field,
    key,
    name,
    new_controller_ref,
    parse_time,
    spec,
    status,
    uid,
)
from nodeagent.cluster.controllers.common.pods import active_pods_cmp, is_active, is_ready, is_terminating, phase
from nodeagent.cluster.controllers.common.podtemplate import pod_from_template
from nodeagent.cluster.controllers.job import backoff, failurepolicy, indexes

API_VERSION, KIND = "batch/v1", "Job"
TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
MAX_UNCOUNTED_PODS = 500
MAX_POD_CREATE_DELETE_PER_SYNC = 500
Obj = Mapping[str, Any]


def is_finished(job: Obj) -> bool:
    return any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
        for c in status(job).get("conditions") or []
    )


def finished_condition(job: Obj) -> Mapping[str, Any] | None:
    return next(
        (
            c
            for c in status(job).get("conditions") or []
            if c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
        ),
        None,
    )


def _indexed(job: Obj) -> bool:
    return spec(job).get("completionMode") == "Indexed"


def _only_replace_failed(job: Obj) -> bool:
    return spec(job).get("podReplacementPolicy") == "Failed" or bool(spec(job).get("podFailurePolicy"))


def is_pod_failed(pod: Obj, job: Obj) -> bool:
    if phase(pod) == "Failed":
        return True
    if _only_replace_failed(job):
        return False
    return being_deleted(pod) and phase(pod) != "Succeeded"  # a deleted pod never reaching Failed counts


@dataclass(slots=True)
class JobSync:
    plan: Plan
    backoff: backoff.BackoffRecord
    expect_creations: int = 0
    expect_deletions: list[str] = field(default_factory=list)  # pod keys (manageJob's deletes only)
    expect_finalizer_removals: list[str] = field(default_factory=list)  # pod uids
    tracking_from: int = 0  # plan.actions[tracking_from:] track the status (run even when managing failed)


def _has_finalizer(pod: Obj) -> bool:
    return TRACKING_FINALIZER in finalizers(pod)


def remove_finalizer_patch(pod: Obj) -> Patch:
    return Patch(
        ObjectRef.of(pod, "v1", "Pod"),
        {"metadata": {"$deleteFromPrimitiveList/finalizers": [TRACKING_FINALIZER]}},
        reason="JobTracking",
    )


def job_pod(job: Obj, index: int | None) -> dict[str, Any]:
    tmpl = copy.deepcopy(dict(spec(job).get("template") or {}))
    tmeta = tmpl.setdefault("metadata", {})
    if TRACKING_FINALIZER not in (tmeta.get("finalizers") or []):
        tmeta["finalizers"] = [*(tmeta.get("finalizers") or []), TRACKING_FINALIZER]
    gen = None
    if index is not None:
        for c in [*(tmpl["spec"].get("initContainers") or []), *(tmpl["spec"].get("containers") or [])]:
            if not any(e.get("name") == "JOB_COMPLETION_INDEX" for e in c.get("env") or []):
                c["env"] = [
                    *(c.get("env") or []),
                    {
                        "name": "JOB_COMPLETION_INDEX",
                        "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{indexes.COMPLETION_INDEX}']"}},
                    },
                ]
        tmeta["annotations"] = {**(tmeta.get("annotations") or {}), indexes.COMPLETION_INDEX: str(index)}
        tmeta["labels"] = {**(tmeta.get("labels") or {}), indexes.COMPLETION_INDEX: str(index)}
        tmpl["spec"]["hostname"] = f"{name(job)}-{index}"
        gen = indexes.generate_name(name(job), index)
    return pod_from_template(tmpl, job, new_controller_ref(job, API_VERSION, KIND), gen)


def _remove_for_indexed(pods: list[Obj], completions: int) -> tuple[list[Obj], list[Obj]]:
    """appendDuplicatedIndexPodsForRemoval: pods without a valid index, and all but one per index."""
    rm: list[Obj] = []
    by_index: dict[int, list[Obj]] = {}
    for p in pods:
        ix = indexes.completion_index(p)
        if ix == indexes.UNKNOWN or ix >= completions:
            rm.append(p)
        else:
            by_index.setdefault(ix, []).append(p)
    left: list[Obj] = []
    for ix in sorted(by_index):
        group = sorted(by_index[ix], key=cmp_to_key(active_pods_cmp))
        rm.extend(group[:-1])
        left.append(group[-1])
    return rm, left


def sync(
    job: Obj,
    candidates: Sequence[Obj],
    *,
    now: float,
    satisfied: bool = True,
    record: backoff.BackoffRecord | None = None,
    expected_removed: frozenset[str] = frozenset(),
    default_backoff: float = backoff.DEFAULT_BACKOFF,
    max_backoff: float = backoff.MAX_BACKOFF,
) -> JobSync:
    """`expected_removed`: pod uids whose finalizer removal the loop issued and has not yet seen."""
    record = record or backoff.BackoffRecord()
    out = JobSync(Plan(), record)
    if is_finished(job):
        return out
    plan = out.plan
    ref = ObjectRef.of(job, API_VERSION, KIND)
    sp, st0 = spec(job), status(job)
    new_status: dict[str, Any] = copy.deepcopy(dict(st0))
    unc = new_status.setdefault("uncountedTerminatedPods", {})
    unc_succ, unc_fail = set(unc.get("succeeded") or []), set(unc.get("failed") or [])

    claim = ownership.claim(job, API_VERSION, KIND, sp.get("selector"), candidates)
    plan.actions.extend(ownership.claim_actions(job, API_VERSION, KIND, claim, "v1", "Pod", [TRACKING_FINALIZER]))
    pods = list(claim.claimed)
    adopted = {uid(p) for p in claim.adopt}
    completions = sp.get("completions")
    indexed = _indexed(job)

    def tracked(p: Obj) -> bool:
        return (_has_finalizer(p) or uid(p) in adopted) and uid(p) not in expected_removed

    def valid(p: Obj) -> bool:
        return not indexed or 0 <= indexes.completion_index(p) < int(completions or 0)

    active = [p for p in pods if is_active(p)]
    terminating = sum(1 for p in pods if is_terminating(p))
    new_succ = [p for p in pods if tracked(p) and uid(p) not in unc_succ and valid(p) and phase(p) == "Succeeded"]
    new_fail = [p for p in pods if tracked(p) and uid(p) not in unc_fail and valid(p) and is_pod_failed(p, job)]
    policy = sp.get("podFailurePolicy")
    counted_fail = [p for p in new_fail if failurepolicy.match(policy, p)[1]]
    succeeded = int_field(st0.get("succeeded")) + len(new_succ) + len(unc_succ)
    failed = int_field(st0.get("failed")) + len(counted_fail) + len(unc_fail)
    suspended = bool(sp.get("suspend"))
    if not st0.get("startTime") and not suspended:
        new_status["startTime"] = format_time(now)
    out.backoff = backoff.next_record(record, new_succ, new_fail)

    finished: dict[str, Any] | None = None
    smet = conditions.find(new_status.get("conditions"), "SuccessCriteriaMet")
    if smet is not None and smet.get("status") == "True":
        finished = dict(smet)
    else:
        ft = conditions.find(new_status.get("conditions"), "FailureTarget")
        if ft is not None and ft.get("status") == "True":
            finished = conditions.new_condition(
                "Failed", "True", ft.get("reason", ""), ft.get("message", ""), now, probe_time=True
            )
        elif policy:
            msg = next((m for p in pods if is_pod_failed(p, job) and (m := failurepolicy.match(policy, p)[0])), None)
            if msg is not None:
                finished = conditions.new_condition(
                    "FailureTarget", "True", "PodFailurePolicy", msg, now, probe_time=True
                )
    limit = int_field(sp.get("backoffLimit"), 6)
    start = parse_time(new_status.get("startTime"))
    deadline = sp.get("activeDeadlineSeconds")
    if finished is None:
        if failed > limit or _past_backoff_on_failure(job, pods, limit):
            finished = conditions.new_condition(
                "FailureTarget",
                "True",
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit",
                now,
                probe_time=True,
            )
        elif deadline is not None and start is not None and not suspended and now - start >= int(deadline):
            finished = conditions.new_condition(
                "FailureTarget",
                "True",
                "DeadlineExceeded",
                "Job was active longer than specified deadline",
                now,
                probe_time=True,
            )
        elif deadline is not None and start is not None and not suspended:
            plan.requeue(start + int(deadline) - now)

    prev_indexes: set[int] = set()
    succ_indexes: set[int] = set()
    if indexed:
        prev_indexes = indexes.parse(st0.get("completedIndexes"), int(completions or 0))
        succ_indexes = prev_indexes | {indexes.completion_index(p) for p in new_succ}
        succeeded = len(succ_indexes)

    ready = sum(1 for p in active if is_ready(p))
    n_active = len(active)
    deletes: list[Obj] = []
    managed = False  # manageJob's deletes (expected, finalizer first) vs deleteActivePods' (finalizers kept)
    if finished is not None:
        deletes = list(active)
        if not satisfied:
            finished = None
    elif satisfied and not being_deleted(job):
        deletes, creates, wait = _manage(
            job, active, pods, succeeded, succ_indexes, terminating, out.backoff, now, default_backoff, max_backoff
        )
        managed = True
        if wait > 0:
            plan.requeue(wait)
        if creates:
            out.expect_creations = len(creates)
            plan.add(SlowStart(tuple(Create(job_pod(job, ix), reason="SuccessfulCreate") for ix in creates)))
            n_active += len(creates)
        if completions is None:
            complete = succeeded > 0 and n_active - len(deletes) == 0
        else:
            complete = succeeded >= int(completions) and n_active - len(deletes) == 0
        if complete:
            finished = conditions.new_condition(
                "SuccessCriteriaMet",
                "True",
                "CompletionsReached",
                "Reached expected number of succeeded pods",
                now,
                probe_time=True,
            )
        elif suspended:
            new_status["conditions"], changed = conditions.ensure_job_condition(
                new_status.get("conditions"), "Suspended", "True", "JobSuspended", "Job suspended", now
            )
            if changed:
                plan.add(Event(ref, "Normal", "Suspended", "Job suspended"))
        else:
            new_status["conditions"], changed = conditions.ensure_job_condition(
                new_status.get("conditions"), "Suspended", "False", "JobResumed", "Job resumed", now
            )
            if changed:
                plan.add(Event(ref, "Normal", "Resumed", "Job resumed"))
                new_status["startTime"] = format_time(now)
    for p in deletes[:MAX_POD_CREATE_DELETE_PER_SYNC]:
        if managed:
            if _has_finalizer(p):
                plan.add(remove_finalizer_patch(p))
            out.expect_deletions.append(key(p))
        plan.add(Delete(ObjectRef.of(p, "v1", "Pod"), reason="SuccessfulDelete"))
        n_active -= 1
        terminating += 1
        ready -= int(is_ready(p))
    new_status.update(active=n_active, ready=ready, terminating=terminating)

    # ---- tracking: uncounted first, then finalizers, then counters ----
    out.tracking_from = len(plan.actions)
    to_unfinalize: list[Obj] = []
    new_succ_idx: list[int] = []
    for p in pods:
        if not tracked(p) or uid(p) in expected_removed:
            continue
        considered_failed = is_pod_failed(p, job)
        if not (being_deleted(job) or finished is not None or phase(p) == "Succeeded" or considered_failed):
            continue
        to_unfinalize.append(p)
        if phase(p) == "Succeeded" and uid(p) not in unc_fail:
            if indexed:
                ix = indexes.completion_index(p)
                if ix != indexes.UNKNOWN and ix < int(completions or 0) and ix not in prev_indexes:
                    new_succ_idx.append(ix)
            elif uid(p) not in unc_succ:
                unc_succ.add(uid(p))
        elif (
            (considered_failed or (finished is not None and finished["type"] != "SuccessCriteriaMet"))
            and uid(p) not in unc_fail
            and valid(p)
            and failurepolicy.match(policy, p)[1]
        ):
            unc_fail.add(uid(p))
        if len(new_succ_idx) + len(unc_succ) + len(unc_fail) >= MAX_UNCOUNTED_PODS:
            break
    if indexed:
        succ_indexes = prev_indexes | set(new_succ_idx)
        new_status["completedIndexes"] = indexes.format_intervals(succ_indexes)
        new_status["succeeded"] = len(succ_indexes)
    final: dict[str, Any] | None = None
    if finished is not None:
        if finished["type"] == "FailureTarget":
            if conditions.find(new_status.get("conditions"), "FailureTarget") is None:
                new_status["conditions"] = [*(new_status.get("conditions") or []), finished]
            final = conditions.new_condition(
                "Failed", "True", finished.get("reason", ""), finished.get("message", ""), now, probe_time=True
            )
        elif finished["type"] == "SuccessCriteriaMet":
            if conditions.find(new_status.get("conditions"), "SuccessCriteriaMet") is None:
                new_status["conditions"] = [*(new_status.get("conditions") or []), finished]
            final = conditions.new_condition(
                "Complete", "True", finished.get("reason", ""), finished.get("message", ""), now, probe_time=True
            )
        else:
            final = finished
    _set_uncounted(unc, sorted(unc_succ), sorted(unc_fail))
    if new_status != dict(st0):
        obj = {**copy.deepcopy(dict(job)), "status": new_status}
        plan.add(UpdateStatus(obj, reason="JobTracking"))
    for p in to_unfinalize:
        plan.add(remove_finalizer_patch(p))
        out.expect_finalizer_removals.append(uid(p))
    with_finalizer = {uid(p) for p in pods if _has_finalizer(p) and uid(p) not in expected_removed}
    # cleanUncountedPodsWithoutFinalizers: an uncounted uid whose pod has no finalizer left (removed
    # before a crash, or gone) moves to the counters even when nothing else is to be done
    released = any(u not in with_finalizer for u in [*(unc.get("succeeded") or []), *(unc.get("failed") or [])])
    if to_unfinalize or final is not None or released:
        flushed = copy.deepcopy(new_status)
        removed = {uid(p) for p in to_unfinalize}
        fu = flushed["uncountedTerminatedPods"]
        fs, ff = list(fu.get("succeeded") or []), list(fu.get("failed") or [])
        moved_s = [u for u in fs if u in removed or u not in with_finalizer]
        moved_f = [u for u in ff if u in removed or u not in with_finalizer]
        if not indexed:
            flushed["succeeded"] = int_field(flushed.get("succeeded")) + len(moved_s)
        flushed["failed"] = int_field(flushed.get("failed")) + len(moved_f)
        _set_uncounted(fu, [u for u in fs if u not in moved_s], [u for u in ff if u not in moved_f])
        if final is not None and not fu and terminating == 0:
            flushed["conditions"], _ = conditions.ensure_job_condition(
                flushed.get("conditions"), final["type"], "True", final.get("reason", ""), final.get("message", ""), now
            )
            if final["type"] == "Complete":
                flushed["completionTime"] = format_time(now)
                plan.add(Event(ref, "Normal", "Completed", "Job completed"))
            else:
                plan.add(Event(ref, "Warning", final.get("reason", ""), final.get("message", "")))
        if flushed != new_status:
            # a JSON merge patch: an emptied uid list must be sent as null to be removed
            uncounted = {"succeeded": fu.get("succeeded"), "failed": fu.get("failed")}
            body = {**flushed, "uncountedTerminatedPods": uncounted}
            plan.add(Patch(ref, {"status": body}, "merge", subresource="status", reason="JobTracking"))
    return out


def _set_uncounted(unc: dict[str, Any], succeeded: list[str], failed: list[str]) -> None:
    """uncountedTerminatedPods as the API serializes it: empty lists omitted (omitempty)."""
    unc.clear()
    if succeeded:
        unc["succeeded"] = succeeded
    if failed:
        unc["failed"] = failed


def _past_backoff_on_failure(job: Obj, pods: Sequence[Obj], limit: int) -> bool:
    tmpl = spec(job).get("template") or {}
    if (tmpl.get("spec") or {}).get("restartPolicy") != "OnFailure":
        return False
    total = 0
    for p in pods:
        if phase(p) in ("Running", "Pending"):
            st = p.get("status") or {}
            for cs in [*(st.get("initContainerStatuses") or []), *(st.get("containerStatuses") or [])]:
                total += int(cs.get("restartCount") or 0)
    return total > 0 if limit == 0 else total >= limit


def _manage(
    job: Obj,
    active: list[Obj],
    pods: list[Obj],
    succeeded: int,
    succ_indexes: set[int],
    terminating: int,
    record: backoff.BackoffRecord,
    now: float,
    default_backoff: float,
    max_backoff: float,
) -> tuple[list[Obj], list[int | None], float]:
    """(pods to delete, indexes to create (None for NonIndexed), seconds to wait for back-off)."""
    sp = spec(job)
    if sp.get("suspend"):
        return list(active), [], 0.0
    parallelism = int_field(sp.get("parallelism"), 1)
    completions = sp.get("completions")
    if completions is None:
        want = len(active) if succeeded > 0 else parallelism
    else:
        want = max(0, min(int(completions) - succeeded, parallelism))
    rm_at_least = max(0, len(active) - want)
    if _indexed(job):
        rm, left = _remove_for_indexed(active, int(completions or 0))
    else:
        rm, left = [], list(active)
    if len(rm) < rm_at_least:
        rm += sorted(left, key=cmp_to_key(active_pods_cmp))[: rm_at_least - len(rm)]
    if rm:
        return rm[:MAX_POD_CREATE_DELETE_PER_SYNC], [], 0.0
    term = terminating if _only_replace_failed(job) else 0
    diff = want - term - len(active)
    if diff <= 0:
        return [], [], 0.0
    wait = backoff.remaining(record, now, default_backoff, max_backoff)
    if wait > 0:
        return [], [], wait
    diff = min(diff, MAX_POD_CREATE_DELETE_PER_SYNC)
    if _indexed(job):
        busy = {indexes.completion_index(p) for p in active}
        if _only_replace_failed(job):
            busy |= {indexes.completion_index(p) for p in pods if is_terminating(p)}
        pending = [i for i in range(int(completions or 0)) if i not in succ_indexes and i not in busy]
        return [], list(pending[:diff]), 0.0
    return [], [None] * diff, 0.0


def job_key(job: Obj) -> str:
    return key(job)


def orphan_pod_plan(pod: Obj, job: Obj | None) -> Plan:
    """syncOrphanPod: the tracking finalizer comes off a pod no unfinished Job of ours controls (its
    Job gone, finished, or the ownerReference removed by the garbage collector); a pod controlled
    by something other than a batch/v1 Job keeps it."""
    plan = Plan()
    ref = controller_ref(pod)
    if ref is not None:
        if ref.get("kind") != KIND or ref.get("apiVersion") != API_VERSION:
            return plan
        if job is not None and uid(job) == str(ref.get("uid") or "") and not is_finished(job):
            return plan
    if _has_finalizer(pod):
        plan.add(remove_finalizer_patch(pod))
    return plan
