"""Pod spec -> the pod's volumes, each container's mounts, what the node refuses, and the files of
configMap / secret / downwardAPI / projected volumes (pure: pods/volume_plan.py, volume_files.py)."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.agent.pods.host_process import is_host_process_pod, runs_image
from nodeagent.agent.pods.volume_files import (
    VolumeFile,
    VolumeSourceError,
    VolumeSources,
    config_map_data,
    format_map,
    secret_data,
    volume_files,
)
from nodeagent.agent.pods.volume_plan import MountPlan, container_mounts, node_volume_errors, plan_volumes
from nodeagent.core.downward import NodeFacts
from nodeagent.core.model import Pod, parse_pod
from nodeagent.core.model.volume import parse_volume

POD_DIR = "/state/pods/default_web_u1"


def make_pod(volumes: list[dict[str, Any]], mounts: list[dict[str, Any]] | None = None, *,
             image: str | None = "busybox", annotations: dict[str, str] | None = None,
             labels: dict[str, str] | None = None) -> Pod:
    c: dict[str, Any] = {"name": "a", "volumeMounts": mounts or [],
                         "resources": {"limits": {"cpu": "250m", "memory": "64Mi"}}}
    if image:
        c["image"] = image
    if not image or annotations:
        c["command"] = ["sleep", "1"]
    return parse_pod({"apiVersion": "v1", "kind": "Pod",
                      "metadata": {"name": "web", "uid": "u1", "annotations": annotations or {},
                                   "labels": labels or {}},
                      "spec": {"containers": [c], "volumes": volumes}})


def test_where_each_volume_lives() -> None:
    pod = make_pod([{"name": "cache", "emptyDir": {}}, {"name": "mem", "emptyDir": {"medium": "Memory"}},
                    {"name": "logs", "hostPath": {"path": "/var/log/"}}, {"name": "cm", "configMap": {"name": "c"}},
                    {"name": "s", "secret": {"secretName": "s"}}, {"name": "d", "downwardAPI": {}},
                    {"name": "p", "projected": {"sources": []}}])
    pv = plan_volumes(pod, POD_DIR, memory_limit=64 << 20)
    paths = {name: v.path for name, v in pv.volumes.items()}
    root = f"{POD_DIR}/_volumes"
    assert paths == {"cache": f"{root}/kubernetes.io~empty-dir/cache", "mem": f"{root}/kubernetes.io~empty-dir/mem",
                     "logs": "/var/log", "cm": f"{root}/kubernetes.io~configmap/cm",
                     "s": f"{root}/kubernetes.io~secret/s", "d": f"{root}/kubernetes.io~downward-api/d",
                     "p": f"{root}/kubernetes.io~projected/p"}
    assert pv.local_dirs == (f"{root}/kubernetes.io~empty-dir/cache",)  # tmpfs is memory, not disk
    assert [v.memory for v in pv.volumes.values()] == [False, True, False, False, False, False, False]


@pytest.mark.parametrize(("empty_dir", "pod_limit", "size"), [
    ({"medium": "Memory", "sizeLimit": "16Mi"}, 64 << 20, 16 << 20),
    ({"medium": "Memory"}, 64 << 20, 64 << 20),  # the pod's memory limit bounds it
    ({"medium": "Memory", "sizeLimit": "0"}, 64 << 20, 64 << 20),  # zero means unset, as the kubelet reads it
    ({"medium": "Memory"}, None, None),  # tmpfs' own default
])
def test_tmpfs_size(empty_dir: dict[str, Any], pod_limit: int | None, size: int | None) -> None:
    pv = plan_volumes(make_pod([{"name": "m", "emptyDir": empty_dir}]), POD_DIR, pod_limit)
    assert pv.size_of(pv.volumes["m"]) == size


def test_container_mounts_read_only_and_order() -> None:
    pod = make_pod([{"name": "data", "emptyDir": {}}, {"name": "conf", "configMap": {"name": "c"}},
                    {"name": "h", "hostPath": {"path": "/srv"}}],
                   [{"name": "conf", "mountPath": "/data/conf"}, {"name": "data", "mountPath": "/data/"},
                    {"name": "h", "mountPath": "/srv", "readOnly": True, "subPath": "a/b"}])
    mounts = container_mounts(plan_volumes(pod, POD_DIR), pod.spec.containers[0])
    root = f"{POD_DIR}/_volumes"
    assert mounts == (
        MountPlan("data", f"{root}/kubernetes.io~empty-dir/data", "", "/data", False),
        MountPlan("h", "/srv", "a/b", "/srv", True),
        MountPlan("conf", f"{root}/kubernetes.io~configmap/conf", "", "/data/conf", True),  # API data: read-only
    )


@pytest.mark.parametrize(("volumes", "mounts", "kw", "expected"), [
    ([{"name": "v", "persistentVolumeClaim": {"claimName": "c"}}], [], {},
     [("spec.volumes[0].persistentVolumeClaim", "Forbidden: this node provides only")]),
    ([{"name": "v", "emptyDir": {"medium": "HugePages"}}], [], {},
     [("spec.volumes[0].emptyDir.medium", "Unsupported value: \"HugePages\"")]),
    ([{"name": "v", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}], [], {},
     [("spec.volumes[0].projected.sources[0].serviceAccountToken", "Forbidden: not provided by this node")]),
    ([{"name": "v", "emptyDir": {}}], [{"name": "v", "mountPath": "/v"}], {"image": None},
     [("spec.containers[0].volumeMounts", "Forbidden: a host-process container has no mount namespace")]),
    ([{"name": "v", "emptyDir": {}}], [{"name": "v", "mountPath": "/v"}],
     {"annotations": {"nodeagent.io/host-process": "true"}},
     [("spec.containers[0].volumeMounts", "Forbidden: a host-process container")]),
    ([{"name": "v", "emptyDir": {}}], [{"name": "v", "mountPath": "v"}], {},
     [("spec.containers[0].volumeMounts[0].mountPath", "Invalid value: \"v\": must be an absolute path")]),
    ([{"name": "v", "emptyDir": {}}], [{"name": "v", "mountPath": "/a/../etc"}], {},
     [("spec.containers[0].volumeMounts[0].mountPath", "Invalid value: \"/a/../etc\": must not contain '..'")]),
    ([{"name": "v", "emptyDir": {}}], [{"name": "v", "mountPath": "/v", "subPathExpr": "$(X)"}], {},
     [("spec.containers[0].volumeMounts[0].subPathExpr", "Forbidden: not supported by this node")]),
    ([{"name": "v", "emptyDir": {}}], [{"name": "v", "mountPath": "/v", "mountPropagation": "Bidirectional"}], {},
     [("spec.containers[0].volumeMounts[0].mountPropagation", "Forbidden: not supported by this node")]),
    ([{"name": "v", "emptyDir": {}}], [], {"image": None}, []),  # a volume alone is harmless
    ([{"name": "v", "emptyDir": {"medium": "Memory"}}, {"name": "h", "hostPath": {"path": "/x", "type": "Socket"}}],
     [{"name": "v", "mountPath": "/v", "mountPropagation": "None"}], {}, []),
])
def test_what_the_node_refuses(volumes: list[dict[str, Any]], mounts: list[dict[str, Any]], kw: dict[str, Any],
                               expected: list[tuple[str, str]]) -> None:
    pod = make_pod(volumes, mounts, **kw)
    got = [(e.path, e.message) for e in node_volume_errors(pod, lambda c: runs_image(pod, c))]
    assert len(got) == len(expected), got
    for (path, message), (want_path, want) in zip(got, expected, strict=True):
        assert path == want_path and message.startswith(want), (path, message)
    if kw.get("annotations"):
        assert is_host_process_pod(pod)


SOURCES = VolumeSources(config_maps={"conf": {"b.conf": b"B", "a.conf": b"A"}},
                     secrets={"tls": {"tls.key": b"\x00key", "tls.crt": b"crt"}})


def files(volume: dict[str, Any], sources: VolumeSources = SOURCES, **pod_kw: Any) -> list[VolumeFile]:
    pod = make_pod([volume], **pod_kw)
    return list(volume_files(parse_volume(volume), pod, sources, NodeFacts()))


@pytest.mark.parametrize(("volume", "expected"), [
    ({"name": "v", "configMap": {"name": "conf"}}, [("a.conf", b"A", 0o644), ("b.conf", b"B", 0o644)]),
    ({"name": "v", "configMap": {"name": "conf", "defaultMode": 0o400,
                                 "items": [{"key": "b.conf", "path": "etc/b"}, {"key": "a.conf", "path": "a",
                                                                                "mode": 0o600}]}},
     [("etc/b", b"B", 0o400), ("a", b"A", 0o600)]),
    ({"name": "v", "configMap": {"name": "missing", "optional": True}}, []),
    ({"name": "v", "configMap": {"name": "conf", "optional": True, "items": [{"key": "zz", "path": "z"}]}}, []),
    ({"name": "v", "secret": {"secretName": "tls"}}, [("tls.crt", b"crt", 0o644), ("tls.key", b"\x00key", 0o644)]),
    ({"name": "v", "secret": {"secretName": "tls", "defaultMode": 0o440, "items": [{"key": "tls.key", "path": "k"}]}},
     [("k", b"\x00key", 0o440)]),
    ({"name": "v", "downwardAPI": {"items": [
        {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
        {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
        {"path": "tier", "fieldRef": {"fieldPath": "metadata.labels['tier']"}, "mode": 0o400},
        {"path": "notes", "fieldRef": {"fieldPath": "metadata.annotations"}},
        {"path": "cpu", "resourceFieldRef": {"containerName": "a", "resource": "limits.cpu", "divisor": "1m"}},
        {"path": "mem", "resourceFieldRef": {"containerName": "a", "resource": "limits.memory", "divisor": "1Mi"}}]}},
     [("name", b"web", 0o644), ("labels", b'app="web"\ntier="fe"', 0o644), ("tier", b"fe", 0o400),
      ("notes", b'note="a \\"b\\""', 0o644),
      ("cpu", b"250", 0o644), ("mem", b"64", 0o644)]),
    ({"name": "v", "projected": {"defaultMode": 0o444, "sources": [
        {"configMap": {"name": "conf", "items": [{"key": "a.conf", "path": "x"}]}},
        {"secret": {"name": "tls", "items": [{"key": "tls.crt", "path": "x"}]}},
        {"downwardAPI": {"items": [{"path": "ns", "fieldRef": {"fieldPath": "metadata.namespace"}}]}}]}},
     [("x", b"crt", 0o444), ("ns", b"default", 0o444)]),  # the later source's x wins
])
def test_volume_files(volume: dict[str, Any], expected: list[tuple[str, bytes, int]]) -> None:
    got = files(volume, labels={"app": "web", "tier": "fe"}, annotations={"note": 'a "b"'})
    assert [(f.path, f.data, f.mode) for f in got] == expected


@pytest.mark.parametrize(("volume", "message"), [
    ({"name": "v", "configMap": {"name": "missing"}}, 'configmap "missing" not found in namespace default'),
    ({"name": "v", "secret": {"secretName": "missing"}}, 'secret "missing" not found in namespace default'),
    ({"name": "v", "configMap": {"name": "conf", "items": [{"key": "zz", "path": "z"}]}},
     "configmap default/conf references non-existent key: zz"),
    ({"name": "v", "projected": {"sources": [{"secret": {"name": "gone"}}]}}, 'secret "gone" not found'),
])
def test_a_missing_source_is_an_error_unless_optional(volume: dict[str, Any], message: str) -> None:
    with pytest.raises(VolumeSourceError) as e:
        files(volume)
    assert str(e.value).startswith(message), str(e.value)


def test_format_map_sorts_and_quotes() -> None:
    assert format_map({"b": "2", "a": 'x"y\n'}) == 'a="x\\"y\\n"\nb="2"'


def test_api_objects_decode_to_file_contents() -> None:
    cm = {"metadata": {"name": "c"}, "data": {"a": "text"}, "binaryData": {"b": "AAEC"}}
    assert config_map_data(cm) == {"a": b"text", "b": b"\x00\x01\x02"}
    assert secret_data({"metadata": {"name": "s"}, "data": {"k": "c2VjcmV0"}}) == {"k": b"secret"}
    assert config_map_data({"metadata": {"name": "e"}}) == {}
    with pytest.raises(VolumeSourceError) as e:
        secret_data({"metadata": {"name": "s"}, "data": {"k": "not base64!"}})
    assert str(e.value) == "secret s: key k: not valid base64"
