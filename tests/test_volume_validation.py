"""spec.volumes and volumeMounts through parse_pod: Kubernetes' ValidateVolumes /
ValidateVolumeMounts cases (pkg/apis/core/validation/validation_test.go), each error under its
camelCase field path."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.core.errors import ValidationErrors
from nodeagent.core.model import parse_pod
from nodeagent.core.model.volume import DEFAULT_MODE, parse_mount, parse_volume
from nodeagent.core.quantity import parse_quantity


def pod(volumes: list[dict[str, Any]], mounts: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
            "spec": {"containers": [{"name": "a", "image": "busybox", "volumeMounts": mounts or []}],
                     "volumes": volumes}}


def errors(m: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(ValidationErrors) as exc:
        parse_pod(m)
    return [(e.path, e.message) for e in exc.value.errors]


VALID = [
    [{"name": "cache", "emptyDir": {}}],
    [{"name": "mem", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}}],
    [{"name": "h", "hostPath": {"path": "/var/log", "type": "Directory"}}],
    [{"name": "h", "hostPath": {"path": "/tmp/x", "type": ""}}],
    [{"name": "cm", "configMap": {"name": "conf", "defaultMode": 0o400, "optional": True,
                                  "items": [{"key": "a.conf", "path": "etc/a.conf", "mode": 0o600}]}}],
    [{"name": "s", "secret": {"secretName": "tls"}}],
    [{"name": "d", "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                                             {"path": "cpu", "resourceFieldRef": {"containerName": "a",
                                                                                  "resource": "limits.cpu"}}]}}],
    [{"name": "p", "projected": {"sources": [{"configMap": {"name": "c"}}, {"secret": {"name": "s"}}]}}],
    [{"name": "claim", "persistentVolumeClaim": {"claimName": "data"}}],  # valid API; the node refuses it
]


@pytest.mark.parametrize("volumes", VALID, ids=lambda v: next(k for k in v[0] if k != "name"))
def test_valid_volumes_parse(volumes: list[dict[str, Any]]) -> None:
    parsed = parse_pod(pod(volumes))
    assert parsed.spec.volumes == volumes


@pytest.mark.parametrize(("volumes", "expected"), [
    ([{"emptyDir": {}}], [("spec.volumes[0].name", "Required value")]),
    ([{"name": "Cache", "emptyDir": {}}], [("spec.volumes[0].name", "Invalid value: \"Cache\": a lowercase RFC 1123 "
                                           "label must consist of")]),
    ([{"name": "a.b", "emptyDir": {}}], [("spec.volumes[0].name", "Invalid value: \"a.b\": must not contain dots")]),
    ([{"name": "c", "emptyDir": {}}, {"name": "c", "emptyDir": {}}], [("spec.volumes[1].name",
                                                                        "Duplicate value: \"c\"")]),
    ([{"name": "c"}], [("spec.volumes[0]", "Required value: must specify a volume type")]),
    ([{"name": "c", "emptyDir": {}, "hostPath": {"path": "/x"}}],
     [("spec.volumes[0].emptyDir", "Forbidden: may not specify more than 1 volume type")]),
    ([{"name": "c", "emptyDirr": {}}], [("spec.volumes[0].emptyDirr", "unknown field \"emptyDirr\""),
                                        ("spec.volumes[0]", "Required value: must specify a volume type")]),
    ([{"name": "c", "emptyDir": {"sizeLimit": "-1Gi"}}],
     [("spec.volumes[0].emptyDir.sizeLimit", "Forbidden: SizeLimit field must be a valid resource quantity")]),
    ([{"name": "c", "emptyDir": {"sizeLimit": "lots"}}],
     [("spec.volumes[0].emptyDir.sizeLimit", "Forbidden: SizeLimit field must be a valid resource quantity")]),
    ([{"name": "h", "hostPath": {}}], [("spec.volumes[0].hostPath.path", "Required value")]),
    ([{"name": "h", "hostPath": {"path": "/var/../etc"}}],
     [("spec.volumes[0].hostPath.path", "Invalid value: \"/var/../etc\": must not contain '..'")]),
    ([{"name": "h", "hostPath": {"path": "/x", "type": "Dir"}}],
     [("spec.volumes[0].hostPath.type", "Unsupported value: \"Dir\": supported values: \"\", \"DirectoryOrCreate\"")]),
    ([{"name": "cm", "configMap": {}}], [("spec.volumes[0].configMap.name", "Required value")]),
    ([{"name": "cm", "configMap": {"name": "c", "defaultMode": 0o1777}}],
     [("spec.volumes[0].configMap.defaultMode", "Invalid value: 1023: must be a number between 0 and 0777")]),
    ([{"name": "cm", "configMap": {"name": "c", "items": [{"key": "k", "path": "/etc/k"}]}}],
     [("spec.volumes[0].configMap.items[0].path", "Invalid value: \"/etc/k\": must be a relative path")]),
    ([{"name": "cm", "configMap": {"name": "c", "items": [{"key": "k", "path": "a/../../k"}]}}],
     [("spec.volumes[0].configMap.items[0].path", "Invalid value: \"a/../../k\": must not contain '..'")]),
    ([{"name": "cm", "configMap": {"name": "c", "items": [{"path": "k"}]}}],
     [("spec.volumes[0].configMap.items[0].key", "Required value")]),
    ([{"name": "s", "secret": {"name": "tls"}}], [("spec.volumes[0].secret.name", "unknown field \"name\""),
                                                 ("spec.volumes[0].secret.secretName", "Required value")]),
    ([{"name": "d", "downwardAPI": {"items": [{"path": "n", "fieldRef": {"fieldPath": "spec.nodeName"}}]}}],
     [("spec.volumes[0].downwardAPI.items[0].fieldRef.fieldPath", "Unsupported value: \"spec.nodeName\"")]),
    ([{"name": "d", "downwardAPI": {"items": [{"path": "n"}]}}],
     [("spec.volumes[0].downwardAPI.items[0]", "Invalid value: \"\": must specify one of")]),
    ([{"name": "p", "projected": {"sources": [{}]}}],
     [("spec.volumes[0].projected.sources[0]", "Required value: must specify at least 1 volume type")]),
])
def test_bad_volumes_are_refused_naming_the_field(volumes: list[dict[str, Any]],
                                                  expected: list[tuple[str, str]]) -> None:
    got = errors(pod(volumes))
    assert len(got) == len(expected), got
    for (path, message), (want_path, want_start) in zip(got, expected, strict=True):
        assert path == want_path and message.startswith(want_start), (path, message)


@pytest.mark.parametrize(("mounts", "expected"), [
    ([{"name": "nope", "mountPath": "/x"}], [("spec.containers[0].volumeMounts[0].name", "Not found: \"nope\"")]),
    ([{"mountPath": "/x"}], [("spec.containers[0].volumeMounts[0].name", "Required value")]),
    ([{"name": "data"}], [("spec.containers[0].volumeMounts[0].mountPath", "Required value")]),
    ([{"name": "data", "mountPath": "/x"}, {"name": "data", "mountPath": "/x"}],
     [("spec.containers[0].volumeMounts[1].mountPath", "Invalid value: \"/x\": must be unique")]),
    ([{"name": "data", "mountPath": "/x", "subPath": "/etc"}],
     [("spec.containers[0].volumeMounts[0].subPath", "Invalid value: \"/etc\": must be a relative path")]),
    ([{"name": "data", "mountPath": "/x", "subPath": "a/../../etc"}],
     [("spec.containers[0].volumeMounts[0].subPath", "Invalid value: \"a/../../etc\": must not contain '..'")]),
    ([{"name": "data", "mountPath": "/x", "subPath": "a", "subPathExpr": "$(POD)"}],
     [("spec.containers[0].volumeMounts[0].subPathExpr", "Invalid value: \"$(POD)\": subPathExpr and subPath "
                                                         "are mutually exclusive")]),
    ([{"name": "data", "mountPath": "/x", "readOnly": "yes"}],
     [("spec.containers[0].volumeMounts[0].readOnly", "Invalid value: \"yes\": must be a boolean")]),
    ([{"name": "data", "mountPath": "/x", "mountPropagation": "Shared"}],
     [("spec.containers[0].volumeMounts[0].mountPropagation", "Unsupported value: \"Shared\"")]),
    ([{"name": "data", "mountPath": "/x", "readonly": True}],
     [("spec.containers[0].volumeMounts[0].readonly", "unknown field \"readonly\"")]),
])
def test_bad_mounts_are_refused_naming_the_field(mounts: list[dict[str, Any]],
                                                 expected: list[tuple[str, str]]) -> None:
    got = errors(pod([{"name": "data", "emptyDir": {}}], mounts))
    assert len(got) == len(expected), got
    for (path, message), (want_path, want_start) in zip(got, expected, strict=True):
        assert path == want_path and message.startswith(want_start), (path, message)


def test_init_container_mounts_are_checked_too() -> None:
    m = pod([{"name": "data", "emptyDir": {}}])
    m["spec"]["initContainers"] = [{"name": "i", "image": "busybox", "volumeMounts": [{"name": "x", "mountPath": "/x"}]}]
    assert errors(m) == [("spec.initContainers[0].volumeMounts[0].name", "Not found: \"x\"")]


def test_typed_views() -> None:
    v = parse_volume({"name": "mem", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}})
    assert (v.kind, v.medium, v.size_limit) == ("emptyDir", "Memory", parse_quantity("64Mi"))
    h = parse_volume({"name": "h", "hostPath": {"path": "/var//log/", "type": "Directory"}})
    assert (h.host_path, h.host_path_type) == ("/var/log", "Directory")
    s = parse_volume({"name": "s", "secret": {"secretName": "tls", "items": [{"key": "k", "path": "p", "mode": 0o400}]}})
    assert s.default_mode == DEFAULT_MODE and s.projections[0].name == "tls"
    assert s.projections[0].items[0].mode == 0o400
    p = parse_volume({"name": "p", "projected": {"defaultMode": 0o440, "sources": [
        {"configMap": {"name": "c", "optional": True}}, {"downwardAPI": {"items": [
            {"path": "n", "fieldRef": {"fieldPath": "metadata.name"}}]}}]}})
    assert [x.kind for x in p.projections] == ["configMap", "downwardAPI"] and p.default_mode == 0o440
    assert p.projections[0].optional and p.projections[1].files[0].field_path == "metadata.name"
    m = parse_mount({"name": "d", "mountPath": "/d", "readOnly": True, "subPath": "a/b"})
    assert (m.read_only, m.sub_path) == (True, "a/b")
