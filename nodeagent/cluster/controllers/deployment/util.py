"""deployment/util/deployment_util.go over plain dicts. ReplicaSets and Deployments are dicts;
functions that change one return (or mutate) a copy the caller owns."""

from __future__ import annotations

import copy
from collections.abc import Mapping, MutableMapping, Sequence
from functools import cmp_to_key
from typing import Any, TypeVar

from nodeagent.cluster.controllers.common import conditions, hashing
from nodeagent.cluster.controllers.common.intstr import scaled_value
from nodeagent.cluster.controllers.common.meta import (
    annotations_of,
    creation_time,
    int_field,
    name,
    parse_time,
    spec,
    status,
)
from nodeagent.core.wellknown import LAST_APPLIED

REVISION = "deployment.kubernetes.io/revision"
REVISION_HISTORY = "deployment.kubernetes.io/revision-history"
DESIRED_REPLICAS = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"
DEPRECATED_ROLLBACK_TO = "deprecated.deployment.rollback.to"
ANNOTATIONS_TO_SKIP = frozenset(
    {LAST_APPLIED, REVISION, REVISION_HISTORY, DESIRED_REPLICAS, MAX_REPLICAS, DEPRECATED_ROLLBACK_TO}
)
MAX_REV_HISTORY_LENGTH_IN_CHARS = 2000
MAX_INT32 = 2**31 - 1

# condition reasons
REPLICA_SET_UPDATED = "ReplicaSetUpdated"
FAILED_RS_CREATE = "ReplicaSetCreateError"
NEW_REPLICA_SET = "NewReplicaSetCreated"
FOUND_NEW_RS = "FoundNewReplicaSet"
NEW_RS_AVAILABLE = "NewReplicaSetAvailable"
TIMED_OUT = "ProgressDeadlineExceeded"
PAUSED = "DeploymentPaused"
RESUMED = "DeploymentResumed"
MIN_AVAILABLE = "MinimumReplicasAvailable"
MIN_UNAVAILABLE = "MinimumReplicasUnavailable"

Obj = Mapping[str, Any]
T = TypeVar("T", bound=Mapping[str, Any])


