"""The ownerReference graph over a snapshot of object metadata (PartialObjectMetadata dicts).

Owner resolution as isDangling: a namespaced dependent's namespaced owner is looked up in the
dependent's namespace (an owner elsewhere is absent: dangling); a cluster-scoped owner by name
alone; a cluster-scoped dependent may not have a namespaced owner (upstream logs and gives up on
it: namespacedOwnerOfClusterScopedObjectErr). An owner found with another uid is dangling.
`namespaced(apiVersion, kind)` is the REST mapper: None for an unknown kind (not decided: retried)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from nodeagent.cluster.controllers.common.meta import finalizers, meta, name, namespace, owner_references, uid

FOREGROUND = "foregroundDeletion"
ORPHAN = "orphan"
Obj = Mapping[str, Any]
Namespaced = Callable[[str, str], bool | None]
Resolution = Literal["solid", "dangling", "waiting", "invalid", "unknown"]


def group_of(api_version: str) -> str:
    return api_version.split("/", 1)[0] if "/" in api_version else ""


@dataclass(slots=True)
class Node:
    obj: Obj
    dependents: list[Node] = field(default_factory=list)

    @property
    def uid(self) -> str:
        return uid(self.obj)

    @property
    def deleting(self) -> bool:
        return bool(meta(self.obj).get("deletionTimestamp"))

    @property
    def deleting_dependents(self) -> bool:
        return self.deleting and FOREGROUND in finalizers(self.obj)

    @property
    def orphaning(self) -> bool:
        return self.deleting and ORPHAN in finalizers(self.obj)

    def blocking_dependents(self) -> list[Node]:
        return [
            d
            for d in self.dependents
            if any(
                str(r.get("uid")) == self.uid and r.get("blockOwnerDeletion") is True for r in owner_references(d.obj)
            )
        ]


class Graph:
    def __init__(self, objects: Iterable[Obj], namespaced: Namespaced) -> None:
        self.namespaced = namespaced
        self.nodes: dict[str, Node] = {}
        self._by_coords: dict[tuple[str, str, str, str], Node] = {}
        for o in objects:
            n = Node(o)
            self.nodes[n.uid] = n
            self._by_coords[
                (group_of(str(o.get("apiVersion") or "")), str(o.get("kind") or ""), namespace(o), name(o))
            ] = n
        for n in self.nodes.values():
            for ref in owner_references(n.obj):
                owner = self.nodes.get(str(ref.get("uid")))
                if owner is not None:
                    owner.dependents.append(n)

    def resolve(self, dependent: Obj, ref: Mapping[str, Any]) -> tuple[Resolution, Node | None]:
        scoped = self.namespaced(str(ref.get("apiVersion") or ""), str(ref.get("kind") or ""))
        if scoped is None:
            return "unknown", None
        dep_ns = namespace(dependent)
        if not dep_ns and scoped:
            return "invalid", None
        coords = (
            group_of(str(ref.get("apiVersion") or "")),
            str(ref.get("kind") or ""),
            dep_ns if scoped else "",
            str(ref.get("name") or ""),
        )
        owner = self._by_coords.get(coords)
        if owner is None or owner.uid != str(ref.get("uid")):
            return "dangling", None
        if owner.deleting_dependents:
            return "waiting", owner
        return "solid", owner
