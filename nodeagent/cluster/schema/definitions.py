"""The loaded Kubernetes definitions: lookup by reference name and by GVK, walking field paths.

`definitions()` loads the file the first time it is called and keeps the compact nodes for the
life of the process (the parse's peak is not all returned to the system, so the RSS grows by more
than the nodes hold; the load time and memory: see bench/README.md, "The schema definitions");
every later call returns the same object. Tests and tools may build a `Definitions` from their own
`$defs` mapping.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from nodeagent.cluster.schema.loader import compact, load_raw
from nodeagent.cluster.schema.model import Gvk, MergeSemantics, Schema, Shape, merge_semantics
from nodeagent.cluster.schema.vpa import vpa_definitions

PathPart = str | int
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
_PATH_TOKEN = re.compile(r"\.?([^.\[\]]+)|\[(\d+|\*)\]")


class Definitions:
    """A set of named schemas; GVKs come from their `x-kubernetes-group-version-kind`."""

    def __init__(self, nodes: Mapping[str, Schema]) -> None:
        self._nodes = dict(nodes)
        self._by_gvk: dict[Gvk, Schema] = {}
        for node in self._nodes.values():
            for gvk in node.gvks:
                # a few shared kinds (DeleteOptions, WatchEvent) list many GVKs: first one wins
                self._by_gvk.setdefault(gvk, node)

    @classmethod
    def from_raw(cls, raw: Mapping[str, Any]) -> Definitions:
        """From a `$defs` mapping in the shape of kubernetes-validate's file."""
        return cls(compact(raw))

    def __len__(self) -> int:
        return len(self._nodes)

    def __contains__(self, name: object) -> bool:
        return name in self._nodes

    def names(self) -> Iterator[str]:
        return iter(self._nodes)

    def by_ref(self, ref: str) -> Schema | None:
        """A definition by name (`io.k8s.api.core.v1.PodSpec`) or JSON reference (`#/$defs/...`,
        `#/definitions/...`, `#/components/schemas/...`)."""
        name = ref.rsplit("/", 1)[-1] if ref.startswith("#/") else ref
        return self._nodes.get(name)

    def by_gvk(self, gvk: Gvk) -> Schema | None:
        return self._by_gvk.get(gvk)

    @property
    def object_meta(self) -> Schema | None:
        """ObjectMeta, which embedded resources' metadata is checked against."""
        return self._nodes.get(OBJECT_META)

    def gvks(self) -> Iterator[Gvk]:
        return iter(self._by_gvk)

    def closure(self, roots: Sequence[Schema]) -> list[str]:
        """Names of the definitions reachable from `roots` (themselves included), sorted."""
        seen: set[str] = set()
        stack = [r.target for r in roots]
        while stack:
            node = stack.pop()
            if node.name is not None:
                if node.name in seen:
                    continue
                seen.add(node.name)
            for child in _children(node):
                stack.append(child.target)
        return sorted(seen)


def _children(node: Schema) -> Iterator[Schema]:
    yield from node.properties.values()
    if node.items is not None:
        yield node.items
    if node.additional is not None:
        yield node.additional


def parse_path(path: str | Sequence[PathPart]) -> list[PathPart]:
    """`spec.containers[0].name` (or `spec.containers[*].name`) as ["spec", "containers", 0, "name"];
    a `*` index is kept as "*" (any item)."""
    if not isinstance(path, str):
        return list(path)
    parts: list[PathPart] = []
    pos = 0
    while pos < len(path):
        m = _PATH_TOKEN.match(path, pos)
        if m is None or (m.group(1) is not None and pos > 0 and path[pos] != "."):
            raise ValueError(f"invalid field path {path!r} at {pos}")
        if m.group(1) is not None:
            parts.append(m.group(1))
        else:
            index = m.group(2)
            parts.append(int(index) if index != "*" else "*")
        pos = m.end()
    return parts


def walk(schema: Schema, path: str | Sequence[PathPart]) -> Schema | None:
    """The schema at `path` below `schema`: names step into struct properties and map values,
    indexes (or "*") into list items. None when the path leaves the schema; below a free-form
    node the walk stays on that node."""
    node: Schema = schema
    for part in parse_path(path):
        shape = node.shape
        if shape == Shape.ANY:
            return node
        if shape == Shape.LIST:
            if isinstance(part, int) or part == "*":
                item = node.items
                if item is None:
                    return None
                node = item
                continue
            return None
        if isinstance(part, int):
            return None
        if shape == Shape.STRUCT:
            child = node.field(part)
            if child is None:
                return None
            node = child
        elif shape == Shape.MAP:
            value = node.additional
            if value is None:
                return None
            node = value
        else:
            return None
    return node


def semantics_at(schema: Schema, path: str | Sequence[PathPart]) -> MergeSemantics | None:
    """The merge semantics of the list or map at `path`, or None when there is no such field."""
    node = walk(schema, path)
    return merge_semantics(node) if node is not None else None


@functools.cache
def definitions() -> Definitions:
    """The Kubernetes 1.37 definitions, loaded on first use and kept, with the VPA kinds (CRDs upstream)."""
    return Definitions.from_raw({**load_raw(), **vpa_definitions()})
