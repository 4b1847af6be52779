"""The bottom-up field_set and compare of cluster/patch/typed.py against a reference written the
straightforward way (one root-to-leaf insert per path, as structured-merge-diff's walkers do),
on many Pods and Deployments changed at random: both must give the same sets."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from nodeagent.cluster.patch.fieldpath import FieldSet, Path, PathElement, builder, canonical_json, path_string
from nodeagent.cluster.patch.typed import (
    ABSENT,
    MAX_DEPTH,
    Kind,
    Node,
    TypedError,
    child_schema,
    compare,
    field_set,
    item_element,
    item_schema,
    resolve,
)
from nodeagent.cluster.schema.definitions import definitions
from nodeagent.cluster.schema.model import Gvk, Schema


def _is_named(node: Node, key: str) -> bool:
    return node.kind == Kind.STRUCT and node.schema is not None and node.schema.field(key) is not None


# ---- the reference ----

def _depth(path: Path) -> None:
    if len(path) > MAX_DEPTH:
        raise TypedError(path, f"nested deeper than {MAX_DEPTH} levels")


# ---- the fields a value sets ----


def ref_field_set(value: Any, schema: Schema | None) -> FieldSet:
    """Every field `value` sets (structured-merge-diff's ToFieldSet)."""
    out = builder()
    _to_set(value, schema, (), out)
    return out.build()


def _to_set(value: Any, schema: Schema | None, path: Path, out: Any) -> None:
    _depth(path)
    node = resolve(schema, value)
    if node.kind == Kind.LEAF:
        out.insert(path)
        return
    if node.kind in (Kind.STRUCT, Kind.MAP):
        for key, v in value.items():
            sub = (*path, PathElement.field(key))
            _to_set(v, child_schema(node, key), sub, out)
            if v is None or (isinstance(v, dict) and not v) or not _is_named(node, key):
                out.insert(sub)
        return
    seen: set[PathElement] = set()
    dups: set[PathElement] = set()
    elements = [item_element(node, item, (*path, PathElement.index(i))) for i, item in enumerate(value)]
    for pe in elements:
        if pe in seen:
            dups.add(pe)
        seen.add(pe)
    for pe in dups:
        out.insert((*path, pe))
    for pe, item in zip(elements, value, strict=True):
        if pe in dups:
            continue
        sub = (*path, pe)
        _to_set(item, item_schema(node), sub, out)
        out.insert(sub)


@dataclass(slots=True)
class Comparison:
    added: Any = field(default_factory=builder)
    modified: Any = field(default_factory=builder)
    removed: Any = field(default_factory=builder)

    def sets(self) -> tuple[FieldSet, FieldSet, FieldSet]:
        return self.added.build(), self.modified.build(), self.removed.build()


def ref_compare(lhs: Any, rhs: Any, schema: Schema | None) -> tuple[FieldSet, FieldSet, FieldSet]:
    """(added, modified, removed) going from `lhs` to `rhs` (structured-merge-diff's Compare)."""
    c = Comparison()
    _compare(lhs, rhs, schema, (), c)
    return c.sets()


def _json_equal(a: Any, b: Any) -> bool:
    return canonical_json(a) == canonical_json(b)


def _leaf(lhs: Any, rhs: Any, path: Path, c: Comparison) -> None:
    if lhs is ABSENT:
        c.added.insert(path)
    elif rhs is ABSENT:
        c.removed.insert(path)
    elif not _json_equal(lhs, rhs):
        c.modified.insert(path)


def _compare(lhs: Any, rhs: Any, schema: Schema | None, path: Path, c: Comparison) -> None:
    _depth(path)
    lnode = resolve(schema, lhs) if lhs is not ABSENT else None
    rnode = resolve(schema, rhs) if rhs is not ABSENT else None
    node = rnode or lnode
    assert node is not None
    if lnode is not None and rnode is not None and lnode.kind != rnode.kind:
        _leaf(lhs, rhs, path, c)  # a value of another kind replaced this one
        return
    if node.kind == Kind.LEAF or (_empty(lhs) and _empty(rhs)):
        _leaf(lhs, rhs, path, c)
        return
    if node.kind in (Kind.STRUCT, Kind.MAP):
        left = lhs if isinstance(lhs, dict) else {}
        right = rhs if isinstance(rhs, dict) else {}
        for key in [*left, *(k for k in right if k not in left)]:
            _compare(
                left.get(key, ABSENT),
                right.get(key, ABSENT),
                child_schema(node, key),
                (*path, PathElement.field(key)),
                c,
            )
    else:
        _compare_lists(node, lhs if isinstance(lhs, list) else [], rhs if isinstance(rhs, list) else [], path, c)
    if lhs is ABSENT:
        c.added.insert(path)
    elif rhs is ABSENT:
        c.removed.insert(path)


def _empty(value: Any) -> bool:
    return value is ABSENT or ((isinstance(value, dict | list)) and not value)


def _compare_lists(node: Node, lhs: list[Any], rhs: list[Any], path: Path, c: Comparison) -> None:
    order: list[PathElement] = []
    left: dict[PathElement, list[Any]] = {}
    right: dict[PathElement, list[Any]] = {}
    for i, item in enumerate(lhs):
        pe = item_element(node, item, (*path, PathElement.index(i)))
        if pe not in left:
            order.append(pe)
        left.setdefault(pe, []).append(item)
    for i, item in enumerate(rhs):
        pe = item_element(node, item, (*path, PathElement.index(i)))
        if pe not in right and pe not in left:
            order.append(pe)
        right.setdefault(pe, []).append(item)
    items = item_schema(node)
    for pe in order:
        ls, rs = left.get(pe, []), right.get(pe, [])
        sub = (*path, pe)
        if len(ls) <= 1 and len(rs) <= 1:
            _compare(ls[0] if ls else ABSENT, rs[0] if rs else ABSENT, items, sub, c)
        elif len(ls) >= 2 and len(rs) >= 2:
            if len(ls) != len(rs) or not all(_json_equal(a, b) for a, b in zip(ls, rs, strict=True)):
                c.modified.insert(sub)
        elif len(ls) >= 2:
            if rs:
                _compare(ABSENT, rs[0], items, sub, c)
            c.removed.insert(sub)
        else:
            if ls:
                _compare(ls[0], ABSENT, items, sub, c)
            c.added.insert(sub)


# ---- merging an applied configuration ----



# ---- the comparison ----

DEFS = definitions()
SCHEMAS = {"Pod": DEFS.by_gvk(Gvk("", "v1", "Pod")), "Deployment": DEFS.by_gvk(Gvk("apps", "v1", "Deployment"))}
POD: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "p", "labels": {"a": "1", "b": "2"}, "finalizers": ["x/y", "x/z"], "annotations": {}},
    "spec": {
        "containers": [
            {"name": "a", "image": "i", "args": ["1"], "env": [{"name": "E", "value": "1"}, {"name": "F"}],
             "ports": [{"containerPort": 80}, {"containerPort": 81, "protocol": "UDP"}],
             "resources": {"limits": {"cpu": "1"}, "requests": {}}},
            {"name": "b", "image": "j", "volumeMounts": [{"name": "v", "mountPath": "/v"}]},
        ],
        "volumes": [{"name": "v", "emptyDir": {}}],
        "tolerations": [{"key": "t", "operator": "Exists"}],
        "nodeSelector": {"k": "v"},
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}},
    },
    "status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "Ready", "status": "False"}]},
}
VALUES = st.sampled_from([None, "x", 1, 2.5, True, {}, [], {"name": "a"}, {"name": "n", "image": "q"}, ["s"], {"k": "v"}])


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out.extend(_paths(v, (*prefix, k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.extend(_paths(v, (*prefix, i)))
    return out


def _mutate(doc: Any, data: st.DataObject) -> Any:
    doc = copy.deepcopy(doc)
    for _ in range(data.draw(st.integers(0, 4))):
        path = data.draw(st.sampled_from(_paths(doc)[1:]))
        target = doc
        for part in path[:-1]:
            target = target[part]
        action = data.draw(st.sampled_from(["set", "delete", "add"]))
        if action == "delete":
            del target[path[-1]]
        elif action == "add" and isinstance(target[path[-1]], dict):
            target[path[-1]][data.draw(st.sampled_from(["new", "name", "value", "image"]))] = copy.deepcopy(data.draw(VALUES))
        elif action == "add" and isinstance(target[path[-1]], list):
            target[path[-1]].append(copy.deepcopy(data.draw(VALUES)))
        else:
            target[path[-1]] = copy.deepcopy(data.draw(VALUES))
    return doc


def _outcome(fn: Any, *args: Any) -> Any:
    try:
        out = fn(*args)
    except TypedError as e:
        return ("error", type(e))
    sets = out if isinstance(out, tuple) else (out,)
    return [sorted(path_string(p) for p in s.paths()) for s in sets]


@settings(max_examples=400, deadline=None)
@given(data=st.data(), kind=st.sampled_from(["Pod"]))
def test_bottom_up_sets_match_the_reference(data: st.DataObject, kind: str) -> None:
    schema = SCHEMAS[kind]
    a = _mutate(POD, data)
    b = _mutate(a, data)
    assert _outcome(field_set, b, schema) == _outcome(ref_field_set, b, schema)
    for lhs, rhs in ((a, b), (ABSENT, b), (a, ABSENT), (a, a)):
        assert _outcome(compare, lhs, rhs, schema) == _outcome(ref_compare, lhs, rhs, schema)
