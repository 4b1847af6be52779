"""Strategic merge patch: directives, merge keys and list order, table cases written after
apimachinery's strategicpatch tests (same behaviours, our own data), on a small schema and on Pods."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeagent.cluster.patch.errors import PatchError
from nodeagent.cluster.patch.strategic import strategic_merge_patch
from nodeagent.cluster.schema.definitions import Definitions, definitions
from nodeagent.cluster.schema.model import Gvk

ITEM = {
    "t.Item": {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "value": {"type": "string"},
            "other": {"type": "string"},
            "mergingList": {"type": "array", "items": {"$ref": "#/$defs/t.Item"},
                            "x-kubernetes-patch-strategy": "merge", "x-kubernetes-patch-merge-key": "name"},
            "nonMergingList": {"type": "array", "items": {"$ref": "#/$defs/t.Item"}},
            "mergingIntList": {"type": "array", "items": {"type": "integer"}, "x-kubernetes-patch-strategy": "merge"},
            "nonMergingIntList": {"type": "array", "items": {"type": "integer"}},
            "simpleMap": {"type": "object", "additionalProperties": {"type": "string"}},
            "replacingItem": {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
                              "x-kubernetes-patch-strategy": "replace"},
            "retainKeysMap": {"$ref": "#/$defs/t.Item", "x-kubernetes-patch-strategy": "retainKeys"},
            "retainKeysMergingList": {"type": "array", "items": {"$ref": "#/$defs/t.Item"},
                                      "x-kubernetes-patch-strategy": "merge,retainKeys", "x-kubernetes-patch-merge-key": "name"},
        },
    }
}
ITEM_SCHEMA = Definitions.from_raw(ITEM).by_ref("t.Item")

# description, original, patch, result (YAML, like upstream's tables)
CASES = yaml.safe_load(r"""
- - add a field, keep the others
  - {name: a}
  - {value: v}
  - {name: a, value: v}
- - null deletes a field; a null for a missing field is ignored
  - {name: a, value: v}
  - {value: null, other: null}
  - {name: a}
- - nested maps merge
  - {simpleMap: {k1: a, k2: b}}
  - {simpleMap: {k2: null, k3: c}}
  - {simpleMap: {k1: a, k3: c}}
- - $patch replace on a map replaces it
  - {name: a, value: v}
  - {other: o, $patch: replace}
  - {other: o}
- - $patch delete on a nested map empties it
  - {simpleMap: {k1: a}}
  - {simpleMap: {$patch: delete}}
  - {simpleMap: {}}
- - the replace strategy replaces a map wholesale
  - {replacingItem: {a: x, b: y}}
  - {replacingItem: {a: z}}
  - {replacingItem: {a: z}}
- - a list without a merge strategy is replaced
  - {nonMergingList: [{name: a}, {name: b}], nonMergingIntList: [1, 2]}
  - {nonMergingList: [{name: c}], nonMergingIntList: [3]}
  - {nonMergingList: [{name: c}], nonMergingIntList: [3]}
- - merging list of maps merges items by merge key, new items come first (no order given)
  - {mergingList: [{name: a, value: "1"}, {name: b}]}
  - {mergingList: [{name: c}, {name: a, other: x}]}
  - {mergingList: [{name: c}, {name: a, value: "1", other: x}, {name: b}]}
- - the patch order wins, server-only items keep their place relative to them
  - {mergingList: [{name: "1"}, {name: "2", value: b}, {name: "3"}]}
  - {mergingList: [{name: "3", value: c}, {name: "1", value: a}]}
  - {mergingList: [{name: "2", value: b}, {name: "3", value: c}, {name: "1", value: a}]}
- - $patch delete items remove every match
  - {mergingList: [{name: a}, {name: a}, {name: b, value: v}, {name: c}]}
  - {mergingList: [{name: a, $patch: delete}, {name: c, $patch: delete}]}
  - {mergingList: [{name: b, value: v}]}
- - an item $patch replace makes the other items the whole list
  - {mergingList: [{name: a}, {name: b}]}
  - {mergingList: [{name: c, value: v}, {$patch: replace}]}
  - {mergingList: [{name: c, value: v}]}
