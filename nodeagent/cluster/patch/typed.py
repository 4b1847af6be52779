"""Objects walked along their schema as structured-merge-diff does for server-side apply: the set
of fields a value sets, the difference between two values, merging an applied configuration
into a live object, and removing fields.

How a schema node is read (kube-openapi's conversion to structured-merge-diff schemas):
- a struct is a granular map of named fields, or atomic with `x-kubernetes-map-type: atomic`;
  a map (additionalProperties) likewise;
- a list is `x-kubernetes-list-type` atomic, set (items by value) or map (items by
  `x-kubernetes-list-map-keys`); without a list type, a list whose patch strategy is `merge` is a
  map keyed by its patch merge key (a set when it has none), any other list is atomic;
- scalars, int-or-string, quantities and free-form values (RawExtension) are leaves;
- a field the schema does not know is deduced from its value: objects are granular maps, lists
  are atomic.
A list-map item that omits a key field takes the key's default when the API defines one (only
`protocol`, "TCP", for ports); otherwise it is an error, as upstream.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

import orjson

from nodeagent.cluster.patch.errors import UNPROCESSABLE, PatchError
from nodeagent.cluster.patch.fieldpath import EMPTY, FieldSet, Path, PathElement, canonical_json, path_string
from nodeagent.cluster.schema.model import ListType, MapType, Schema, Shape

MAX_DEPTH = 200
KEY_DEFAULTS = {"protocol": "TCP"}


class _Absent:
    """A value that is not there (distinct from JSON null)."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()


class Kind(Enum):
    LEAF = "leaf"  # scalars, atomic lists and maps, free-form values
    STRUCT = "struct"
    MAP = "map"
    LIST_SET = "set"
    LIST_MAP = "list-map"


@dataclass(frozen=True, slots=True)
class Node:
    kind: Kind
    schema: Schema | None
    keys: tuple[str, ...] = ()


class TypedError(PatchError):
    """A value that cannot be walked (a list-map item without its key, duplicate keys)."""

    def __init__(self, path: Path, message: str) -> None:
        where = path_string(path) or "."
        super().__init__(f"{where}: {message}", UNPROCESSABLE)


def resolve(schema: Schema | None, value: Any) -> Node:
    """How `value` at a node of `schema` is walked."""
    if schema is None:
        return _DEDUCED_MAP if isinstance(value, dict) else _DEDUCED_LEAF
    cache = schema.cache
    if cache is None:
        cache = schema.cache = {}
    nodes = cache.get("apply")
    if nodes is None:
        nodes = cache["apply"] = _semantics(schema)
    if isinstance(value, dict):
        return nodes[0]
    if isinstance(value, list):
        return nodes[1]
    return nodes[2]


_DEDUCED_MAP = Node(Kind.MAP, None)
_DEDUCED_LEAF = Node(Kind.LEAF, None)


def _semantics(schema: Schema) -> tuple[Node, Node, Node]:
    """(node for a dict value, for a list value, for anything else) of a schema."""
    leaf = Node(Kind.LEAF, schema)
    shape = schema.shape
    as_dict = as_list = leaf
    if shape == Shape.STRUCT and schema.map_type != MapType.ATOMIC:
        as_dict = Node(Kind.STRUCT, schema)
    elif shape == Shape.MAP and schema.map_type != MapType.ATOMIC:
        as_dict = Node(Kind.MAP, schema)
    elif shape == Shape.LIST:
        if schema.extension("x-kubernetes-list-type"):
            list_type = schema.list_type
            if list_type == ListType.SET:
                as_list = Node(Kind.LIST_SET, schema)
            elif list_type == ListType.MAP:
                as_list = Node(Kind.LIST_MAP, schema, schema.list_map_keys)
        elif "merge" in schema.patch_strategies:
            key = schema.patch_merge_key
            as_list = Node(Kind.LIST_MAP, schema, (key,)) if key else Node(Kind.LIST_SET, schema)
    return as_dict, as_list, leaf


