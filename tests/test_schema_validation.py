"""Field validation: strict decoding problems in upstream's order and wording, type errors, pruning,
and a validator that never raises (hypothesis over arbitrary JSON)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodeagent.cluster.schema.decode import DecodeError, decode_json, decode_yaml
from nodeagent.cluster.schema.definitions import Definitions, definitions
from nodeagent.cluster.schema.model import Gvk, Schema
from nodeagent.cluster.schema.validation import (
    FieldTypeError,
    FieldValidation,
    FieldValueError,
    body_problems,
    parse_field_validation,
    validate_fields,
)
from nodeagent.core.errors import FieldError

POD = Gvk("", "v1", "Pod")
DEPLOYMENT = Gvk("apps", "v1", "Deployment")
CONFIGMAP = Gvk("", "v1", "ConfigMap")
SERVED = [
    POD, Gvk("", "v1", "Node"), Gvk("", "v1", "Namespace"), Gvk("", "v1", "ResourceQuota"),
    Gvk("scheduling.k8s.io", "v1", "PriorityClass"), Gvk("", "v1", "Event"), Gvk("events.k8s.io", "v1", "Event"),
    Gvk("", "v1", "LimitRange"), CONFIGMAP, Gvk("", "v1", "Secret"), Gvk("", "v1", "ServiceAccount"),
    Gvk("coordination.k8s.io", "v1", "Lease"), DEPLOYMENT,
]


def kind(gvk: Gvk) -> Schema:
    node = definitions().by_gvk(gvk)
    assert node is not None, gvk
    return node


# A Deployment with problems at every level, in the spirit of upstream's field validation tests.
BAD_DEPLOYMENT_JSON = """{
  "apiVersion": "apps/v1", "kind": "Deployment",
  "metadata": {"name": "a", "name": "web", "labels": {"app": "web"}, "colour": "blue"},
  "spec": {
    "replicas": 2, "replicas": 3,
    "zzz": 1, "zzz": 2,
    "selector": {"matchLabels": {"app": "web"}},
    "template": {
      "metadata": {"labels": {"app": "web"}},
      "spec": {"containers": [{"name": "c", "image": "i", "bogus": true, "image": "j"}]}
    },
    "aaa": "x"
  }
}"""

BAD_DEPLOYMENT_YAML = """apiVersion: apps/v1
kind: Deployment
metadata:
  name: a
  name: web
  colour: blue
spec:
  replicas: 2
  replicas: 3
  zzz: 1
  zzz: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: c
        image: i
        bogus: true
        image: j
  aaa: x