- - an item $patch replace alone empties the list
  - {mergingList: [{name: a}]}
  - {mergingList: [{$patch: replace}]}
  - {mergingList: []}
- - merging scalar lists are sets
  - {mergingIntList: [1, 2]}
  - {mergingIntList: [2, 3]}
  - {mergingIntList: [1, 2, 3]}
- - the order of a merging scalar list follows the patch
  - {mergingIntList: [1, 2, 3]}
  - {mergingIntList: [3, 1, 2]}
  - {mergingIntList: [3, 1, 2]}
- - $deleteFromPrimitiveList removes scalars
  - {mergingIntList: [1, 2, 3]}
  - {$deleteFromPrimitiveList/mergingIntList: [1, 3, 9]}
  - {mergingIntList: [2]}
- - deletions and additions together (the new item is not in the live order, so it comes first)
  - {mergingIntList: [1, 2]}
  - {mergingIntList: [3], $deleteFromPrimitiveList/mergingIntList: [1]}
  - {mergingIntList: [3, 2]}
- - $deleteFromPrimitiveList for a missing list does nothing
  - {name: a}
  - {$deleteFromPrimitiveList/mergingIntList: [1]}
  - {name: a}
- - $setElementOrder orders a merged list of maps
  - {mergingList: [{name: a}, {name: b}, {name: c}]}
  - {$setElementOrder/mergingList: [{name: c}, {name: a}, {name: b}], mergingList: [{name: a, value: v}]}
  - {mergingList: [{name: c}, {name: a, value: v}, {name: b}]}
- - $setElementOrder with deletions; a server-only item goes before the ordered ones it preceded
  - {mergingList: [{name: a}, {name: b}, {name: x}, {name: c}]}
  - {$setElementOrder/mergingList: [{name: c}, {name: a}], mergingList: [{name: b, $patch: delete}]}
  - {mergingList: [{name: x}, {name: c}, {name: a}]}
- - delete, add and order in one patch; the live item x keeps the place upstream gives it (after b, before c)
  - {mergingList: [{name: a}, {name: b}, {name: x}]}
  - {$setElementOrder/mergingList: [{name: b}, {name: c}], mergingList: [{name: c}, {name: a, $patch: delete}]}
  - {mergingList: [{name: b}, {name: x}, {name: c}]}
- - $setElementOrder orders a scalar list
  - {mergingIntList: [1, 2, 3]}
  - {$setElementOrder/mergingIntList: [3, 2, 1]}
  - {mergingIntList: [3, 2, 1]}
- - $setElementOrder for a list only in the patch
  - {}
  - {$setElementOrder/mergingList: [{name: b}, {name: a}], mergingList: [{name: b}, {name: a, value: v}]}
  - {mergingList: [{name: b}, {name: a, value: v}]}
- - $retainKeys clears the keys not listed
  - {retainKeysMap: {name: a, value: v, other: o}}
  - {retainKeysMap: {$retainKeys: [name, other], other: p}}
  - {retainKeysMap: {name: a, other: p}}
- - $retainKeys inside merging list items
  - {retainKeysMergingList: [{name: a, value: v}, {name: b, value: w}]}
  - {retainKeysMergingList: [{name: a, other: o, $retainKeys: [name, other]}]}
  - {retainKeysMergingList: [{name: a, other: o}, {name: b, value: w}]}
- - "a map patched with a list, a scalar with a map: replaced"
  - {simpleMap: {k: v}, name: a}
  - {simpleMap: [1], name: {x: y}}
  - {simpleMap: [1], name: {x: y}}
- - directives in a subtree the original lacks are applied
  - {}
  - {mergingList: [{name: a}, {name: b, $patch: delete}], simpleMap: {$patch: replace, k: v}}
  - {mergingList: [{name: a}], simpleMap: {k: v}}
- - fields unknown to the schema merge as maps and replace as lists
  - {extra: {a: 1, l: [1]}}
  - {extra: {b: 2, l: [2]}}
  - {extra: {a: 1, b: 2, l: [2]}}
- - numbers compare as JSON numbers (1.0 is the live 1, which the patch now orders before 3)
  - {mergingIntList: [1, 2]}
  - {mergingIntList: [1.0, 3]}
  - {mergingIntList: [1, 3, 2]}