def child_schema(node: Node, key: str) -> Schema | None:
    if node.schema is None:
        return None
    if node.kind == Kind.STRUCT:
        return node.schema.field(key)
    if node.kind == Kind.MAP:
        return node.schema.additional
    return None


def _is_named(node: Node, key: str) -> bool:
    return node.kind == Kind.STRUCT and node.schema is not None and node.schema.field(key) is not None


def item_schema(node: Node) -> Schema | None:
    return node.schema.items if node.schema is not None else None


def item_element(node: Node, item: Any, path: Path) -> PathElement:
    """The path element of a list item: its keys (list-map) or its value (set)."""
    if node.kind == Kind.LIST_MAP:
        if item is None:
            raise TypedError(path, "associative list with keys may not have a null element")
        if not isinstance(item, dict):
            raise TypedError(path, "associative list with keys may not have non-map elements")
        fields = {}
        for key in node.keys:
            if key in item:
                fields[key] = item[key]
            elif key in KEY_DEFAULTS:
                fields[key] = KEY_DEFAULTS[key]
            else:
                message = f'associative list with keys has an element that omits key field "{key}"'
                raise TypedError(path, message + " (and doesn't have default value)")
        return PathElement.key(fields)
    if isinstance(item, dict):
        raise TypedError(path, "associative list without keys has an element that's a map type")
    return PathElement.value(item)


def _depth(path: Path) -> None:
    if len(path) > MAX_DEPTH:
        raise TypedError(path, f"nested deeper than {MAX_DEPTH} levels")


# ---- the fields a value sets ----
#
# field_set and compare build their tries bottom-up (each subtree's set, then its parent's),
# which costs one visit per value instead of one root-to-leaf insert per path.


def field_set(value: Any, schema: Schema | None) -> FieldSet:
    """Every field `value` sets (structured-merge-diff's ToFieldSet)."""
    node = resolve(schema, value)
    if node.kind == Kind.LEAF:
        return EMPTY  # the object itself is never a member
    return _set_below(value, node, 0)


def _set_below(value: Any, node: Node, depth: int) -> FieldSet:
    """The fields set below a non-leaf value (its own path excluded)."""
    if depth > MAX_DEPTH:
        raise TypedError((), f"nested deeper than {MAX_DEPTH} levels")
    members: set[PathElement] = set()
    children: dict[PathElement, FieldSet] = {}
    if node.kind in (Kind.STRUCT, Kind.MAP):
        struct = node.kind == Kind.STRUCT
        for key, v in value.items():
            pe = PathElement.field(key)
            child_node = resolve(child_schema(node, key), v)
            if child_node.kind == Kind.LEAF:
                members.add(pe)
                continue
            below = _set_below(v, child_node, depth + 1)
            if not below.empty:
                children[pe] = below
            if (isinstance(v, dict) and not v) or not (
                struct and node.schema is not None and node.schema.field(key) is not None
            ):
                members.add(pe)
        return FieldSet(frozenset(members), children)
    elements = _elements(node, value, ())
    counts: dict[PathElement, int] = {}
    for pe in elements:
        counts[pe] = counts.get(pe, 0) + 1
    items = item_schema(node)
    for pe, item in zip(elements, value, strict=True):
        members.add(pe)
        if counts[pe] > 1:
            continue
        child_node = resolve(items, item)
        if child_node.kind != Kind.LEAF:
            below = _set_below(item, child_node, depth + 1)
            if not below.empty:
                children[pe] = below
    return FieldSet(frozenset(members), children)


def _elements(node: Node, items: list[Any], path: Path) -> list[PathElement]:
    return [item_element(node, item, (*path, PathElement.index(i))) for i, item in enumerate(items)]


def check(value: Any, schema: Schema | None) -> None:
    """Raise TypedError where `value` cannot be walked: list-map items without their keys or
    with the same keys, set items that are maps (what upstream's typed conversion refuses in an
    applied configuration)."""
    _check(value, schema, ())


