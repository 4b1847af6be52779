"""A DaemonSet's ControllerRevisions (update.go constructHistory, snapshot, dedupCurHistories,
cleanupHistory, Match, getPatch).

Each pod template the DaemonSet has had is one ControllerRevision named `<ds>-<hash>`, whose data
is the strategic merge patch that restores it (`{"spec": {"template": {..., "$patch": "replace"}}}`:
what `kubectl rollout undo daemonset` applies) and whose `controller-revision-hash` label is the
hash the controller stamps on the pods it creates from it. The current revision is the one whose
data matches the template (semantically: the stored JSON, not Go's bytes); it takes revision
max(old)+1, so rolling back renumbers the old revision rather than adding one. A name taken by a
revision of another template is a hash collision: collisionCount goes up and the sync retries.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nodeagent.cluster.controllers.common import hashing, ownership
from nodeagent.cluster.controllers.common.actions import Action, Create, Delete, ObjectRef, Patch, Update
from nodeagent.cluster.controllers.common.meta import (
    annotations_of,
    int_field,
    labels,
    name,
    namespace,
    new_controller_ref,
    spec,
    status,
)

HASH_LABEL = "controller-revision-hash"  # apps.DefaultDaemonSetUniqueLabelKey
API_VERSION, KIND = "apps/v1", "DaemonSet"
REV_API, REV_KIND = "apps/v1", "ControllerRevision"
DEFAULT_REVISION_HISTORY_LIMIT = 10
Obj = Mapping[str, Any]


def revision_number(rev: Obj) -> int:
    return int_field(rev.get("revision"))


def patch_data(ds: Obj) -> dict[str, Any]:
    """getPatch: the template, marked to replace the whole template when applied."""
    template = copy.deepcopy(dict(spec(ds).get("template") or {}))
    template["$patch"] = "replace"
    return {"spec": {"template": template}}


def matches(ds: Obj, rev: Obj) -> bool:
    """Match: the revision's data is this template's patch (nil and empty read alike)."""
    return bool(hashing.normalized(patch_data(ds)) == hashing.normalized(rev.get("data") or {}))


def template_hash(ds: Obj) -> str:
    collision = status(ds).get("collisionCount")
    return hashing.compute_hash(spec(ds).get("template") or {}, int_field(collision) if collision is not None else None)


def new_revision(ds: Obj, revision: int) -> dict[str, Any]:
    """snapshot's object: labels of the template plus the hash, the DaemonSet's annotations."""
    h = template_hash(ds)
    tlabels = ((spec(ds).get("template") or {}).get("metadata") or {}).get("labels") or {}
    meta: dict[str, Any] = {
        "name": f"{name(ds)}-{h}",
        "namespace": namespace(ds),
        "labels": {**tlabels, HASH_LABEL: h},
        "ownerReferences": [new_controller_ref(ds, API_VERSION, KIND)],
    }
    if annotations_of(ds):
        meta["annotations"] = dict(annotations_of(ds))
    return {"apiVersion": REV_API, "kind": REV_KIND, "metadata": meta, "data": patch_data(ds), "revision": revision}


@dataclass(slots=True)
class History:
    """constructHistory's outcome: the current revision (None on a collision), the old ones, the
    hash pods are labelled with, and the writes that get there."""

    cur: Obj | None
    old: list[Obj]
    hash: str
    actions: list[Action] = field(default_factory=list)
    collision: bool = False


def construct(ds: Obj, revisions: Sequence[Obj], pods: Sequence[Obj]) -> History:
    """`revisions`: every ControllerRevision of the namespace (the ones to claim, and the names
    taken); `pods`: the DaemonSet's claimed pods (relabelled when duplicates are merged)."""
    actions: list[Action] = []
    result = ownership.claim(ds, API_VERSION, KIND, spec(ds).get("selector"), revisions)
    actions.extend(ownership.claim_actions(ds, API_VERSION, KIND, result, REV_API, REV_KIND))
    current: list[Obj] = []
    old: list[Obj] = []
    for rev in result.claimed:
        if HASH_LABEL not in labels(rev):  # the name, not a hash: no collision to worry about
            fixed = copy.deepcopy(dict(rev))
            fixed["metadata"]["labels"] = {**labels(rev), HASH_LABEL: name(rev)}
            actions.append(Update(fixed, reason="AddHashLabel"))
            rev = fixed
        (current if matches(ds, rev) else old).append(rev)
    next_revision = max((revision_number(r) for r in old), default=0) + 1
    if not current:
        fresh = new_revision(ds, next_revision)
        taken = next((r for r in revisions if name(r) == name(fresh) and namespace(r) == namespace(ds)), None)
        if taken is not None:
            if matches(ds, taken):  # created by us before, not (yet) ours in the cache
                return History(taken, old, labels(taken).get(HASH_LABEL, name(taken)), actions)
            return History(None, old, "", actions, collision=True)
        actions.append(Create(fresh, reason="SnapshotRevision"))
        return History(fresh, old, fresh["metadata"]["labels"][HASH_LABEL], actions)
    keep = _dedup(current, pods, actions)
    if revision_number(keep) < next_revision:
        bumped = copy.deepcopy(dict(keep))
        bumped["revision"] = next_revision
        actions.append(Update(bumped, reason="RenumberRevision"))
        keep = bumped
    return History(keep, old, str(labels(keep).get(HASH_LABEL) or ""), actions)


def _dedup(current: list[Obj], pods: Sequence[Obj], actions: list[Action]) -> Obj:
    """dedupCurHistories: keep the highest revision (the last among equals), move every pod to its
    hash, delete the others."""
    if len(current) == 1:
        return current[0]
    keep = current[0]
    for rev in current:
        if revision_number(rev) >= revision_number(keep):
            keep = rev
    keep_hash = str(labels(keep).get(HASH_LABEL) or "")
    for pod in pods:
        if labels(pod).get(HASH_LABEL) != keep_hash:
            actions.append(
                Patch(ObjectRef.of(pod, "v1", "Pod"), {"metadata": {"labels": {HASH_LABEL: keep_hash}}}, "merge",
                      reason="RelabelPod")
            )
    for rev in current:
        if rev is not keep:
            actions.append(Delete(ObjectRef.of(rev, REV_API, REV_KIND), reason="DuplicateRevision"))
    return keep


def cleanup(ds: Obj, old: Sequence[Obj], pods: Sequence[Obj]) -> list[Delete]:
    """cleanupHistory: beyond revisionHistoryLimit, delete old revisions from the lowest number up,
    never one whose hash a pod still carries (terminal and deleted pods included)."""
    limit = int_field(spec(ds).get("revisionHistoryLimit"), DEFAULT_REVISION_HISTORY_LIMIT)
    to_kill = len(old) - limit
    if to_kill <= 0:
        return []
    live = {h for p in pods if (h := labels(p).get(HASH_LABEL))}
    out: list[Delete] = []
    for rev in sorted(old, key=revision_number):
        if to_kill <= 0:
            break
        if labels(rev).get(HASH_LABEL) in live:
            continue
        out.append(Delete(ObjectRef.of(rev, REV_API, REV_KIND), reason="RevisionHistoryLimit"))
        to_kill -= 1
    return out
