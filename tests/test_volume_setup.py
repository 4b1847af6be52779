"""The pod's volumes on a real filesystem (pods/volume_setup.py), without mounts: hostPath type
checks, subPath resolution that cannot leave its volume, files with their modes. The tmpfs and
the binds inside containers are tested as root in integration/images/test_volumes.py."""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeagent.agent.pods.volume_files import VolumeSourceError, VolumeSources
from nodeagent.agent.pods.volume_plan import plan_volumes
from nodeagent.agent.pods.volume_setup import (
    PodVolumeHost,
    SubPathError,
    VolumeSetupError,
    check_host_path,
    fetch_sources,
    resolve_sub_path,
)
from nodeagent.core.model import Pod, parse_pod


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_text("x")
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(tmp_path / "sock"))
    try:
        yield tmp_path
    finally:
        s.close()


@pytest.mark.parametrize(("name", "kind", "error"), [
    ("dir", "Directory", None),
    ("file", "Directory", "is not a directory"),
    ("missing", "Directory", "does not exist"),
    ("file", "File", None),
    ("dir", "File", "is not a file"),
    ("sock", "Socket", None),
    ("file", "Socket", "is not a socket file"),
    ("file", "CharDevice", "is not a character device"),
    ("file", "BlockDevice", "is not a block device"),
    ("missing", "", None),  # no type: no check (the runtime's bind then fails)
    ("file", "DirectoryOrCreate", "is not a directory"),
    ("dir", "FileOrCreate", "is not a file"),
    ("nodir/file", "FileOrCreate", "its parent directory does not exist"),
])
def test_host_path_type_checks(host: Path, name: str, kind: str, error: str | None) -> None:
    path = str(host / name)
    if error is None:
        check_host_path(path, kind)
        return
    with pytest.raises(VolumeSetupError) as e:
        check_host_path(path, kind)
    assert str(e.value) == f"hostPath type check failed: {path}{':' if 'parent' in error else ''} {error}"


def test_or_create_types_create(host: Path) -> None:
    check_host_path(str(host / "new" / "deeper"), "DirectoryOrCreate")
    assert (host / "new" / "deeper").is_dir()
    check_host_path(str(host / "dir" / "made"), "FileOrCreate")
    made = (host / "dir" / "made").stat()
    assert stat.S_ISREG(made.st_mode) and made.st_size == 0


def test_sub_path_stays_inside_its_volume(tmp_path: Path) -> None:
    vol = tmp_path / "vol"
    (vol / "a").mkdir(parents=True)
    os.symlink("/etc", vol / "out")
    os.symlink("a", vol / "in")
    os.symlink("../../", vol / "a" / "up")
    assert resolve_sub_path(str(vol), "") == str(vol)
    assert resolve_sub_path(str(vol), "in") == str(vol / "a")
    assert resolve_sub_path(str(vol), "new/dir") == str(vol / "new" / "dir")
    assert (vol / "new" / "dir").is_dir(), "a missing subPath is made inside the volume"
    for bad in ("out", "out/passwd", "a/up", "a/up/x", "../x", "/etc"):
        with pytest.raises(SubPathError):
            resolve_sub_path(str(vol), bad)
    assert not (tmp_path / "x").exists()


def make_pod(volumes: list[dict[str, Any]], mounts: list[dict[str, Any]]) -> Pod:
    return parse_pod({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "uid": "u1"},
                      "spec": {"containers": [{"name": "a", "image": "busybox", "volumeMounts": mounts}],
                               "volumes": volumes}})


