"""Field paths and sets of them, as structured-merge-diff keeps them for server-side apply, and
their `fieldsV1` encoding in `metadata.managedFields`.

A path element is one of: a struct field or map key (`f:<name>`), a list item by its key fields
(`k:{"name":"c"}`, the fields sorted, compact JSON), a set item by value (`v:"x"`), or a list
index (`i:0`). A Set is a trie: the elements that are members here, and a subset per child
element. fieldsV1 is that trie as JSON: each child element maps to its subtree, a member with no
children to `{}`, and a member that also has children carries `".": {}` in its subtree.

Hand-written (no Python port of structured-merge-diff exists); the semantics are the Go
package's: inserting the empty path is a no-op (the object itself is never owned), Intersection
keeps common members and non-empty common subtrees, Difference removes members and recurses,
RecursiveDifference also drops every subtree under a removed member.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

FIELD, KEY, VALUE, INDEX = "f", "k", "v", "i"
_ORDER = {FIELD: 0, KEY: 1, VALUE: 2, INDEX: 3}


def canonical_json(value: Any) -> str:
    """Compact JSON with sorted keys; integral floats as integers (Go decodes 80 and 80.0 alike)."""
    return json.dumps(_normalize(value), separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def _normalize(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    if isinstance(value, dict):
        return {k: _normalize(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalize(v) for v in value]
    return value


@dataclass(frozen=True, slots=True, order=False)
class PathElement:
    """`kind` is f, k, v or i; `text` is what follows `<kind>:` in fieldsV1."""

    kind: str
    text: str

    @classmethod
    def field(cls, name: str) -> PathElement:
        return _field_element(name)

    @classmethod
    def key(cls, fields: Mapping[str, Any]) -> PathElement:
        parts = []
        for name in sorted(fields):
            v = fields[name]
            if isinstance(v, str):
                text = json.dumps(v, ensure_ascii=False)
            elif isinstance(v, int) and not isinstance(v, bool):
                text = str(v)
            else:
                text = canonical_json(v)
            parts.append(f"{json.dumps(name, ensure_ascii=False)}:{text}")
        return cls(KEY, "{" + ",".join(parts) + "}")

    @classmethod
    def value(cls, value: Any) -> PathElement:
        return cls(VALUE, canonical_json(value))

    @classmethod
    def index(cls, i: int) -> PathElement:
        return cls(INDEX, str(i))

    @classmethod
    def parse(cls, s: str) -> PathElement:
        """A fieldsV1 key (`f:name`, `k:{...}`, `v:...`, `i:N`); ValueError when malformed."""
        if len(s) < 2 or s[1] != ":":
            raise ValueError(f"invalid field path element {s[:40]!r}: want f:, k:, v: or i:")
        kind, body = s[0], s[2:]
        if kind == FIELD:
            return cls(FIELD, body)
        if kind == INDEX:
            if not body.isdigit() and not (body.startswith("-") and body[1:].isdigit()):
                raise ValueError(f"invalid list index in {s[:40]!r}")
            return cls(INDEX, str(int(body)))
        if kind in (KEY, VALUE):
            try:
                parsed = json.loads(body)
            except (ValueError, RecursionError):
                raise ValueError(f"invalid JSON in {s[:40]!r}") from None
            if kind == KEY:
                if not isinstance(parsed, dict):
                    raise ValueError(f"a k: element must hold a JSON object: {s[:40]!r}")
                return cls.key(parsed)
            return cls.value(parsed)
        raise ValueError(f"unknown path element type in {s[:40]!r}")

    def serialize(self) -> str:
        return f"{self.kind}:{self.text}"

    def sort_key(self) -> tuple[int, Any]:
        return (_ORDER[self.kind], int(self.text) if self.kind == INDEX else self.text)

    def __str__(self) -> str:
        """As structured-merge-diff prints it in conflicts: `.name`, `[k="v",n=1]`, `[="x"]`, `[0]`."""
        if self.kind == FIELD:
            return "." + self.text
        if self.kind == KEY:
            fields = json.loads(self.text)
            return "[" + ",".join(f"{k}={_show(v)}" for k, v in fields.items()) + "]"
        if self.kind == VALUE:
            return f"[={_show(json.loads(self.text))}]"
        return f"[{self.text}]"


def _show(value: Any) -> str:
    return json.dumps(value) if isinstance(value, str) else canonical_json(value)


Path = tuple[PathElement, ...]


def path_string(path: Path) -> str:
    return "".join(str(pe) for pe in path)


class FieldSet:
    """An immutable set of paths (a trie)."""

    __slots__ = ("_v1", "children", "members")

    def __init__(
        self, members: frozenset[PathElement] = frozenset(), children: Mapping[PathElement, FieldSet] | None = None
    ):
        self._v1: bytes | None = None
        self.members = members
        self.children: Mapping[PathElement, FieldSet] = {k: v for k, v in (children or {}).items() if not v.empty}

    @classmethod
    def of(cls, *paths: Path) -> FieldSet:
        builder = _Builder()
        for p in paths:
            builder.insert(p)
        return builder.build()

    @property
    def empty(self) -> bool:
        return not self.members and not self.children

    def __eq__(self, other: object) -> bool:
        return self is other or (
            isinstance(other, FieldSet)
            and self.members == other.members
            and dict(self.children) == dict(other.children)
        )

    def __hash__(self) -> int:  # pragma: no cover - sets are not dict keys
        return hash((self.members, tuple(sorted(self.children.items(), key=lambda kv: kv[0].sort_key()))))

    def __repr__(self) -> str:
        return f"FieldSet({sorted(path_string(p) for p in self.paths())})"

    def has(self, path: Path) -> bool:
        node: FieldSet = self
        for pe in path[:-1]:
            child = node.children.get(pe)
            if child is None:
                return False
            node = child
        return bool(path) and path[-1] in node.members

    def with_prefix(self, pe: PathElement) -> FieldSet:
        return self.children.get(pe, EMPTY)

    def paths(self, prefix: Path = ()) -> Iterator[Path]:
        """Every member path, in fieldsV1 order."""
        for pe in sorted({*self.members, *self.children}, key=PathElement.sort_key):
            if pe in self.members:
                yield (*prefix, pe)
            child = self.children.get(pe)
            if child is not None:
                yield from child.paths((*prefix, pe))

    def union(self, other: FieldSet) -> FieldSet:
        if other.empty:
            return self
        if self.empty:
            return other
        children = dict(self.children)
        for pe, sub in other.children.items():
            children[pe] = children[pe].union(sub) if pe in children else sub
        return FieldSet(self.members | other.members, children)

    def intersection(self, other: FieldSet) -> FieldSet:
        children = {
            pe: sub.intersection(other.children[pe]) for pe, sub in self.children.items() if pe in other.children
        }
        return FieldSet(self.members & other.members, children)

    def difference(self, other: FieldSet) -> FieldSet:
        """`self` itself when `other` takes nothing away: its fieldsV1 text, once encoded, is kept."""
        if other.empty or self.empty:
            return self
        children = {
            pe: (sub.difference(other.children[pe]) if pe in other.children else sub)
            for pe, sub in self.children.items()
        }
        members = self.members - other.members
        if len(members) == len(self.members) and all(children[pe] is sub for pe, sub in self.children.items()):
            return self
        return FieldSet(members, children)

    def recursive_difference(self, other: FieldSet) -> FieldSet:
        """Remove every member of `other` and, for those, everything below them too."""
        if other.empty or self.empty:
            return self
        children = {}
        for pe, sub in self.children.items():
            if pe in other.members:
                continue
            children[pe] = sub.recursive_difference(other.children[pe]) if pe in other.children else sub
        return FieldSet(self.members - other.members, children)

    # ---- fieldsV1 ----

    def to_fields_v1(self) -> dict[str, Any]:
        """The fieldsV1 trie (a fresh dict; the encoding is computed once per set)."""
        if self._v1 is None:
            emitted = self._emit(include_self=False)
            self._v1 = orjson.dumps(emitted)
            return emitted  # the caller may change it: the cache keeps the text
        result: dict[str, Any] = orjson.loads(self._v1)
        return result

    def _emit(self, include_self: bool) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if include_self and not self.empty:
            out["."] = {}
        for pe in sorted({*self.members, *self.children}, key=PathElement.sort_key):
            child = self.children.get(pe)
            if child is None:
                out[pe.serialize()] = {}
            elif child._v1 is not None:  # a set encoded before (a shared subtree: typed.py's memo)
                below = orjson.loads(child._v1)
                out[pe.serialize()] = {".": {}, **below} if pe in self.members else below
            else:
                out[pe.serialize()] = child._emit(pe in self.members)
        return out

    @classmethod
    def from_fields_v1(cls, raw: Any) -> FieldSet:
        """Parse a fieldsV1 trie; ValueError names what is malformed. Parsed sets are cached by
        their text: every write of an object reads the same managedFields again."""
        if not isinstance(raw, dict):
            raise ValueError("fieldsV1 must be a JSON object")
        try:  # orjson: the standard library's dumps and loads were a fifth of a status write's field manager
            text = orjson.dumps(raw, option=orjson.OPT_SORT_KEYS)
        except (TypeError, ValueError, RecursionError):
            raise ValueError("fieldsV1 must be JSON") from None
        return _parse_cached(text)

    @classmethod
    def _parse(cls, raw: Mapping[str, Any], depth: int) -> FieldSet:
        if depth > 200:
            raise ValueError("fieldsV1 nested too deeply")
        members: set[PathElement] = set()
        children: dict[PathElement, FieldSet] = {}
        for key, sub in raw.items():
            if key == ".":
                continue
            if not isinstance(sub, dict):
                raise ValueError(f"fieldsV1 value of {key[:40]!r} must be a JSON object")
            pe = PathElement.parse(key)
            if not sub or "." in sub:
                members.add(pe)
            child = cls._parse(sub, depth + 1)
            if not child.empty:
                children[pe] = child
        return cls(frozenset(members), children)


EMPTY = FieldSet()


@functools.lru_cache(maxsize=16384)
def _field_element(name: str) -> PathElement:
    """Field elements are made for every field of every object walked: made once per name."""
    return PathElement(FIELD, name)


@functools.lru_cache(maxsize=4096)
def _parse_cached(text: bytes) -> FieldSet:
    return FieldSet._parse(orjson.loads(text), 0)


class _Builder:
    """Mutable trie for building a FieldSet by inserting paths."""

    __slots__ = ("children", "members")

    def __init__(self) -> None:
        self.members: set[PathElement] = set()
        self.children: dict[PathElement, _Builder] = {}

    def insert(self, path: Path) -> None:
        if not path:
            return  # the object itself is never owned
        node = self
        for pe in path[:-1]:
            node = node.children.setdefault(pe, _Builder())
        node.members.add(path[-1])

    def build(self) -> FieldSet:
        return FieldSet(frozenset(self.members), {pe: b.build() for pe, b in self.children.items()})


def builder() -> _Builder:
    return _Builder()