""")


@pytest.mark.parametrize(("description", "original", "patch", "result"), CASES, ids=[c[0] for c in CASES])
def test_strategic_merge_patch(description: str, original: dict[str, Any], patch: dict[str, Any], result: dict[str, Any]) -> None:
    before_original, before_patch = copy.deepcopy(original), copy.deepcopy(patch)
    assert strategic_merge_patch(original, patch, ITEM_SCHEMA) == result
    assert (original, patch) == (before_original, before_patch)  # inputs untouched


ERRORS = yaml.safe_load(r"""
- - a map directive other than replace or delete
  - {simpleMap: {k: v}}
  - {simpleMap: {$patch: merge}}
  - 'unknown patch type: "merge" in map: {"$patch":"merge"}'
  - 400
- - $patch merge in a list
  - {mergingList: [{name: a}]}
  - {mergingList: [{$patch: merge}]}
  - merging lists cannot yet be specified in the patch
  - 400
- - an item without the merge key
  - {mergingList: [{name: a}]}
  - {mergingList: [{value: v}]}
  - 'map: {"value":"v"} does not contain declared merge key: name'
  - 400
- - a delete item without the merge key
  - {mergingList: [{name: a}]}
  - {mergingList: [{$patch: delete}]}
  - 'map: {"$patch":"delete"} does not contain declared merge key: name'
  - 400
- - lists of lists
  - {mergingIntList: [[1]]}
  - {mergingIntList: [[2]]}
  - lists of lists are not supported
  - 422
- - mixed element kinds
  - {mergingIntList: [1]}
  - {mergingIntList: [a]}
  - 'list element types are not identical'
  - 400
- - $retainKeys not a list
  - {retainKeysMap: {name: a}}
  - {retainKeysMap: {$retainKeys: name}}
  - invalid patch format of retainKeys
  - 400
- - a patch key missing from $retainKeys
  - {retainKeysMap: {name: a}}
  - {retainKeysMap: {$retainKeys: [name], value: v}}
  - 'invalid patch format of retainKeys: "value" is in the patch but not in $retainKeys'
  - 400
- - $setElementOrder not matching the patch order
  - {mergingList: [{name: a}, {name: b}]}
  - {$setElementOrder/mergingList: [{name: a}, {name: b}], mergingList: [{name: b}, {name: a}]}
  - "the order in patch list"
  - 400
- - $setElementOrder without a field
  - {mergingList: [{name: a}]}
  - {$setElementOrder: [{name: a}]}
  - invalid patch format of setElementOrder list
  - 400
- - $deleteFromPrimitiveList without a field
  - {mergingIntList: [1]}
  - {$deleteFromPrimitiveList: [1]}
  - invalid patch format of primitive list
  - 400
