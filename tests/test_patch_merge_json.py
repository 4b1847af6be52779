"""JSON merge patch (RFC 7386: its appendix examples and laws) and JSON patch (RFC 6902) with
kube-apiserver's strictness and error wording."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeagent.cluster.patch.errors import PatchError
from nodeagent.cluster.patch.jsonpatch import MAX_OPERATIONS, json_equal, json_patch, operation_problems
from nodeagent.cluster.patch.merge import create_merge_patch, merge_patch
from nodeagent.cluster.schema.decode import decode_json

# RFC 7386 appendix A: (target, patch, result)
RFC7386 = [
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    (["a", "b"], ["c", "d"], ["c", "d"]),
    ({"a": "b"}, ["c"], ["c"]),
    ({"a": "foo"}, "bar", "bar"),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
]


@pytest.mark.parametrize(("target", "patch", "result"), RFC7386)
def test_rfc7386_examples(target: Any, patch: Any, result: Any) -> None:
    before = copy.deepcopy(target)
    assert merge_patch(target, patch) == result
    assert target == before


def test_a_null_patch_is_an_error_and_nulls_inside_a_replacing_value_are_pruned() -> None:
    with pytest.raises(PatchError, match="invalid JSON Patch"):
        merge_patch({"a": 1}, None)
    assert merge_patch({"a": 1}, [{"x": None, "y": 1}]) == [{"y": 1}]


def test_kubectl_label_patches() -> None:
    pod = {"metadata": {"name": "p", "labels": {"app": "web", "old": "x"}}, "spec": {"containers": [{"name": "c"}]}}
    got = merge_patch(pod, {"metadata": {"labels": {"new": "y", "old": None}}})
    assert got == {"metadata": {"name": "p", "labels": {"app": "web", "new": "y"}}, "spec": {"containers": [{"name": "c"}]}}


json_scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=3)
json_values = st.recursive(json_scalars, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=2), c, max_size=3), max_leaves=12)
no_nulls = st.recursive(json_scalars.filter(lambda v: v is not None),
                        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=2), c, max_size=3), max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(target=json_values, patch=json_values.filter(lambda p: p is not None))
def test_merge_patch_is_idempotent(target: Any, patch: Any) -> None:
    once = merge_patch(target, patch)
    assert merge_patch(once, patch) == once


@settings(max_examples=300, deadline=None)
@given(original=no_nulls, modified=no_nulls)
def test_created_merge_patch_turns_original_into_modified(original: Any, modified: Any) -> None:
    assert merge_patch(original, create_merge_patch(original, modified)) == modified


@settings(max_examples=300, deadline=None)
@given(target=json_values, patch=json_values.filter(lambda p: p is not None))
def test_merge_patch_result_has_no_nulls_the_patch_set(target: Any, patch: Any) -> None:
    result = merge_patch(target, patch)
    if isinstance(patch, dict) and isinstance(result, dict):
        for key, value in patch.items():
            if value is None:
                assert key not in result


DOC = {"metadata": {"name": "p", "labels": {"a": "1"}}, "spec": {"replicas": 1, "list": [1, 2, 3], "flag": True}}

JSON_PATCH_CASES = [
    ([{"op": "add", "path": "/metadata/labels/b", "value": "2"}], lambda d: d["metadata"]["labels"].update(b="2")),
    ([{"op": "remove", "path": "/metadata/labels/a"}], lambda d: d["metadata"]["labels"].pop("a")),
    ([{"op": "replace", "path": "/spec/replicas", "value": 3}], lambda d: d["spec"].update(replicas=3)),
    ([{"op": "add", "path": "/spec/list/-", "value": 4}], lambda d: d["spec"]["list"].append(4)),
    ([{"op": "add", "path": "/spec/list/0", "value": 0}], lambda d: d["spec"]["list"].insert(0, 0)),
    ([{"op": "move", "from": "/spec/replicas", "path": "/spec/count"}], lambda d: d["spec"].update(count=d["spec"].pop("replicas"))),
    ([{"op": "copy", "from": "/metadata/name", "path": "/spec/name"}], lambda d: d["spec"].update(name="p")),
    ([{"op": "test", "path": "/spec/replicas", "value": 1.0}, {"op": "replace", "path": "/spec/replicas", "value": 2}],
     lambda d: d["spec"].update(replicas=2)),
    ([{"op": "add", "path": "/metadata/labels/a~1b", "value": "x"}],
     lambda d: d["metadata"]["labels"].update({"a/b": "x"})),
    ([], lambda d: None),
]


@pytest.mark.parametrize(("ops", "change"), JSON_PATCH_CASES)
def test_json_patch(ops: list[dict[str, Any]], change: Any) -> None:
    want = copy.deepcopy(DOC)
    change(want)
    before = copy.deepcopy(DOC)
    assert json_patch(DOC, ops) == want
    assert before == DOC


JSON_PATCH_ERRORS = [
    ({"op": "add"}, "json patch must be a JSON array of operations", 400),
    ([1], "json patch operation at index 0 must be a JSON object, not 1", 400),
    ([{"op": "frob", "path": "/a"}], "json patch operation at index 0: unexpected kind: \"frob\"", 422),
    ([{"path": "/a"}], "unexpected kind: null", 422),
    ([{"op": "add", "path": 1, "value": 1}], "json patch operation at index 0 (add): path must be a string", 422),
    ([{"op": "add", "path": "/a"}], "json patch operation at index 0 (add /a): missing value", 422),
    ([{"op": "move", "path": "/a"}], "json patch operation at index 0 (move /a): from must be a string", 422),
    ([{"op": "remove", "path": "/nope"}], "json patch operation at index 0 (remove /nope) does not apply: doc is missing path", 422),
    ([{"op": "replace", "path": "/spec/nope", "value": 1}], "json patch operation at index 0 (replace /spec/nope) does not apply: doc is missing path", 422),
    ([{"op": "add", "path": "/x/y", "value": 1}], "json patch operation at index 0 (add /x/y) does not apply: doc is missing path", 422),
    ([{"op": "add", "path": "/spec/list/9", "value": 1}], "does not apply: can't insert outside of list", 422),
    ([{"op": "add", "path": "nope", "value": 1}], "does not apply: Location must start with /", 422),
    ([{"op": "test", "path": "/spec/flag", "value": 1}], "json patch operation at index 0 (test /spec/flag): testing value /spec/flag failed: test failed", 422),
    ([{"op": "test", "path": "/nope", "value": 1}], "(test /nope) does not apply: doc is missing path", 422),
    ([{"op": "add", "path": "/spec/replicas/x", "value": 1}], "json patch operation at index 0 (add /spec/replicas/x) does not apply", 422),
    ([{"op": "remove", "path": "/spec/replicas"}] * (MAX_OPERATIONS + 1), f"the allowed maximum operations in a JSON patch is {MAX_OPERATIONS}", 422),
]


@pytest.mark.parametrize(("ops", "message", "code"), JSON_PATCH_ERRORS)
def test_json_patch_errors(ops: Any, message: str, code: int) -> None:
    with pytest.raises(PatchError) as e:
        json_patch(DOC, ops)
    assert message in e.value.message
    assert e.value.code == code


def test_json_patch_errors_do_not_echo_the_document() -> None:
    secret = {"data": {"password": "aHVudGVyMg=="}}
    with pytest.raises(PatchError) as e:
        json_patch(secret, [{"op": "add", "path": "/x/y", "value": 1}])
    assert "aHVudGVyMg" not in e.value.message


def test_json_patch_operation_problems_as_upstream_words_them() -> None:
    body = decode_json(b'[{"op": "add", "path": "/a", "value": 1, "foo": "bar"}, {"op": "add", "path": "/b", "path": "/c", "value": 1}]')
    assert operation_problems(body) == ['json patch unknown field "[0].foo"', 'json patch duplicate field "[1].path"']
    assert json_patch({}, body.value) == {"a": 1, "c": 1}


@pytest.mark.parametrize(("a", "b", "equal"), [
    (1, 1.0, True), (True, 1, False), (0, False, False), ({"a": [1]}, {"a": [1.0]}, True), ("1", 1, False),
    (None, None, True), ([1, 2], [2, 1], False), ({"a": 1}, {"b": 1}, False),
])
def test_json_equal(a: Any, b: Any, equal: bool) -> None:
    assert json_equal(a, b) is equal


@settings(max_examples=200, deadline=None)
@given(doc=json_values, ops=st.lists(st.fixed_dictionaries({"op": st.sampled_from(["add", "remove", "replace", "move", "copy", "test", "x"]),
                                                             "path": st.sampled_from(["", "/", "/a", "/a/0", "/a/-", "/b/c", "/0", 1]),
                                                             "from": st.sampled_from(["/a", "/b", "", 2]),
                                                             "value": json_values}), max_size=4))
def test_json_patch_raises_only_patch_errors(doc: Any, ops: list[dict[str, Any]]) -> None:
    try:
        json_patch(doc, ops)
    except PatchError as e:
        assert e.code in (400, 422) and e.message
