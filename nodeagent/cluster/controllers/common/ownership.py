"""Claiming dependents by selector with controller ownerReferences (controller_ref_manager.go).

`claim` decides, for each candidate, what ClaimObject would do: keep it (ours and matching), adopt
it (an orphan that matches), release it (ours but no longer matching), or leave it. Upstream refuses
to adopt when the controller is being deleted, the candidate is being deleted, or it lives in
another namespace; it never touches an object controlled by someone else; a controller being
deleted releases nothing. Adoption and release are strategic merge patches carrying the
dependent's uid as a precondition, as upstream sends them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nodeagent.cluster.controllers.common import selectors
from nodeagent.cluster.controllers.common.actions import ObjectRef, Patch
from nodeagent.cluster.controllers.common.meta import (
    being_deleted,
    controller_ref,
    finalizers,
    labels,
    namespace,
    new_controller_ref,
    uid,
)

Obj = Mapping[str, Any]


@dataclass(slots=True)
class Claim:
    claimed: list[Obj] = field(default_factory=list)  # ours after this pass (adopted included)
    adopt: list[Obj] = field(default_factory=list)
    release: list[Obj] = field(default_factory=list)


def claim(
    owner: Obj,
    owner_api_version: str,
    owner_kind: str,
    selector: Mapping[str, Any] | None,
    candidates: Iterable[Obj],
    extra_match: Any = None,
) -> Claim:
    """`extra_match(obj) -> bool` narrows the match (DaemonSets and Jobs pass none)."""
    out = Claim()
    owner_uid, owner_ns, owner_deleting = uid(owner), namespace(owner), being_deleted(owner)

    def match(obj: Obj) -> bool:
        return selectors.matches(selector, labels(obj)) and (extra_match is None or extra_match(obj))

    for obj in candidates:
        ref = controller_ref(obj)
        if ref is not None:
            if str(ref.get("uid") or "") != owner_uid:
                continue
            if match(obj):
                out.claimed.append(obj)
            elif not owner_deleting:
                out.release.append(obj)
            continue
        if owner_deleting or not match(obj) or being_deleted(obj):
            continue
        if owner_ns and namespace(obj) != owner_ns:
            continue
        out.adopt.append(obj)
        out.claimed.append(obj)
    return out


def adopt_patch(
    owner: Obj, owner_api_version: str, owner_kind: str, dependent: Obj, add_finalizers: Sequence[str] = ()
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "metadata": {
            "ownerReferences": [new_controller_ref(owner, owner_api_version, owner_kind)],
            "uid": uid(dependent),
        }
    }
    missing = [f for f in add_finalizers if f not in finalizers(dependent)]
    if missing:
        body["metadata"]["finalizers"] = missing
    return body


def release_patch(owner_uid: str, dependent: Obj, remove_finalizers: Sequence[str] = ()) -> dict[str, Any]:
    body: dict[str, Any] = {
        "metadata": {"ownerReferences": [{"$patch": "delete", "uid": owner_uid}], "uid": uid(dependent)}
    }
    present = [f for f in remove_finalizers if f in finalizers(dependent)]
    if present:
        body["metadata"]["$deleteFromPrimitiveList/finalizers"] = present
    return body


def claim_actions(
    owner: Obj,
    owner_api_version: str,
    owner_kind: str,
    result: Claim,
    dependent_api_version: str,
    dependent_kind: str,
    finalizers_: Sequence[str] = (),
) -> list[Patch]:
    acts: list[Patch] = []
    for obj in result.adopt:
        acts.append(
            Patch(
                ObjectRef.of(obj, dependent_api_version, dependent_kind),
                adopt_patch(owner, owner_api_version, owner_kind, obj, finalizers_),
                reason="adopt",
            )
        )
    for obj in result.release:
        acts.append(
            Patch(
                ObjectRef.of(obj, dependent_api_version, dependent_kind),
                release_patch(uid(owner), obj, finalizers_),
                reason="release",
            )
        )
    return acts