""")


@pytest.mark.parametrize(("description", "original", "patch", "message", "code"), ERRORS, ids=[c[0] for c in ERRORS])
def test_strategic_merge_patch_errors(description: str, original: dict[str, Any], patch: dict[str, Any], message: str, code: int) -> None:
    with pytest.raises(PatchError) as e:
        strategic_merge_patch(original, patch, ITEM_SCHEMA)
    assert message in e.value.message
    assert e.value.code == code


def test_patch_must_be_an_object() -> None:
    with pytest.raises(PatchError, match="must be a JSON object, not a list"):
        strategic_merge_patch({}, [1], ITEM_SCHEMA)


POD_SCHEMA = definitions().by_gvk(Gvk("", "v1", "Pod"))

LIVE_POD = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "web", "labels": {"app": "web", "tier": "x"}, "finalizers": ["a/x", "b/y"]},
    "spec": {
        "containers": [
            {"name": "app", "image": "app:1", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
             "ports": [{"containerPort": 80, "protocol": "TCP"}], "args": ["--a", "--b"]},
            {"name": "sidecar", "image": "side:1"},
        ],
        "volumes": [{"name": "data", "emptyDir": {}}],
        "tolerations": [{"key": "k1", "operator": "Exists"}],
    },
}

POD_CASES = [
    ("kubectl apply: a changed image and env through $setElementOrder",
     {"$setElementOrder/containers": [{"name": "app"}, {"name": "sidecar"}],
      "containers": [{"name": "app", "image": "app:2", "$setElementOrder/env": [{"name": "A"}, {"name": "B"}],
                      "env": [{"name": "B", "value": "3"}]}]},
     lambda s: [s["containers"][0].update(image="app:2"), s["containers"][0]["env"][1].update(value="3")]),
    ("a container deleted by name",
     {"containers": [{"name": "sidecar", "$patch": "delete"}]},
     lambda s: s["containers"].pop(1)),
    ("args are atomic: replaced",
     {"containers": [{"name": "app", "args": ["--c"]}]},
     lambda s: s["containers"][0].update(args=["--c"])),
    ("tolerations are atomic: replaced",
     {"tolerations": [{"key": "k2", "operator": "Exists"}]},
     lambda s: s.update(tolerations=[{"key": "k2", "operator": "Exists"}])),
    ("ports merge by containerPort",
     {"containers": [{"name": "app", "ports": [{"containerPort": 443, "protocol": "TCP"}]}]},
     lambda s: s["containers"][0].update(ports=[{"containerPort": 443, "protocol": "TCP"}, {"containerPort": 80, "protocol": "TCP"}])),
    ("volumes: retainKeys drops the old source",
     {"volumes": [{"name": "data", "hostPath": {"path": "/d"}, "$retainKeys": ["hostPath", "name"]}]},
     lambda s: s.update(volumes=[{"name": "data", "hostPath": {"path": "/d"}}])),
]


@pytest.mark.parametrize(("description", "spec_patch", "change"), POD_CASES, ids=[c[0] for c in POD_CASES])
def test_pod_spec_patches(description: str, spec_patch: dict[str, Any], change: Any) -> None:
    want = copy.deepcopy(LIVE_POD)
    change(want["spec"])
    assert strategic_merge_patch(LIVE_POD, {"spec": spec_patch}, POD_SCHEMA) == want


def test_pod_metadata_labels_and_finalizers() -> None:
    got = strategic_merge_patch(LIVE_POD, {"metadata": {"labels": {"tier": None, "new": "1"},
                                                        "$deleteFromPrimitiveList/finalizers": ["a/x"],
                                                        "finalizers": ["c/z"]}}, POD_SCHEMA)
    assert got["metadata"]["labels"] == {"app": "web", "new": "1"}
    assert got["metadata"]["finalizers"] == ["c/z", "b/y"]


def test_cordon_patch_on_a_node() -> None:
    node_schema = definitions().by_gvk(Gvk("", "v1", "Node"))
    node = {"metadata": {"name": "n"}, "spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]}}
    got = strategic_merge_patch(node, {"spec": {"unschedulable": True}}, node_schema)
    assert got["spec"] == {"taints": [{"key": "a", "effect": "NoSchedule"}], "unschedulable": True}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from(["a", "b", "merge", "delete", "replace"]),
    lambda c: st.lists(c, max_size=3)
    | st.dictionaries(st.sampled_from(["name", "value", "mergingList", "mergingIntList", "simpleMap", "retainKeysMap",
                                       "$patch", "$retainKeys", "$setElementOrder/mergingList",
                                       "$deleteFromPrimitiveList/mergingIntList", "nonMergingList", "x"]), c, max_size=4),
    max_leaves=16,
)


top_keys = st.sampled_from(["name", "mergingList", "mergingIntList", "simpleMap", "retainKeysMap", "retainKeysMergingList",
                            "$patch", "$retainKeys", "$setElementOrder/mergingList", "$deleteFromPrimitiveList/mergingIntList"])
objects = st.dictionaries(top_keys, json_values, max_size=4)


@settings(max_examples=400, deadline=None)
@given(original=objects, patch=objects | json_values)
def test_strategic_merge_patch_raises_only_patch_errors(original: Any, patch: Any) -> None:
    for schema in (ITEM_SCHEMA, POD_SCHEMA, None):
        try:
            strategic_merge_patch(original, patch, schema)
        except PatchError as e:
            assert e.code in (400, 422) and e.message