def test_pod_volumes_are_made_and_bound(tmp_path: Path) -> None:
    hostdir = tmp_path / "host"
    pod = make_pod(
        [{"name": "cache", "emptyDir": {}}, {"name": "conf", "configMap": {"name": "c", "defaultMode": 0o400,
                                                                          "items": [{"key": "k", "path": "d/k"}]}},
         {"name": "h", "hostPath": {"path": str(hostdir), "type": "DirectoryOrCreate"}}],
        [{"name": "cache", "mountPath": "/cache"}, {"name": "conf", "mountPath": "/etc/app"},
         {"name": "h", "mountPath": "/h", "readOnly": True, "subPath": "logs"}])
    volumes = plan_volumes(pod, str(tmp_path / "pod"))
    vh = PodVolumeHost(pod, volumes)
    assert vh.needs_objects
    vh.ensure(VolumeSources(config_maps={"c": {"k": b"v"}}))
    vh.ensure()  # idempotent: every container start calls it (the files are written once)
    assert not vh.needs_objects
    cache = Path(volumes.volumes["cache"].path)
    assert stat.S_IMODE(cache.stat().st_mode) == 0o777
    conf = Path(volumes.volumes["conf"].path) / "d" / "k"
    assert conf.read_text() == "v" and stat.S_IMODE(conf.stat().st_mode) == 0o400
    binds = {m.destination: m for m in vh.mounts(pod.spec.containers[0])}
    assert binds["/cache"].source == str(cache) and "rw" in binds["/cache"].options
    assert "ro" in binds["/etc/app"].options  # configMap: always read-only
    assert binds["/h"].source == str(hostdir / "logs") and "ro" in binds["/h"].options
    assert (hostdir / "logs").is_dir()


def test_a_sub_path_planted_as_a_symlink_is_refused(tmp_path: Path) -> None:
    pod = make_pod([{"name": "cache", "emptyDir": {}}], [{"name": "cache", "mountPath": "/x", "subPath": "etc"}])
    vh = PodVolumeHost(pod, plan_volumes(pod, str(tmp_path / "pod")))
    vh.ensure()
    os.symlink("/etc", os.path.join(vh.volumes.volumes["cache"].path, "etc"))  # what a container could do
    with pytest.raises(SubPathError) as e:
        vh.mounts(pod.spec.containers[0])
    assert e.value.path == "volumeMounts[cache].subPath" and "outside the volume" in e.value.message


def test_a_missing_config_map_names_the_volume(tmp_path: Path) -> None:
    pod = make_pod([{"name": "conf", "configMap": {"name": "gone"}}], [{"name": "conf", "mountPath": "/c"}])
    vh = PodVolumeHost(pod, plan_volumes(pod, str(tmp_path / "pod")))
    with pytest.raises(VolumeSourceError) as e:
        vh.ensure()
    assert str(e.value) == 'MountVolume.SetUp failed for volume "conf": configmap "gone" not found in namespace default'


def test_a_bad_host_path_names_the_volume(tmp_path: Path) -> None:
    pod = make_pod([{"name": "h", "hostPath": {"path": str(tmp_path / "nope"), "type": "Directory"}}], [])
    vh = PodVolumeHost(pod, plan_volumes(pod, str(tmp_path / "pod")))
    with pytest.raises(VolumeSetupError) as e:
        vh.ensure()
    assert str(e.value).startswith('MountVolume.SetUp failed for volume "h": hostPath type check failed')


async def test_fetch_sources_reads_each_named_object_once() -> None:
    pod = make_pod([{"name": "a", "configMap": {"name": "conf"}}, {"name": "b", "secret": {"secretName": "tls"}},
                    {"name": "p", "projected": {"sources": [{"configMap": {"name": "conf"}},
                                                            {"secret": {"name": "gone", "optional": True}}]}},
                    {"name": "e", "emptyDir": {}}], [])
    asked: list[tuple[str, str, str]] = []
    objects = {("configmaps", "conf"): {"metadata": {"name": "conf"}, "data": {"k": "v"}},
               ("secrets", "tls"): {"metadata": {"name": "tls"}, "data": {"key": "cGVt"}}}

    async def get(resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        asked.append((resource, namespace, name))
        return objects.get((resource, name))

    sources = await fetch_sources(plan_volumes(pod, "/p"), "default", get)
    assert sorted(asked) == [("configmaps", "default", "conf"), ("secrets", "default", "gone"),
                             ("secrets", "default", "tls")]
    assert sources.config_maps == {"conf": {"k": b"v"}} and sources.secrets == {"tls": {"key": b"pem"}}
    assert await fetch_sources(plan_volumes(pod, "/p"), "default", None) == VolumeSources()