def _check(value: Any, schema: Schema | None, path: Path) -> None:
    _depth(path)
    node = resolve(schema, value)
    if node.kind in (Kind.STRUCT, Kind.MAP):
        for key, v in value.items():
            _check(v, child_schema(node, key), (*path, PathElement.field(key)))
    elif node.kind in (Kind.LIST_SET, Kind.LIST_MAP):
        _unique_elements(node, value, path)
        for i, item in enumerate(value):
            _check(item, item_schema(node), (*path, item_element(node, item, (*path, PathElement.index(i)))))


# ---- comparing two values ----

_SELF_ADDED, _SELF_MODIFIED, _SELF_REMOVED = 1, 2, 4
_Diff = tuple[int, FieldSet, FieldSet, FieldSet]  # (flags for the node itself, added, modified, removed below)
_NO_DIFF: _Diff = (0, EMPTY, EMPTY, EMPTY)


def compare(lhs: Any, rhs: Any, schema: Schema | None) -> tuple[FieldSet, FieldSet, FieldSet]:
    """(added, modified, removed) going from `lhs` to `rhs` (structured-merge-diff's Compare;
    either may be ABSENT)."""
    _, added, modified, removed = _compare(lhs, rhs, schema, 0)
    return added, modified, removed


def _same_json(a: Any, b: Any) -> bool:
    """Byte-equal JSON (orjson, sorted keys): true/1 and 1/1.0 differ here, so a False only sends
    the caller down the exact comparison, never to a wrong "unchanged"."""
    try:
        return orjson.dumps(a, option=orjson.OPT_SORT_KEYS) == orjson.dumps(b, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # what orjson cannot encode (an integer beyond 64 bits) is compared exactly
        return False


def _json_equal(a: Any, b: Any) -> bool:
    if type(a) is type(b) and type(a) in _EXACT:  # == is JSON equality for these (no 1 == True, no -0.0)
        return bool(a == b)
    return canonical_json(a) == canonical_json(b)


_EXACT = (str, bool, int, type(None))


def _leaf(lhs: Any, rhs: Any) -> _Diff:
    if lhs is ABSENT:
        return (_SELF_ADDED, EMPTY, EMPTY, EMPTY)
    if rhs is ABSENT:
        return (_SELF_REMOVED, EMPTY, EMPTY, EMPTY)
    if not _json_equal(lhs, rhs):
        return (_SELF_MODIFIED, EMPTY, EMPTY, EMPTY)
    return _NO_DIFF


class _OneSidedMemo:
    """_one_sided of top-level fields by their canonical JSON: every pod a ReplicaSet creates has
    the same spec, whose field set (and its fieldsV1 text, kept in the set) is then computed once,
    not on every create. Least recently used sets go first."""

    SIZE = 256

    def __init__(self) -> None:
        self._sets: dict[bytes, tuple[Node, FieldSet]] = {}

    def get(self, value: dict[str, Any], node: Node, depth: int) -> FieldSet:
        try:
            key = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        except TypeError:  # what orjson cannot encode (an integer beyond 64 bits) is walked each time
            return _walk_one_sided(value, node, depth)
        hit = self._sets.pop(key, None)
        if hit is None or hit[0] is not node:
            hit = (node, _walk_one_sided(value, node, depth))
            if len(self._sets) >= self.SIZE:
                del self._sets[next(iter(self._sets))]
        elif hit[1]._v1 is None:
            hit[1].to_fields_v1()  # seen twice: encoded once, reused by every set that holds this one
        self._sets[key] = hit
        return hit[1]


_ONE_SIDED = _OneSidedMemo()


def _one_sided(value: Any, node: Node, depth: int) -> FieldSet:
    """Everything below a value the other side lacks: every path is a member."""
    if depth == 1 and node.kind in (Kind.STRUCT, Kind.MAP) and value:
        return _ONE_SIDED.get(value, node, depth)
    return _walk_one_sided(value, node, depth)


def _walk_one_sided(value: Any, node: Node, depth: int) -> FieldSet:
    if depth > MAX_DEPTH:
        raise TypedError((), f"nested deeper than {MAX_DEPTH} levels")
    if node.kind == Kind.LEAF or not value:
        return EMPTY
    members: set[PathElement] = set()
    children: dict[PathElement, FieldSet] = {}
    if node.kind in (Kind.STRUCT, Kind.MAP):
        for key, v in value.items():
            pe = PathElement.field(key)
            members.add(pe)
            if v and isinstance(v, dict | list):  # scalars and empty values have nothing below
                child = resolve(child_schema(node, key), v)
                # an object's metadata (its uid, its name) is never another's: not worth remembering
                below = _walk_one_sided(v, child, depth + 1) if key == "metadata" else _one_sided(v, child, depth + 1)
                if not below.empty:
                    children[pe] = below
        return FieldSet(frozenset(members), children)
    elements = _elements(node, value, ())
    counts: dict[PathElement, int] = {}
    for pe in elements:
        counts[pe] = counts.get(pe, 0) + 1
    items = item_schema(node)
    for pe, item in zip(elements, value, strict=True):
        members.add(pe)
        if counts[pe] == 1 and item and isinstance(item, dict | list):
            below = _one_sided(item, resolve(items, item), depth + 1)
            if not below.empty:
                children[pe] = below
    return FieldSet(frozenset(members), children)


def _compare(lhs: Any, rhs: Any, schema: Schema | None, depth: int) -> _Diff:
    if depth > MAX_DEPTH:
        raise TypedError((), f"nested deeper than {MAX_DEPTH} levels")
    if lhs is rhs and lhs is not ABSENT:  # one object on both sides (a write that copied only what it changed)
        return _NO_DIFF
    if lhs is ABSENT:
        node = resolve(schema, rhs)
        if node.kind == Kind.LEAF or _empty(rhs):
            return _leaf(lhs, rhs)
        return (_SELF_ADDED, _one_sided(rhs, node, depth), EMPTY, EMPTY)
    if rhs is ABSENT:
        node = resolve(schema, lhs)
        if node.kind == Kind.LEAF or _empty(lhs):
            return _leaf(lhs, rhs)
        return (_SELF_REMOVED, EMPTY, EMPTY, _one_sided(lhs, node, depth))
    lnode, rnode = resolve(schema, lhs), resolve(schema, rhs)
    if lnode.kind != rnode.kind or rnode.kind == Kind.LEAF or (_empty(lhs) and _empty(rhs)):
        return _leaf(lhs, rhs)
    if lhs == rhs and _same_json(lhs, rhs):
        # an unchanged subtree, found at C speed; == alone is not enough: Python's == takes true
        # for 1 and a value of the wrong type (a bool where the schema says string) can be there
        return _NO_DIFF
    sides: tuple[_Tries, _Tries, _Tries] = (_Tries(), _Tries(), _Tries())
    if rnode.kind in (Kind.STRUCT, Kind.MAP):
        for key, lv in lhs.items():
            _collect(
                sides, PathElement.field(key), _compare(lv, rhs.get(key, ABSENT), child_schema(rnode, key), depth + 1)
            )
        for key, rv in rhs.items():
            if key not in lhs:
                _collect(sides, PathElement.field(key), _compare(ABSENT, rv, child_schema(rnode, key), depth + 1))
    else:
        _compare_lists(rnode, lhs, rhs, sides, depth)
    return (0, sides[0].build(), sides[1].build(), sides[2].build())


class _Tries:
    __slots__ = ("children", "members")

    def __init__(self) -> None:
        self.members: set[PathElement] = set()
        self.children: dict[PathElement, FieldSet] = {}

    def build(self) -> FieldSet:
        if not self.members and not self.children:
            return EMPTY
        return FieldSet(frozenset(self.members), self.children)


def _collect(sides: tuple[_Tries, _Tries, _Tries], pe: PathElement, diff: _Diff) -> None:
    flags, added, modified, removed = diff
    for bit, side, below in (
        (_SELF_ADDED, sides[0], added),
        (_SELF_MODIFIED, sides[1], modified),
        (_SELF_REMOVED, sides[2], removed),
    ):
        if flags & bit:
            side.members.add(pe)
        if not below.empty:
            side.children[pe] = below


def _empty(value: Any) -> bool:
    return value is ABSENT or ((isinstance(value, dict | list)) and not value)


def _compare_lists(
    node: Node, lhs: list[Any], rhs: list[Any], sides: tuple[_Tries, _Tries, _Tries], depth: int
) -> None:
    order: list[PathElement] = []
    left: dict[PathElement, list[Any]] = {}
    right: dict[PathElement, list[Any]] = {}
    for pe, item in zip(_elements(node, lhs, ()), lhs, strict=True):
        if pe not in left:
            order.append(pe)
        left.setdefault(pe, []).append(item)
    for pe, item in zip(_elements(node, rhs, ()), rhs, strict=True):
        if pe not in right and pe not in left:
            order.append(pe)
        right.setdefault(pe, []).append(item)
    items = item_schema(node)
    for pe in order:
        ls, rs = left.get(pe, []), right.get(pe, [])
        if len(ls) <= 1 and len(rs) <= 1:
            _collect(sides, pe, _compare(ls[0] if ls else ABSENT, rs[0] if rs else ABSENT, items, depth + 1))
        elif len(ls) >= 2 and len(rs) >= 2:
            if len(ls) != len(rs) or not all(_json_equal(a, b) for a, b in zip(ls, rs, strict=True)):
                sides[1].members.add(pe)
        elif len(ls) >= 2:
            if rs:
                _collect(sides, pe, _compare(ABSENT, rs[0], items, depth + 1))
            sides[2].members.add(pe)
        else:
            if ls:
                _collect(sides, pe, _compare(ls[0], ABSENT, items, depth + 1))
            sides[0].members.add(pe)


# ---- merging an applied configuration ----


def merge(lhs: Any, rhs: Any, schema: Schema | None) -> Any:
    """`rhs` (an applied configuration) merged into `lhs` (structured-merge-diff's Merge)."""
    return _merge(lhs, rhs, schema, ())


def _merge(lhs: Any, rhs: Any, schema: Schema | None, path: Path) -> Any:
    _depth(path)
    if rhs is ABSENT:
        return lhs
    node = resolve(schema, rhs)
    if node.kind in (Kind.LIST_SET, Kind.LIST_MAP):
        _unique_elements(node, rhs, path)
    if lhs is ABSENT:
        return rhs
    lnode = resolve(schema, lhs)
    if node.kind == Kind.LEAF or lnode.kind != node.kind:
        return rhs
    if node.kind in (Kind.STRUCT, Kind.MAP):
        out = {}
        for key in [*lhs, *(k for k in rhs if k not in lhs)]:
            merged = _merge(
                lhs.get(key, ABSENT), rhs.get(key, ABSENT), child_schema(node, key), (*path, PathElement.field(key))
            )
            if merged is not ABSENT:
                out[key] = merged
        return out
    return _merge_lists(node, lhs, rhs, path)


def _unique_elements(node: Node, items: list[Any], path: Path) -> None:
    seen: set[PathElement] = set()
    for i, item in enumerate(items):
        pe = item_element(node, item, (*path, PathElement.index(i)))
        if pe in seen:
            raise TypedError(path, f"duplicate entries for key {pe}")
        seen.add(pe)


def _merge_lists(node: Node, lhs: list[Any], rhs: list[Any], path: Path) -> list[Any]:
    """Upstream's order: the configuration's order for the items it names, live-only items kept
    where they were relative to those."""
    items = item_schema(node)
    r_pes = [item_element(node, item, (*path, PathElement.index(i))) for i, item in enumerate(rhs)]
    r_values = dict(zip(r_pes, rhs, strict=True))
    l_pes: list[PathElement] = []
    l_values: dict[PathElement, Any] = {}
    for i, item in enumerate(lhs):
        pe = item_element(node, item, (*path, PathElement.index(i)))
        l_values[pe] = item if pe not in l_values else None  # duplicated live items merge as null
        l_pes.append(pe)
    shared = [pe for pe in r_pes if pe in l_values]
    next_shared = shared.pop(0) if shared else None
    merged_rhs: set[PathElement] = set()
    out: list[Any] = []

    def emit(pe: PathElement, left: Any, right: Any) -> None:
        value = _merge(left, right, items, (*path, pe))
        if value is not ABSENT:
            out.append(value)

    li = ri = 0
    while li < len(l_pes) or ri < len(r_pes):
        if li < len(l_pes) and ri < len(r_pes):
            pe = l_pes[li]
            if pe == r_pes[ri]:
                merged_rhs.add(pe)
                emit(pe, l_values.get(pe, ABSENT), r_values[pe])
                li += 1
                ri += 1
                next_shared = shared.pop(0) if shared else None
                continue
            if pe in r_values and next_shared is not None and next_shared != pe:
                li += 1
                continue
        if li < len(l_pes):
            pe = l_pes[li]
            if pe not in r_values:
                emit(pe, lhs[li], ABSENT)
                li += 1
                continue
            if pe in merged_rhs:
                li += 1
        if ri < len(r_pes):
            pe = r_pes[ri]
            merged_rhs.add(pe)
            emit(pe, l_values.get(pe, ABSENT), r_values[pe])
            ri += 1
            if next_shared is not None and next_shared == pe:
                next_shared = shared.pop(0) if shared else None
    return out


# ---- removing fields ----


def remove_items(value: Any, to_remove: FieldSet, schema: Schema | None) -> Any:
    """`value` without the members of `to_remove` (list items, map keys and struct fields);
    maps and lists emptied by it disappear, as upstream's removal leaves them null."""
    out = _remove(value, to_remove, schema, ())
    return {} if out is ABSENT and isinstance(value, dict) else out


def _remove(value: Any, to_remove: FieldSet, schema: Schema | None, path: Path) -> Any:
    _depth(path)
    node = resolve(schema, value)
    if node.kind == Kind.LEAF or to_remove.empty or not value:
        return value
    if node.kind in (Kind.STRUCT, Kind.MAP):
        out = {}
        for key, v in value.items():
            pe = PathElement.field(key)
            if pe in to_remove.members:
                continue
            sub = to_remove.with_prefix(pe)
            if not sub.empty:
                v = _remove(v, sub, child_schema(node, key), (*path, pe))
                if v is ABSENT:
                    continue
            out[key] = v
        return out if out else ABSENT
    items = []
    for i, item in enumerate(value):
        pe = item_element(node, item, (*path, PathElement.index(i)))
        if pe in to_remove.members:
            continue
        sub = to_remove.with_prefix(pe)
        if not sub.empty:
            item = _remove(item, sub, item_schema(node), (*path, pe))
            if item is ABSENT:
                item = None
        items.append(item)
    return items if items else ABSENT


def ensure_named_fields_are_members(s: FieldSet, schema: Schema | None) -> FieldSet:
    """`s` plus, as members, the named struct fields it has children under (so removing a set
    removes a struct field whose leaves it owned, but not a map whose keys it owned)."""
    if s.empty or schema is None:
        return s
    shape = schema.shape
    members = set(s.members)
    children = {}
    for pe, sub in s.children.items():
        child: Schema | None = None
        if pe.kind == "f":
            if shape == Shape.STRUCT:
                child = schema.field(pe.text)
                if child is not None:
                    members.add(pe)
            elif shape == Shape.MAP:
                child = schema.additional
        elif shape == Shape.LIST:
            child = schema.items
        children[pe] = ensure_named_fields_are_members(sub, child)
    return FieldSet(frozenset(members), children)


def strip(s: FieldSet, prefixes: Sequence[Path]) -> FieldSet:
    """`s` without the fields under these path prefixes (and the prefixes themselves)."""
    if not prefixes:
        return s
    return s.recursive_difference(FieldSet.of(*prefixes))


__all__ = [
    "ABSENT",
    "EMPTY",
    "TypedError",
    "check",
    "compare",
    "ensure_named_fields_are_members",
    "field_set",
    "merge",
    "remove_items",
    "strip",
]
