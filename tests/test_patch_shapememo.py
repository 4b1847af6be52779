"""The create path's field-set memo (patch/shapememo.py): objects of one shape share a set, and
update() with the memo records exactly what the walk without it records, object by object."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from nodeagent.cluster.patch import apply as ssa
from nodeagent.cluster.patch.shapememo import ShapeMemo, shape
from nodeagent.cluster.schema.definitions import definitions
from nodeagent.cluster.schema.model import Gvk

DEFS = definitions()
POD = DEFS.by_gvk(Gvk("", "v1", "Pod"))
EVENT = DEFS.by_gvk(Gvk("", "v1", "Event"))


def pod(name: str, labels: dict[str, Any], containers: list[dict[str, Any]], **status: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "labels": labels},
            "spec": {"containers": containers, "restartPolicy": "Always"}, "status": status}


def event(name: str, involved: dict[str, Any], message: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Event", "metadata": {"name": name, "namespace": "default"},
            "involvedObject": involved, "reason": "FailedScheduling", "message": message, "type": "Warning",
            "source": {"component": "default-scheduler"}, "count": 1}


C = [{"name": "c", "command": ["sleep", "1"]}]
# in order: each row after the first of its schema either shares a shape seen before (a memo hit)
# or differs from all of them where the field set can differ (a list item's key, a set's value,
# a key in a map, a scalar become a map, an empty map), so a wrong hit would show
CASES: list[tuple[Any, dict[str, Any], tuple[str, ...]]] = [
    (POD, pod("a", {"app": "x"}, C), ("status",)),
    (POD, pod("b", {"app": "y"}, C), ("status",)),  # label value only: same set
    (POD, pod("c", {"app": "x", "tier": "web"}, C), ("status",)),  # one more label key
    (POD, pod("d", {"app": "x"}, [{"name": "d", "command": ["sleep", "1"]}]), ("status",)),  # another list key
    (POD, pod("e", {"app": "x"}, [*C, {"name": "e", "image": "i"}]), ("status",)),  # two containers
    (POD, pod("f", {}, C), ("status",)),  # labels empty
    (POD, pod("g", {"app": "x"}, C, phase="Pending"), ("status",)),  # status ignored ...
    (POD, pod("h", {"app": "x"}, C, phase="Pending"), ()),  # ... and not (the status subresource's view)
    (POD, pod("i", {"app": "x"}, [{"name": "c", "ports": [{"containerPort": 80}, {"containerPort": 81}]}]),
     ("status",)),
    (POD, pod("j", {"app": "x"}, [{"name": "c", "ports": [{"containerPort": 80}]}]), ("status",)),
    (EVENT, event("p.1", {"kind": "Pod", "name": "a", "uid": "1"}, "m"), ()),
    (EVENT, event("p.2", {"kind": "Pod", "name": "b", "uid": "2"}, "other message"), ()),  # values only
    (EVENT, event("p.3", {"kind": "Pod", "name": "b"}, "m"), ()),  # one key less (atomic: same set)
    (EVENT, event("p.4", {"kind": "Pod", "name": "b"}, {"not": "a string"}), ()),  # a scalar become a map
    (None, {"kind": "X", "metadata": {"name": "a"}, "data": {"k": 1}}, ()),  # no schema: deduced
    (None, {"kind": "X", "metadata": {"name": "b"}, "data": {"k": {"deep": 1}}}, ()),
]


def test_shape_keeps_keys_and_lists_and_drops_scalar_values() -> None:
    assert shape({"a": 1, "b": {"c": "x", "d": None}, "e": [1, {"f": 2}]}) == {"a": 0, "b": {"c": 0, "d": 0},
                                                                               "e": [1, {"f": 2}]}


def test_update_of_a_create_gives_the_walks_result_with_and_without_the_memo(monkeypatch: pytest.MonkeyPatch) -> None:
    fresh = ShapeMemo()
    monkeypatch.setattr(ssa, "_CREATED", fresh)
    for schema, obj, ignored in CASES:
        fast = ssa.update(None, copy.deepcopy(obj), schema, manager="m", api_version="v1", now="2026-01-01T00:00:00Z",
                          ignored=ignored)
        slow_set = ssa._created_fields(ssa._without(obj, [i for i in ignored if "." not in i]), schema,
                                       ssa._prefixes(ignored))
        slow = ssa._with_managed_fields(copy.deepcopy(obj), {} if slow_set.empty else {
            ssa.ManagerKey.of("m", ssa.UPDATE, "v1"): ssa.ManagedEntry(slow_set, "v1", "2026-01-01T00:00:00Z")})
        assert fast == slow, obj["metadata"]["name"]
    # objects differing only by scalar values shared an entry
    assert len(fresh._sets) < len(CASES)


def test_a_miss_on_another_schema_is_computed_anew() -> None:
    memo = ShapeMemo()
    value = {"a": {"b": 1}}
    first = memo.get(value, POD, (), lambda: ssa._created_fields(value, POD, []))
    assert memo.get(value, POD, (), lambda: pytest.fail("not a hit")) is first
    other = memo.get(value, None, (), lambda: ssa._created_fields(value, None, []))
    assert other == ssa._created_fields(value, None, [])
