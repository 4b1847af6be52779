"""The Job pod-failure back-off (backoff_utils.go): a record per Job of the failures since the last
success and the last failure time; the next pod waits 10 s * 2^(failures-1), capped.

The cap is upstream's code, MaxJobPodFailureBackOff = 10 min; the Kubernetes docs still say six
minutes (MaxJobBackOff was 360 s before the finalizer-based tracking rewrite), so it is a parameter.
The record is in-memory state of the loop, as upstream's backoffStore: after a restart the delay
restarts from the failures seen since.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nodeagent.cluster.controllers.common.meta import creation_time, meta, parse_time
from nodeagent.cluster.controllers.common.pods import condition

DEFAULT_BACKOFF = 10.0
MAX_BACKOFF = 600.0


@dataclass(frozen=True, slots=True)
class BackoffRecord:
    failures_after_last_success: int = 0
    last_failure_time: float | None = None


def finished_time(pod: Mapping[str, Any]) -> float:
    """getFinishedTime: the last container finishedAt, else Ready=False's transition, else the
    deletion time less its grace, else the creation time."""
    times = [
        parse_time((s.get("state") or {}).get("terminated", {}).get("finishedAt"))
        for s in (pod.get("status") or {}).get("containerStatuses") or []
    ]
    known = [t for t in times if t is not None]
    if known:
        return max(known)
    ready = condition(pod, "Ready")
    if (
        ready is not None
        and ready.get("status") == "False"
        and (t := parse_time(ready.get("lastTransitionTime"))) is not None
    ):
        return t
    deleted = parse_time(meta(pod).get("deletionTimestamp"))
    if deleted is not None:
        return deleted - float(meta(pod).get("deletionGracePeriodSeconds") or 0)
    return creation_time(pod) or 0.0


def next_record(
    old: BackoffRecord, new_succeeded: Sequence[Mapping[str, Any]], new_failed: Sequence[Mapping[str, Any]]
) -> BackoffRecord:
    failed = sorted(finished_time(p) for p in new_failed)
    if not new_succeeded:
        if not failed:
            return old
        return BackoffRecord(old.failures_after_last_success + len(failed), failed[-1])
    last_success = max(finished_time(p) for p in new_succeeded)
    after = [t for t in failed if t > last_success]
    return BackoffRecord(len(after), after[-1] if after else None)


def delay(failures: int, default: float = DEFAULT_BACKOFF, cap: float = MAX_BACKOFF) -> float:
    if failures <= 0:
        return 0.0
    d = default
    for _ in range(1, failures):
        d *= 2
        if d >= cap:
            return cap
    return d


def remaining(record: BackoffRecord, now: float, default: float = DEFAULT_BACKOFF, cap: float = MAX_BACKOFF) -> float:
    if record.failures_after_last_success == 0 or record.last_failure_time is None:
        return 0.0
    d = delay(record.failures_after_last_success, default, cap)
    elapsed = now - record.last_failure_time
    return 0.0 if d < elapsed else d - elapsed
