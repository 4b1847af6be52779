"""Schema nodes: the compact form of one OpenAPI schema, and the merge semantics it declares.

A node is what validation, patching and server-side apply need to know about one field: its
shape (struct, map, list, scalar, int-or-string, quantity, free-form), its children, and the
extensions that say how lists and maps merge. A node that was a `$ref` in the source keeps its
own description and points at the definition it names (`ref`); every accessor follows it, so
callers never see references.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Shape(StrEnum):
    STRUCT = "struct"  # an object with known properties (unknown ones are errors unless preserved)
    MAP = "map"  # an object whose values all follow one schema (additionalProperties)
    LIST = "list"
    STRING = "string"
    INTEGER = "integer"
    NUMBER = "number"
    BOOLEAN = "boolean"
    INT_OR_STRING = "int-or-string"
    QUANTITY = "quantity"  # a resource.Quantity: a string like "100m" or a JSON number
    ANY = "any"  # free-form JSON (RawExtension, apiextensions JSON): nothing is checked below


class ListType(StrEnum):
    """x-kubernetes-list-type; lists without one are atomic, as structured-merge-diff treats them."""

    ATOMIC = "atomic"
    SET = "set"
    MAP = "map"


class MapType(StrEnum):
    """x-kubernetes-map-type (also for structs); the default is granular."""

    GRANULAR = "granular"
    ATOMIC = "atomic"


@dataclass(frozen=True, slots=True)
class Gvk:
    group: str
    version: str
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def __str__(self) -> str:
        return f"{self.api_version}, Kind={self.kind}"


class Schema:
    """One schema node. Built by the loader, never changed afterwards."""

    __slots__ = (
        "_additional",
        "_enum",
        "_ext",
        "_format",
        "_items",
        "_properties",
        "_required",
        "_shape",
        "cache",
        "description",
        "name",
        "nullable",
        "ref",
    )

    def __init__(
        self,
        *,
        shape: Shape | None = None,
        name: str | None = None,
        description: str | None = None,
        nullable: bool = False,
        fmt: str | None = None,
        properties: Mapping[str, Schema] | None = None,
        required: tuple[str, ...] = (),
        items: Schema | None = None,
        additional: Schema | None = None,
        enum: tuple[Any, ...] | None = None,
        extensions: Mapping[str, Any] | None = None,
        ref: Schema | None = None,
    ) -> None:
        self._shape = shape
        self.name = name  # the definition's name when this node is a definition
        self.description = description
        self.nullable = nullable
        self._format = fmt
        self._properties = dict(properties) if properties else None
        self._required = required
        self._items = items
        self._additional = additional
        self._enum = enum
        self._ext = dict(extensions) if extensions else None
        self.ref = ref  # the definition a `$ref` named (linked after loading)
        self.cache: dict[str, Any] | None = None  # what users derive from this node once (apply's semantics)

    def __repr__(self) -> str:
        target = self.target
        return f"Schema({target.name or target.shape})"

    # ---- structure (references followed) ----

    @property
    def target(self) -> Schema:
        node = self
        while node.ref is not None:
            node = node.ref
        return node

    @property
    def shape(self) -> Shape:
        shape = self.target._shape
        if shape is None:  # a reference never linked: the loader links all of them
            raise RuntimeError(f"schema {self.name!r} has no shape")
        return shape

    @property
    def format(self) -> str | None:
        return self._format or self.target._format

    @property
    def properties(self) -> Mapping[str, Schema]:
        return self.target._properties or {}

    @property
    def required(self) -> tuple[str, ...]:
        return self.target._required

    @property
    def items(self) -> Schema | None:
        return self.target._items

    @property
    def additional(self) -> Schema | None:
        """The schema of a map's values."""
        return self.target._additional

    @property
    def enum(self) -> tuple[Any, ...] | None:
        return self.target._enum

    def field(self, name: str) -> Schema | None:
        props = self.target._properties
        return props.get(name) if props else None

    def extension(self, key: str) -> Any:
        """An `x-kubernetes-*` value: this node's own, else the definition's it refers to."""
        node: Schema | None = self
        while node is not None:
            if node._ext and key in node._ext:
                return node._ext[key]
            node = node.ref
        return None

    @property
    def own_extensions(self) -> Mapping[str, Any]:
        """The extensions written on this node itself (not on the definition it refers to)."""
        return self._ext or {}

    @property
    def own_format(self) -> str | None:
        return self._format

    # ---- the extensions, typed ----

    @property
    def gvks(self) -> tuple[Gvk, ...]:
        raw = self.extension("x-kubernetes-group-version-kind") or ()
        return tuple(Gvk(g.get("group", ""), g["version"], g["kind"]) for g in raw)

    @property
    def preserve_unknown_fields(self) -> bool:
        return bool(self.extension("x-kubernetes-preserve-unknown-fields"))

    @property
    def embedded_resource(self) -> bool:
        return bool(self.extension("x-kubernetes-embedded-resource"))

    @property
    def list_type(self) -> ListType:
        raw = self.extension("x-kubernetes-list-type")
        try:
            return ListType(raw) if raw else ListType.ATOMIC
        except ValueError:
            return ListType.ATOMIC

    @property
    def list_map_keys(self) -> tuple[str, ...]:
        return tuple(self.extension("x-kubernetes-list-map-keys") or ())

    @property
    def map_type(self) -> MapType:
        raw = self.extension("x-kubernetes-map-type")
        return MapType.ATOMIC if raw == "atomic" else MapType.GRANULAR

    @property
    def patch_strategies(self) -> tuple[str, ...]:
        """x-kubernetes-patch-strategy split on commas: e.g. ("merge", "retainKeys")."""
        raw = self.extension("x-kubernetes-patch-strategy")
        return tuple(s.strip() for s in raw.split(",") if s.strip()) if raw else ()

    @property
    def patch_merge_key(self) -> str | None:
        raw = self.extension("x-kubernetes-patch-merge-key")
        return str(raw) if raw else None


@dataclass(frozen=True, slots=True)
class MergeSemantics:
    """How a list or map field merges, as both patch engines read it from the schema.

    Strategic merge patch reads `patch_strategies` and `merge_key`; server-side apply reads
    `list_type`, `list_map_keys` and `map_type`.
    """

    patch_strategies: tuple[str, ...]
    merge_key: str | None
    list_type: ListType
    list_map_keys: tuple[str, ...]
    map_type: MapType

    @property
    def strategic_merge(self) -> bool:
        return "merge" in self.patch_strategies

    @property
    def retain_keys(self) -> bool:
        return "retainKeys" in self.patch_strategies


def merge_semantics(schema: Schema) -> MergeSemantics:
    return MergeSemantics(
        patch_strategies=schema.patch_strategies,
        merge_key=schema.patch_merge_key,
        list_type=schema.list_type,
        list_map_keys=schema.list_map_keys,
        map_type=schema.map_type,
    )
