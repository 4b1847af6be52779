"""One CronJob sync (syncCronJob, cleanupFinishedJobs), as a plan.

Inputs: the CronJob, the Jobs it controls (by ownerReference uid), and now. The active list is
reconciled with the Jobs (finished ones leave it, missing ones too), then, unless deleted,
suspended or unparseable: the most recent missed schedule (never more than one start per sync;
more than 100 missed gives upstream's TooManyMissedTimes warning), startingDeadlineSeconds,
concurrencyPolicy (Forbid skips, Replace deletes the active Jobs), the Job named after the
scheduled time in minutes since the epoch (a deterministic name: a restart never starts it twice),
history limits, and a requeue 100 ms after the next schedule.
"""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Mapping, Sequence
from functools import cmp_to_key
from typing import Any

from nodeagent.cluster.controllers.common.actions import Create, Delete, Event, ObjectRef, Plan, UpdateStatus
from nodeagent.cluster.controllers.common.meta import (
    creation_time,
    format_time,
    int_field,
    name,
    namespace,
    new_controller_ref,
    parse_time,
    spec,
    status,
    uid,
)
from nodeagent.cluster.controllers.cronjob.schedule import Schedule, ScheduleError, parse

API_VERSION, KIND = "batch/v1", "CronJob"
SCHEDULED_TIMESTAMP = "batch.kubernetes.io/cronjob-scheduled-timestamp"
NEXT_SCHEDULE_DELTA = 0.1
Obj = Mapping[str, Any]


def finished(job: Obj) -> str | None:
    for c in status(job).get("conditions") or []:
        if c.get("type") in ("Complete", "Failed") and c.get("status") == "True":
            return str(c["type"])
    return None


def job_name(cj: Obj, scheduled: float) -> str:
    return f"{name(cj)}-{int(scheduled) // 60}"


def most_recent(cj: Obj, now: float, sched: Schedule, with_deadline: bool) -> tuple[float, float | None, int]:
    """mostRecentScheduleTime: (earliest time considered, the most recent missed time or None,
    how many were missed: 0, a few, or >100)."""
    earliest = parse_time(status(cj).get("lastScheduleTime")) or creation_time(cj) or now
    sds = spec(cj).get("startingDeadlineSeconds")
    if with_deadline and sds is not None:
        earliest = max(earliest, now - int(sds))
    t1 = sched.next(earliest)
    if t1 is None or now < t1:
        return earliest, None, 0
    t2 = sched.next(t1)
    if t2 is None or now < t2:
        return earliest, t1, 0
    between = round(t2 - t1)
    if between < 1:
        raise ScheduleError("time difference between two schedules is less than 1 second")
    missed = int(now - t1) // between + 1
    recent: float | None = None
    t: float | None = sched.next(t1 + (missed - 2) * between)
    while t is not None and t <= now:
        recent = t
        t = sched.next(t)
    return earliest, recent, missed


def _next_requeue(cj: Obj, now: float, sched: Schedule) -> float | None:
    try:
        earliest, recent, missed = most_recent(cj, now, sched, False)
        base = recent if recent is not None else (earliest if missed == 0 else now)
    except ScheduleError:
        base = now
    nxt = sched.next(base)
    return None if nxt is None else nxt + NEXT_SCHEDULE_DELTA - now


def schedule_of(cj: Obj) -> tuple[Schedule | None, str | None]:
    """formatSchedule + ParseStandard: (schedule, the warning event's message) ."""
    text = str(spec(cj).get("schedule") or "")
    tz = spec(cj).get("timeZone")
    try:
        if "TZ" in text:
            return parse(text), None
        return parse(text, tz or "UTC"), None
    except ScheduleError as e:
        return None, str(e)


def job_from_template(cj: Obj, scheduled: float) -> dict[str, Any]:
    tmpl = spec(cj).get("jobTemplate") or {}
    tmeta = tmpl.get("metadata") or {}
    zone = parse("* * * * *", spec(cj).get("timeZone") or "UTC").zone
    stamp = dt.datetime.fromtimestamp(scheduled, zone).isoformat().replace("+00:00", "Z")
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name(cj, scheduled),
            "namespace": namespace(cj),
            "labels": dict(tmeta.get("labels") or {}),
            "annotations": {**(tmeta.get("annotations") or {}), SCHEDULED_TIMESTAMP: stamp},
            "ownerReferences": [new_controller_ref(cj, API_VERSION, KIND)],
        },
        "spec": copy.deepcopy(dict(tmpl.get("spec") or {})),
    }


def _by_start(a: Obj, b: Obj) -> int:
    sa, sb = parse_time(status(a).get("startTime")), parse_time(status(b).get("startTime"))
    if sa is None and sb is not None:
        return 1
    if sa is not None and sb is None:
        return -1
    if sa == sb:
        return -1 if name(a) < name(b) else 1 if name(a) > name(b) else 0
    return -1 if (sa or 0) < (sb or 0) else 1