def set_defaults(d: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """apps/v1 defaulting (SetDefaults_Deployment), for objects that did not pass the registry."""
    sp = d.setdefault("spec", {})
    sp.setdefault("replicas", 1)
    strat = sp.setdefault("strategy", {})
    strat.setdefault("type", "RollingUpdate")
    if strat["type"] == "RollingUpdate":
        ru = strat.setdefault("rollingUpdate", {})
        ru.setdefault("maxUnavailable", "25%")
        ru.setdefault("maxSurge", "25%")
    sp.setdefault("revisionHistoryLimit", 10)
    sp.setdefault("progressDeadlineSeconds", 600)
    sp.setdefault("minReadySeconds", 0)
    return d


def replicas(obj: Obj) -> int:
    return int_field(spec(obj).get("replicas"), 1)


def is_rolling(d: Obj) -> bool:
    return ((spec(d).get("strategy") or {}).get("type") or "RollingUpdate") == "RollingUpdate"


def resolve_fenceposts(max_surge: int | str | None, max_unavailable: int | str | None, desired: int) -> tuple[int, int]:
    """Surge rounds up, unavailability down; both zero means one unavailable (surge may be blocked
    by quota)."""
    surge = scaled_value(max_surge, desired, True)
    unavailable = scaled_value(max_unavailable, desired, False)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


def _rolling(d: Obj) -> Mapping[str, Any]:
    return (spec(d).get("strategy") or {}).get("rollingUpdate") or {}


def max_surge(d: Obj) -> int:
    if not is_rolling(d):
        return 0
    ru = _rolling(d)
    return resolve_fenceposts(ru.get("maxSurge"), ru.get("maxUnavailable"), replicas(d))[0]


def max_unavailable(d: Obj) -> int:
    if not is_rolling(d) or replicas(d) == 0:
        return 0
    ru = _rolling(d)
    return min(resolve_fenceposts(ru.get("maxSurge"), ru.get("maxUnavailable"), replicas(d))[1], replicas(d))


def revision(rs: Obj) -> int | None:
    """Revision(): 0 without the annotation, None when it does not parse (skipped by MaxRevision)."""
    v = annotations_of(rs).get(REVISION)
    if v is None:
        return 0
    try:
        return int(v, 10)
    except ValueError:
        return None


def max_revision(rss: Sequence[Obj]) -> int:
    return max((r for rs in rss if (r := revision(rs)) is not None), default=0)


def last_revision(rss: Sequence[Obj]) -> int:
    """The second highest revision (what `kubectl rollout undo` rolls back to)."""
    revs = sorted((r for rs in rss if (r := revision(rs)) is not None), reverse=True)
    return revs[1] if len(revs) > 1 else 0


def rs_replicas(rs: Obj | None) -> int:
    return 0 if rs is None else int_field(spec(rs).get("replicas"))


def total_replicas(rss: Sequence[Obj | None]) -> int:
    return sum(rs_replicas(rs) for rs in rss)


def total_status(rss: Sequence[Obj | None], field: str) -> int:
    return sum(int_field(status(rs).get(field)) for rs in rss if rs is not None)


def rs_available(rs: Obj | None) -> int:
    """The RS's available pods, never more than it wants: a status written before a scale-down (or
    before a server restart) can still count pods the RS is deleting. Upstream reads the raw status
    and refuses the sync with an error when it exceeds spec.replicas; counting at most spec.replicas
    plans the scale-down a fresh status would and cannot plan a scale-up of an old RS."""
    return 0 if rs is None else min(int_field(status(rs).get("availableReplicas")), rs_replicas(rs))


def total_available(rss: Sequence[Obj | None]) -> int:
    return sum(rs_available(rs) for rs in rss)


def filter_active(rss: Sequence[T | None]) -> list[T]:
    return [rs for rs in rss if rs is not None and rs_replicas(rs) > 0]


def _by_creation(a: Obj, b: Obj) -> int:
    ta, tb = creation_time(a) or 0.0, creation_time(b) or 0.0
    if ta == tb:
        return -1 if name(a) < name(b) else 1 if name(a) > name(b) else 0
    return -1 if ta < tb else 1


def by_creation(rss: Sequence[T]) -> list[T]:
    """ReplicaSetsByCreationTimestamp: oldest first, names break ties."""
    return sorted(rss, key=cmp_to_key(_by_creation))


def by_size_older(rss: Sequence[T]) -> list[T]:
    """ReplicaSetsBySizeOlder: larger first, then older first (for scaling down)."""

    def cmp(a: Obj, b: Obj) -> int:
        if rs_replicas(a) == rs_replicas(b):
            return _by_creation(a, b)
        return -1 if rs_replicas(a) > rs_replicas(b) else 1

    return sorted(rss, key=cmp_to_key(cmp))


def by_size_newer(rss: Sequence[T]) -> list[T]:
    """ReplicaSetsBySizeNewer: larger first, then newer first (for scaling up)."""

    def cmp(a: Obj, b: Obj) -> int:
        if rs_replicas(a) == rs_replicas(b):
            return _by_creation(b, a)
        return -1 if rs_replicas(a) > rs_replicas(b) else 1

    return sorted(rss, key=cmp_to_key(cmp))


def by_revision(rss: Sequence[T]) -> list[T]:
    def cmp(a: Obj, b: Obj) -> int:
        ra, rb = revision(a), revision(b)
        if ra is None or rb is None or ra == rb:
            return _by_creation(a, b)
        return -1 if ra < rb else 1

    return sorted(rss, key=cmp_to_key(cmp))


def find_new_rs(d: Obj, rss: Sequence[T]) -> T | None:
    """The oldest ReplicaSet whose template equals the Deployment's, the hash label ignored."""
    tmpl = spec(d).get("template") or {}
    for rs in by_creation(rss):
        if hashing.equal_ignore_hash(spec(rs).get("template") or {}, tmpl):
            return rs
    return None


def find_old_rss(d: Obj, rss: Sequence[T], new_rs: Obj | None) -> tuple[list[T], list[T]]:
    """(old ReplicaSets with replicas, all old ReplicaSets)."""
    new_uid = (new_rs or {}).get("metadata", {}).get("uid")
    all_old = [rs for rs in rss if new_rs is None or rs.get("metadata", {}).get("uid") != new_uid]
    return [rs for rs in all_old if rs_replicas(rs) != 0], all_old


def _annotations(rs: MutableMapping[str, Any]) -> MutableMapping[str, str]:
    m = rs.setdefault("metadata", {})
    if m.get("annotations") is None:
        m["annotations"] = {}
    ann: MutableMapping[str, str] = m["annotations"]
    return ann


def set_replicas_annotations(rs: MutableMapping[str, Any], desired: int, max_replicas: int) -> bool:
    ann = _annotations(rs)
    changed = False
    for k, v in ((DESIRED_REPLICAS, str(desired)), (MAX_REPLICAS, str(max_replicas))):
        if ann.get(k) != v:
            ann[k] = v
            changed = True
    return changed


def replicas_annotations_need_update(rs: Obj, desired: int, max_replicas: int) -> bool:
    ann = annotations_of(rs)
    return ann.get(DESIRED_REPLICAS) != str(desired) or ann.get(MAX_REPLICAS) != str(max_replicas)


def set_new_rs_annotations(
    d: Obj,
    rs: MutableMapping[str, Any],
    new_revision: str,
    exists: bool,
    limit_chars: int = MAX_REV_HISTORY_LENGTH_IN_CHARS,
) -> bool:
    """Copy the Deployment's annotations (but the skipped ones), raise the revision, keep the
    revision history of a re-adopted ReplicaSet (a rollback), set the replicas annotations on a new
    one. Returns whether the annotations changed."""
    ann = _annotations(rs)
    changed = False
    for k, v in annotations_of(d).items():
        if k in ANNOTATIONS_TO_SKIP or ann.get(k) == v:
            continue
        ann[k] = v
        changed = True
    old = ann.get(REVISION)
    try:
        old_int = int(old, 10) if old else 0
    except ValueError:
        return False
    new_int = int(new_revision, 10)
    if old_int < new_int:
        ann[REVISION] = new_revision
        changed = True
        if old is not None:
            history = ann.get(REVISION_HISTORY, "")
            parts = history.split(",")
            if not parts[0]:
                ann[REVISION_HISTORY] = old
            else:
                total, start = len(history) + len(old) + 1, 0
                while total > limit_chars and start < len(parts):
                    total -= len(parts[start]) + 1
                    start += 1
                if total <= limit_chars:
                    ann[REVISION_HISTORY] = ",".join([*parts[start:], old])
    if not exists and set_replicas_annotations(rs, replicas(d), replicas(d) + max_surge(d)):
        changed = True
    return changed


def new_rs_new_replicas(d: Obj, all_rss: Sequence[Obj | None], new_rs: Obj) -> int:
    if is_rolling(d):
        ru = _rolling(d)
        surge = scaled_value(ru.get("maxSurge"), replicas(d), True)
        current = total_replicas(all_rss)
        max_total = replicas(d) + surge
        if current >= max_total:
            return rs_replicas(new_rs)
        scale_up = min(max_total - current, replicas(d) - rs_replicas(new_rs))
        return rs_replicas(new_rs) + scale_up
    return replicas(d)


def is_saturated(d: Obj, rs: Obj | None) -> bool:
    if rs is None:
        return False
    try:
        desired = int(annotations_of(rs).get(DESIRED_REPLICAS, ""), 10)
    except ValueError:
        return False
    return (
        rs_replicas(rs) == replicas(d)
        and desired == replicas(d)
        and int_field(status(rs).get("availableReplicas")) == replicas(d)
    )


def get_proportion(rs: Obj | None, d: Obj, to_add: int, added: int) -> int:
    if rs is None or rs_replicas(rs) == 0 or to_add == 0 or to_add == added:
        return 0
    fraction = _fraction(rs, d)
    allowed = to_add - added
    return min(fraction, allowed) if to_add > 0 else max(fraction, allowed)


def _fraction(rs: Obj, d: Obj) -> int:
    if replicas(d) == 0:
        return -rs_replicas(rs)
    deployment_replicas = replicas(d) + max_surge(d)
    try:
        annotated = int(annotations_of(rs)[MAX_REPLICAS], 10)
    except (KeyError, ValueError):
        annotated = int_field(status(d).get("replicas"))
    if annotated == 0:
        return 0
    size = rs_replicas(rs) * deployment_replicas / annotated
    return _round_half_away(size) - rs_replicas(rs)


def _round_half_away(x: float) -> int:
    """integer.RoundToInt32 (math.Round: halves away from zero)."""
    return int(x + 0.5) if x >= 0 else -int(-x + 0.5)


def has_progress_deadline(d: Obj) -> bool:
    v = spec(d).get("progressDeadlineSeconds")
    return isinstance(v, int) and not isinstance(v, bool) and v != MAX_INT32


def has_revision_history_limit(d: Obj) -> bool:
    v = spec(d).get("revisionHistoryLimit")
    return isinstance(v, int) and not isinstance(v, bool) and v != MAX_INT32


def complete(d: Obj, new_status: Mapping[str, Any]) -> bool:
    """DeploymentComplete: every desired replica updated and available, nothing old left."""
    r = replicas(d)
    return (
        int_field(new_status.get("updatedReplicas")) == r
        and int_field(new_status.get("replicas")) == r
        and int_field(new_status.get("availableReplicas")) == r
        and int_field(new_status.get("observedGeneration")) >= int_field((d.get("metadata") or {}).get("generation"))
    )


def progressing(d: Obj, new_status: Mapping[str, Any]) -> bool:
    old = status(d)
    old_old = int_field(old.get("replicas")) - int_field(old.get("updatedReplicas"))
    new_old = int_field(new_status.get("replicas")) - int_field(new_status.get("updatedReplicas"))
    return (
        int_field(new_status.get("updatedReplicas")) > int_field(old.get("updatedReplicas"))
        or new_old < old_old
        or int_field(new_status.get("readyReplicas")) > int_field(old.get("readyReplicas"))
        or int_field(new_status.get("availableReplicas")) > int_field(old.get("availableReplicas"))
    )


def timed_out(d: Obj, new_status: Mapping[str, Any], now: float) -> bool:
    if not has_progress_deadline(d):
        return False
    cond = conditions.find(new_status.get("conditions"), "Progressing")
    if cond is None or cond.get("reason") == NEW_RS_AVAILABLE:
        return False
    if cond.get("reason") == TIMED_OUT:
        return True
    since = parse_time(cond.get("lastUpdateTime"))
    return since is not None and since + int(spec(d)["progressDeadlineSeconds"]) < now


def progressing_condition(status_: str, reason: str, message: str, now: float) -> dict[str, Any]:
    return conditions.new_condition("Progressing", status_, reason, message, now, update_time=True)


def template_from_rs(rs: Obj) -> dict[str, Any]:
    """SetFromReplicaSetTemplate: the ReplicaSet's template without the hash label (rollback)."""
    return hashing.without_hash_label(copy.deepcopy(dict(spec(rs).get("template") or {})))