"""

JSON_PROBLEMS = [
    'duplicate field "metadata.name"',
    'unknown field "metadata.colour"',
    'duplicate field "spec.replicas"',
    'unknown field "spec.zzz"',  # unknown and duplicated: reported once, as unknown
    'unknown field "spec.template.spec.containers[0].bogus"',
    'duplicate field "spec.template.spec.containers[0].image"',
    'unknown field "spec.aaa"',
]


def test_json_body_problems_in_document_order() -> None:
    out = validate_fields(kind(DEPLOYMENT), decode_json(BAD_DEPLOYMENT_JSON))
    assert list(out.problems) == JSON_PROBLEMS
    assert out.errors == ()
    assert out.strict_error(FieldValidation.STRICT) == "strict decoding error: " + ", ".join(JSON_PROBLEMS)
    assert out.warnings(FieldValidation.WARN) == JSON_PROBLEMS
    assert out.warnings(FieldValidation.IGNORE) == [] and out.warnings(FieldValidation.STRICT) == []
    assert out.strict_error(FieldValidation.WARN) is None and out.strict_error(FieldValidation.IGNORE) is None


def test_pruned_value_keeps_the_last_duplicate_and_drops_unknown_fields() -> None:
    out = validate_fields(kind(DEPLOYMENT), decode_json(BAD_DEPLOYMENT_JSON))
    assert out.value["metadata"] == {"name": "web", "labels": {"app": "web"}}
    assert out.value["spec"]["replicas"] == 3
    assert "zzz" not in out.value["spec"] and "aaa" not in out.value["spec"]
    assert out.value["spec"]["template"]["spec"]["containers"] == [{"name": "c", "image": "j"}]


def test_yaml_body_duplicates_by_line_then_unknown_fields_sorted() -> None:
    out = validate_fields(kind(DEPLOYMENT), decode_yaml(BAD_DEPLOYMENT_YAML))
    dups = [
        'line 5: key "name" already set in map',
        'line 9: key "replicas" already set in map',
        'line 11: key "zzz" already set in map',
        'line 22: key "image" already set in map',
    ]
    unknown = [
        'unknown field "metadata.colour"',
        'unknown field "spec.aaa"',
        'unknown field "spec.template.spec.containers[0].bogus"',
        'unknown field "spec.zzz"',
    ]
    assert list(out.yaml_duplicates) == dups
    assert list(out.problems) == unknown
    assert out.warnings(FieldValidation.WARN) == dups + unknown
    assert out.strict_error(FieldValidation.STRICT) == (
        "strict decoding error: yaml: unmarshal errors:\n" + "\n".join(f"  {d}" for d in dups) + ", " + ", ".join(unknown)
    )
    assert out.value["spec"]["replicas"] == 3


def test_a_patched_value_is_walked_in_sorted_order_and_has_no_duplicates() -> None:
    value = json.loads(BAD_DEPLOYMENT_JSON)
    out = validate_fields(kind(DEPLOYMENT), value)
    assert list(out.problems) == [
        'unknown field "metadata.colour"',
        'unknown field "spec.aaa"',
        'unknown field "spec.template.spec.containers[0].bogus"',
        'unknown field "spec.zzz"',
    ]


def test_duplicate_map_keys_are_reported() -> None:
    out = validate_fields(kind(CONFIGMAP), decode_json('{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":{"a":"1","a":"2"}}'))
    assert list(out.problems) == ['duplicate field "data.a"']
    assert out.value["data"] == {"a": "2"}


def test_duplicates_of_a_patch_body_alone() -> None:
    body = decode_json('{"spec":{"paused":true,"paused":false,"template":{"spec":{"containers":[{"name":"n","x":1,"x":2}]}}}}')
    assert body.duplicate_fields() == ["spec.paused", "spec.template.spec.containers[0].x"]


def test_valid_objects_pass_unchanged() -> None:
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "labels": {"a": "b"}, "creationTimestamp": "2024-05-01T12:00:00Z",
                     "managedFields": [{"manager": "kubectl", "operation": "Apply", "fieldsType": "FieldsV1",
                                        "fieldsV1": {"f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}}}}}}]},
        "spec": {
            "containers": [{
                "name": "c", "image": "busybox", "command": ["sh", "-c", "sleep 1"],
                "resources": {"requests": {"cpu": "100m", "memory": 33554432}, "limits": {"cpu": 0.5}},
                "ports": [{"containerPort": 80, "protocol": "TCP"}],
                "livenessProbe": {"httpGet": {"port": "http", "path": "/"}, "periodSeconds": 10},
                "readinessProbe": {"tcpSocket": {"port": 8080}},
            }],
            "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
            "terminationGracePeriodSeconds": 30,
        },
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2024-05-01T12:00:00.5+02:00"}]},
    }
    out = validate_fields(kind(POD), decode_json(json.dumps(pod)))
    assert out.ok, (out.problems, out.errors)
    assert out.value == pod


def test_secret_bytes_must_be_base64_and_are_not_echoed() -> None:
    good = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"k": "aGVsbG8=", "l": "aGVs\nbG8="}}
    assert validate_fields(kind(Gvk("", "v1", "Secret")), good).ok
    bad = {**good, "data": {"k": "hunter2!"}}
    out = validate_fields(kind(Gvk("", "v1", "Secret")), bad)
    assert [(e.path, type(e)) for e in out.errors] == [("data[k]", FieldValueError)]
    assert "hunter2" not in str(out.errors[0])


# (kind, body, [(path, message)])
TYPE_CASES: list[tuple[Gvk, dict[str, Any], list[tuple[str, str]]]] = [
    (Gvk("", "v1", "ResourceQuota"), {"spec": -1},
     [("spec", 'Invalid value: "integer": spec in body must be of type object: "integer"')]),
    (Gvk("", "v1", "ResourceQuota"), {"spec": 1e308},
     [("spec", 'Invalid value: "number": spec in body must be of type object: "number"')]),
    (Gvk("", "v1", "ResourceQuota"), {"spec": {"hard": "lots"}},
     [("spec.hard", 'Invalid value: "string": spec.hard in body must be of type object: "string"')]),
    (Gvk("", "v1", "ResourceQuota"), {"spec": {"hard": {"cpu": "1x"}}},
     [("spec.hard[cpu]", f'Invalid value: "1x": {"quantities must match the regular expression"}'
       " '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")]),
    (Gvk("", "v1", "ResourceQuota"), {"spec": {"hard": {"cpu": True}}},
     [("spec.hard[cpu]", 'Invalid value: "boolean": spec.hard[cpu] in body must be of type string or number: "boolean"')]),
    (POD, {"spec": {"containers": "c"}},
     [("spec.containers", 'Invalid value: "string": spec.containers in body must be of type array: "string"')]),
    (POD, {"spec": {"containers": [{"name": 1, "ports": [{"containerPort": 3000000000}]}]}},
     [("spec.containers[0].name", 'Invalid value: "integer": spec.containers[0].name in body must be of type string: "integer"'),
      ("spec.containers[0].ports[0].containerPort", "Invalid value: 3000000000: must fit in a 32-bit signed integer (-2147483648 to 2147483647)")]),
    (POD, {"spec": {"activeDeadlineSeconds": 1.5}},
     [("spec.activeDeadlineSeconds", 'Invalid value: "number": spec.activeDeadlineSeconds in body must be of type integer: "number"')]),
    (POD, {"spec": {"hostNetwork": "true"}},
     [("spec.hostNetwork", 'Invalid value: "string": spec.hostNetwork in body must be of type boolean: "string"')]),
    (POD, {"spec": {"containers": [{"name": "c", "livenessProbe": {"httpGet": {"port": [80]}}}]}},
     [("spec.containers[0].livenessProbe.httpGet.port",
       'Invalid value: "array": spec.containers[0].livenessProbe.httpGet.port in body must be of type integer or string: "array"')]),
    (POD, {"metadata": {"labels": ["a"]}},
     [("metadata.labels", 'Invalid value: "array": metadata.labels in body must be of type object: "array"')]),
    (POD, {"metadata": {"creationTimestamp": "yesterday"}},
     [("metadata.creationTimestamp", 'Invalid value: "yesterday": must be an RFC 3339 date-time such as "2024-05-01T12:00:00Z"')]),
    (POD, {"metadata": {"creationTimestamp": "2024-02-30T00:00:00Z"}},
     [("metadata.creationTimestamp", 'Invalid value: "2024-02-30T00:00:00Z": must be an RFC 3339 date-time such as "2024-05-01T12:00:00Z"')]),
    (Gvk("scheduling.k8s.io", "v1", "PriorityClass"), {"value": "high"},
     [("value", 'Invalid value: "string": value in body must be of type integer: "string"')]),
]


@pytest.mark.parametrize(("gvk", "body", "expected"), TYPE_CASES)
def test_type_errors_name_the_field(gvk: Gvk, body: dict[str, Any], expected: list[tuple[str, str]]) -> None:
    out = validate_fields(kind(gvk), body)
    assert [(e.path, e.message) for e in out.errors] == expected
    assert all(isinstance(e, FieldTypeError | FieldValueError) for e in out.errors)


def test_a_root_that_is_not_an_object() -> None:
    for body in (None, 1, "x", [1]):
        out = validate_fields(kind(POD), body)
        assert [e.path for e in out.errors] == [""]
        assert "body in body must be of type object" in out.errors[0].message


def test_nulls_are_dropped_from_structs_and_zeroed_in_lists_and_maps() -> None:
    body = {"metadata": {"name": "p", "labels": {"a": None}, "namespace": None},
            "spec": {"containers": [None], "nodeSelector": None}}
    out = validate_fields(kind(POD), body)
    assert out.ok
    assert out.value == {"metadata": {"name": "p", "labels": {"a": ""}}, "spec": {"containers": [{}]}}


CRD_LIKE = {
    "x.Widget": {
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"}, "kind": {"type": "string"},
            "metadata": {"$ref": "#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"},
            "spec": {
                "type": "object",
                "properties": {
                    "known": {"type": "string"},
                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                             "properties": {"typed": {"type": "integer"}}},
                    "embedded": {"type": "object", "x-kubernetes-embedded-resource": True,
                                 "properties": {"spec": {"type": "object", "properties": {"a": {"type": "string"}}}}},
                    "port": {"x-kubernetes-int-or-string": True},
                },
            },
        },
        "x-kubernetes-group-version-kind": [{"group": "x.io", "version": "v1", "kind": "Widget"}],
    },
    "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {
        "type": "object", "properties": {"name": {"type": "string"}, "labels": {"type": "object", "additionalProperties": {"type": "string"}}},
    },
}


def test_preserve_unknown_fields_and_embedded_resources() -> None:
    d = Definitions.from_raw(CRD_LIKE)
    widget = d.by_gvk(Gvk("x.io", "v1", "Widget"))
    assert widget is not None
    body = {
        "apiVersion": "x.io/v1", "kind": "Widget", "metadata": {"name": "w"},
        "spec": {
            "known": "k", "free": {"anything": {"goes": [1]}, "typed": "no"},
            "embedded": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "nope": 1}, "spec": {"a": "b", "b": 1}, "extra": 1},
            "port": "http",
        },
    }
    out = validate_fields(widget, body, object_meta=d.by_ref("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"))
    assert list(out.problems) == [
        'unknown field "spec.embedded.extra"',
        'unknown field "spec.embedded.metadata.nope"',
        'unknown field "spec.embedded.spec.b"',
    ]
    assert [(e.path, type(e)) for e in out.errors] == [("spec.free.typed", FieldTypeError)]
    assert out.value["spec"]["free"]["anything"] == {"goes": [1]}
    assert out.value["spec"]["embedded"] == {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "spec": {"a": "b"}}
    assert validate_fields(widget, {"spec": {"port": 8080}}).ok
    assert not validate_fields(widget, {"spec": {"port": 1.5}}).ok


@pytest.mark.parametrize(("raw", "mode"), [(None, FieldValidation.WARN), ("", FieldValidation.WARN), ("Strict", FieldValidation.STRICT),
                                           ("Warn", FieldValidation.WARN), ("Ignore", FieldValidation.IGNORE)])
def test_parse_field_validation(raw: str | None, mode: FieldValidation) -> None:
    assert parse_field_validation(raw) == mode


def test_parse_field_validation_rejects_others_naming_the_parameter() -> None:
    with pytest.raises(FieldError) as e:
        parse_field_validation("strict")
    assert e.value.path == "fieldValidation"
    assert e.value.message == 'Unsupported value: "strict": supported values: "Ignore", "Strict", "Warn"'


# ---- never raising ----

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8)
    | st.sampled_from(["100m", "1Gi", "1e3", "x", "2024-05-01T12:00:00Z", "aGk=", "-1"]),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.sampled_from(["spec", "metadata", "status", "containers", "name", "hard", "data", "labels", "x", "ports",
                                       "resources", "limits", "value", "items", "template", "selector", "replicas", "conditions"])
                      | st.text(max_size=5), children, max_size=5),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gvk=st.sampled_from(SERVED), body=json_values)
def test_validator_never_raises_on_arbitrary_json(gvk: Gvk, body: Any) -> None:
    out = validate_fields(kind(gvk), body)
    for e in out.errors:
        assert isinstance(e, FieldError) and isinstance(e.path, str) and e.message
    for p in out.problems:
        assert p.startswith(("unknown field ", "duplicate field "))


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out.extend(_paths(v, (*prefix, k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.extend(_paths(v, (*prefix, i)))
    return out


VALID_DEPLOYMENT = json.loads(BAD_DEPLOYMENT_JSON.replace('"name": "a", ', "").replace('"replicas": 2, ', "")
                              .replace('"zzz": 1, "zzz": 2,', "").replace('"bogus": true, "image": "j"', '"ports": [{"containerPort": 80}]')
                              .replace(', "colour": "blue"', "").replace(',\n    "aaa": "x"', ""))


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_validator_never_raises_on_a_valid_object_with_one_value_replaced(data: st.DataObject) -> None:
    body = json.loads(json.dumps(VALID_DEPLOYMENT))
    assert validate_fields(kind(DEPLOYMENT), body).ok
    path = data.draw(st.sampled_from(_paths(body)[1:]))
    target = body
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = data.draw(json_values)
    out = validate_fields(kind(DEPLOYMENT), body)
    assert all(isinstance(e, FieldError) for e in out.errors)


@settings(max_examples=300, deadline=None)
@given(raw=st.binary(max_size=64) | st.text(max_size=64).map(str.encode))
def test_decoders_raise_only_decode_errors(raw: bytes) -> None:
    for decode in (decode_json, decode_yaml):
        try:
            out = decode(raw)
        except DecodeError:
            continue
        json.dumps(out.value, allow_nan=False)  # what is decoded is plain JSON


def test_a_patch_reports_its_body_duplicates_first_then_the_patched_objects_unknown_fields() -> None:
    body = decode_json(b'{"spec":{"paused":true,"paused":false,"zz":1,"aa":2}}')
    patched = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {"paused": False, "zz": 1, "aa": 2}}
    out = validate_fields(kind(DEPLOYMENT), patched).after(body_problems(body))
    assert list(out.problems) == ['duplicate field "spec.paused"', 'unknown field "spec.aa"', 'unknown field "spec.zz"']
    yaml_body = decode_yaml("spec:\n  paused: true\n  paused: false\n")
    assert body_problems(yaml_body) == ['line 3: key "paused" already set in map']


def _pod_json(name: str, spec: str) -> str:
    return f'{{"apiVersion": "v1", "kind": "Pod", "metadata": {{"name": "{name}"}}, "spec": {spec}}}'


@pytest.fixture
def clean_memo(monkeypatch: pytest.MonkeyPatch) -> Any:
    from nodeagent.cluster.schema import validation
    memo = validation._CleanMemo()
    monkeypatch.setattr(validation, "_CLEAN", memo)
    return memo


def test_a_spec_walked_clean_is_not_walked_again(clean_memo: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from nodeagent.cluster.schema import validation
    spec = '{"containers": [{"name": "c", "image": "busybox", "ports": [{"containerPort": 80}]}]}'
    first = validate_fields(kind(POD), decode_json(_pod_json("a", spec)))
    assert len(clean_memo._clean) == 1
    walked: list[str] = []
    real = validation._Walker.walk

    def walk(self: Any, schema: Schema, value: Any, upath: str, fpath: str, depth: int) -> Any:
        walked.append(upath)
        return real(self, schema, value, upath, fpath, depth)

    monkeypatch.setattr(validation._Walker, "walk", walk)
    second = validate_fields(kind(POD), decode_json(_pod_json("b", spec)))
    assert not any(p.startswith("spec") for p in walked) and "metadata" in walked
    assert second.value == {**first.value, "metadata": {"name": "b"}} and second.problems == second.errors == ()


def test_the_same_spec_with_a_problem_in_its_text_still_reports_it(clean_memo: Any) -> None:
    spec = '{"containers": [{"name": "c", "image": "busybox"}]}'
    validate_fields(kind(POD), decode_json(_pod_json("a", spec)))
    repeated = '{"containers": [{"name": "c", "image": "x", "image": "busybox"}]}'  # parses to the same value
    out = validate_fields(kind(POD), decode_json(_pod_json("b", repeated)))
    assert list(out.problems) == ['duplicate field "spec.containers[0].image"']
    yaml = validate_fields(kind(POD), decode_yaml(
        b"apiVersion: v1\nkind: Pod\nmetadata: {name: c}\nspec:\n  containers: [{name: c, image: busybox, x: 1}]\n"))
    assert list(yaml.problems) == ['unknown field "spec.containers[0].x"']


def test_specs_with_problems_errors_or_pruned_nulls_are_not_remembered(clean_memo: Any) -> None:
    for spec in ('{"containers": [{"name": "c", "image": "busybox", "colour": "blue"}]}',
                 '{"containers": [{"name": "c", "image": 5}]}',
                 '{"containers": [{"name": "c", "image": "busybox"}], "hostname": null}'):
        outs = [validate_fields(kind(POD), decode_json(_pod_json(n, spec))) for n in ("a", "b")]
        assert outs[0].problems == outs[1].problems and [str(e) for e in outs[0].errors] == [str(e) for e in outs[1].errors]
        assert outs[1].problems or outs[1].errors or "hostname" not in outs[1].value["spec"]
    assert clean_memo._clean == {}