def sync(cj: Obj, jobs: Sequence[Obj], *, now: float) -> Plan:
    plan = Plan()
    ref = ObjectRef.of(cj, API_VERSION, KIND)
    st: dict[str, Any] = copy.deepcopy(dict(status(cj)))
    active = list(st.get("active") or [])
    by_uid = {uid(j): j for j in jobs}
    for j in jobs:
        found = any(a.get("uid") == uid(j) for a in active)
        fin = finished(j)
        if not found and fin is None:
            plan.add(
                Event(
                    ref,
                    "Warning",
                    "UnexpectedJob",
                    f"Saw a job that the controller did not create or forgot: {name(j)}",
                )
            )
        elif found and fin is not None:
            active = [a for a in active if a.get("uid") != uid(j)]
            plan.add(Event(ref, "Normal", "SawCompletedJob", f"Saw completed job: {name(j)}, status: {fin}"))
        if fin == "Complete":
            done = parse_time(status(j).get("completionTime"))
            last = parse_time(st.get("lastSuccessfulTime"))
            if done is not None and (last is None or done > last):
                st["lastSuccessfulTime"] = format_time(done)
    for a in list(active):
        if a.get("uid") not in by_uid:  # the loop confirms with an uncached GET before trusting this
            plan.add(Event(ref, "Normal", "MissingJob", f"Active job went missing: {a.get('name')}"))
            active = [x for x in active if x.get("uid") != a.get("uid")]
    st["active"] = active
    _schedule_and_start(cj, st, jobs, now, plan, ref)
    _cleanup(cj, st, jobs, plan, ref)
    if not st.get("active"):
        st.pop("active", None)
    if st != dict(status(cj)):
        plan.add(UpdateStatus({**copy.deepcopy(dict(cj)), "status": st}, reason="CronJobStatus"))
    return plan


def _schedule_and_start(
    cj: Obj, st: dict[str, Any], jobs: Sequence[Obj], now: float, plan: Plan, ref: ObjectRef
) -> None:
    if (cj.get("metadata") or {}).get("deletionTimestamp"):
        return
    tz = spec(cj).get("timeZone")
    if tz:
        try:
            parse("* * * * *", tz)
        except ScheduleError as e:
            plan.add(Event(ref, "Warning", "UnknownTimeZone", f'invalid timeZone: "{tz}": {e}'))
            return
    if spec(cj).get("suspend"):
        return
    text = str(spec(cj).get("schedule") or "")
    if "TZ" in text:
        plan.add(
            Event(
                ref,
                "Warning",
                "UnsupportedSchedule",
                f'CRON_TZ or TZ used in schedule "{text}" is not officially supported, '
                "see https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/ for more details",
            )
        )
    sched, err = schedule_of(cj)
    if sched is None:
        plan.add(Event(ref, "Warning", "UnparseableSchedule", f'unparseable schedule: "{text}" : {err}'))
        return
    view = {**cj, "status": st}
    try:
        _, scheduled, missed = most_recent(view, now, sched, True)
    except ScheduleError as e:
        plan.add(Event(ref, "Warning", "InvalidSchedule", f"invalid schedule: {text} : {e}"))
        return
    if scheduled is not None and missed > 100:
        plan.add(
            Event(
                ref,
                "Warning",
                "TooManyMissedTimes",
                "too many missed start times. Set or decrease .spec.startingDeadlineSeconds or check clock skew",
            )
        )
    requeue = _next_requeue(view, now, sched)
    if scheduled is None:
        if requeue is not None:
            plan.requeue(requeue)
        return
    sds = spec(cj).get("startingDeadlineSeconds")
    if sds is not None and scheduled + int(sds) < now:
        when = dt.datetime.fromtimestamp(scheduled, dt.UTC).strftime("%a, %d %b %Y %H:%M:%S +0000")
        plan.add(Event(ref, "Warning", "MissSchedule", f"Missed scheduled time to start a job: {when}"))
        if requeue is not None:
            plan.requeue(requeue)
        return
    jname = job_name(cj, scheduled)
    if any(a.get("name") == jname for a in st["active"]) or parse_time(st.get("lastScheduleTime")) == scheduled:
        if requeue is not None:
            plan.requeue(requeue)
        return
    policy = spec(cj).get("concurrencyPolicy") or "Allow"
    if policy == "Forbid" and st["active"]:
        plan.add(
            Event(
                ref,
                "Normal",
                "JobAlreadyActive",
                "Not starting job because prior execution is running and concurrency policy is Forbid",
            )
        )
        if requeue is not None:
            plan.requeue(requeue)
        return
    if policy == "Replace":
        for a in st["active"]:
            plan.add(
                Delete(
                    ObjectRef(
                        "batch/v1",
                        "Job",
                        str(a.get("namespace") or namespace(cj)),
                        str(a.get("name")),
                        str(a.get("uid") or ""),
                    ),
                    propagation="Background",
                    reason="ReplaceConcurrent",
                )
            )
            plan.add(Event(ref, "Normal", "SuccessfulDelete", f"Deleted job {a.get('name')}"))
        st["active"] = []
    job = job_from_template(cj, scheduled)
    plan.add(Create(job, reason="SuccessfulCreate"))
    plan.add(Event(ref, "Normal", "SuccessfulCreate", f"Created job {jname}"))
    st["active"] = [*st["active"], {"apiVersion": "batch/v1", "kind": "Job", "namespace": namespace(cj), "name": jname}]
    st["lastScheduleTime"] = format_time(scheduled)
    nxt = _next_requeue({**cj, "status": st}, now, sched)
    if nxt is not None:
        plan.requeue(nxt)


def _cleanup(cj: Obj, st: dict[str, Any], jobs: Sequence[Obj], plan: Plan, ref: ObjectRef) -> None:
    succ_limit, fail_limit = spec(cj).get("successfulJobsHistoryLimit"), spec(cj).get("failedJobsHistoryLimit")
    for limit, kind in ((succ_limit, "Complete"), (fail_limit, "Failed")):
        if limit is None:
            continue
        done = sorted((j for j in jobs if finished(j) == kind), key=cmp_to_key(_by_start))
        for j in done[: max(0, len(done) - int_field(limit))]:
            plan.add(Delete(ObjectRef.of(j, "batch/v1", "Job"), propagation="Background", reason="HistoryLimit"))
            plan.add(Event(ref, "Normal", "SuccessfulDelete", f"Deleted job {name(j)}"))
            st["active"] = [a for a in st.get("active") or [] if a.get("uid") != uid(j)]
