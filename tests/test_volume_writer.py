"""The atomic writer of configMap/secret/downwardAPI/projected volume files (pods/volume_writer.py),
and the refresh that drives it (PodVolumeHost.refresh, volume_refresh.refresh_once): the upstream
layout (`..data` -> a timestamped generation, one link per top-level name), nothing written for
an unchanged payload, a change switched at once, an interrupted write leaving the old set whole,
subPath files not refreshed, files kept when their object is gone."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from nodeagent.agent.pods import volume_writer
from nodeagent.agent.pods.volume_files import VolumeFile, VolumeSources
from nodeagent.agent.pods.volume_plan import plan_volumes
from nodeagent.agent.pods.volume_refresh import refresh_once, with_metadata
from nodeagent.agent.pods.volume_setup import PodVolumeHost, resolve_sub_path
from nodeagent.core.model import parse_pod


def files(**kv: str) -> list[VolumeFile]:
    return [VolumeFile(k.replace("__", "/"), v.encode(), 0o644) for k, v in kv.items()]


def listing(root: Path) -> dict[str, str]:
    """The directory as a container sees it: name -> link target, or "<dir>"."""
    return {p.name: os.readlink(p) if p.is_symlink() else "<dir>" for p in sorted(root.iterdir())}


def test_first_write_makes_the_upstream_layout(tmp_path: Path) -> None:
    root = tmp_path / "vol"
    assert volume_writer.write(str(root), [*files(a="1", d__k="2"), VolumeFile("s", b"x", 0o400)])
    gen = os.readlink(root / "..data")
    assert gen.startswith("..") and (root / gen).is_dir()
    assert listing(root) == {gen: "<dir>", "..data": gen, "a": "..data/a", "d": "..data/d", "s": "..data/s"}
    assert (root / "a").read_text() == "1" and (root / "d" / "k").read_text() == "2"
    assert stat.S_IMODE((root / "s").stat().st_mode) == 0o400
    assert volume_writer.current(str(root)) == {"a": (b"1", 0o644), "d/k": (b"2", 0o644), "s": (b"x", 0o400)}


def test_an_unchanged_payload_writes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "vol"
    volume_writer.write(str(root), files(a="1"))
    gen = os.readlink(root / "..data")
    assert not volume_writer.write(str(root), files(a="1"))
    assert os.readlink(root / "..data") == gen
    assert volume_writer.write(str(root), [VolumeFile("a", b"1", 0o600)])  # a mode is part of it


def test_a_change_switches_the_whole_set_and_drops_the_old_one(tmp_path: Path) -> None:
    root = tmp_path / "vol"
    volume_writer.write(str(root), files(a="1", gone="x"))
    old = os.readlink(root / "..data")
    with open(root / "a", encoding="utf-8") as held:  # a reader in the middle of the old file
        assert volume_writer.write(str(root), files(a="2", new="y"))
        assert held.read() == "1"  # it keeps the file it opened
    gen = os.readlink(root / "..data")
    assert gen != old and not (root / old).exists()
    assert listing(root) == {gen: "<dir>", "..data": gen, "a": "..data/a", "new": "..data/new"}
    assert (root / "a").read_text() == "2" and (root / "new").read_text() == "y"


def test_an_interrupted_write_leaves_the_old_set_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "vol"
    volume_writer.write(str(root), files(a="1", b="1"))

    def crash(src: str, dst: str) -> None:
        raise OSError("crash before the switch")

    monkeypatch.setattr(volume_writer.os, "rename", crash)
    with pytest.raises(OSError):
        volume_writer.write(str(root), files(a="2", b="2"))
    assert ((root / "a").read_text(), (root / "b").read_text()) == ("1", "1")
    monkeypatch.undo()
    assert volume_writer.write(str(root), files(a="2", b="2"))  # the next write goes through
    assert ((root / "a").read_text(), (root / "b").read_text()) == ("2", "2")
    assert len([p for p in root.iterdir() if p.name.startswith("..2")]) <= 2  # at most the stray one


def test_an_older_agents_plain_files_become_links(tmp_path: Path) -> None:
    root = tmp_path / "vol"
    (root / "d").mkdir(parents=True)
    (root / "a").write_text("plain")
    (root / "d" / "k").write_text("plain")
    (root / "stale").write_text("plain")
    assert volume_writer.current(str(root)) is None
    assert volume_writer.write(str(root), files(a="1", d__k="2"))
    assert (root / "a").is_symlink() and (root / "d").is_symlink() and not (root / "stale").exists()
    assert (root / "d" / "k").read_text() == "2"


def test_a_data_link_out_of_the_volume_is_neither_read_nor_removed(tmp_path: Path) -> None:
    root, outside = tmp_path / "vol", tmp_path / "precious"
    outside.mkdir()
    (outside / "f").write_text("keep")
    root.mkdir()
    os.symlink("../precious", root / "..data")  # what a container could not do (read-only), checked anyway
    assert volume_writer.current(str(root)) is None
    assert volume_writer.write(str(root), files(a="1"))
    assert (outside / "f").read_text() == "keep" and (root / "a").read_text() == "1"


def test_a_sub_path_keeps_the_file_it_resolved_to(tmp_path: Path) -> None:
    root = tmp_path / "vol"
    volume_writer.write(str(root), files(a="1"))
    bound = resolve_sub_path(str(root), "a")  # what a subPath mount binds
    assert bound.startswith(str(root)) and "..data" not in bound
    fd = os.open(bound, os.O_RDONLY)  # the bind mount holds the inode as this does
    try:
        volume_writer.write(str(root), files(a="2"))
        assert os.pread(fd, 10, 0) == b"1"
    finally:
        os.close(fd)
    assert (root / "a").read_text() == "2"


def pod_with(volumes: list[dict[str, Any]], labels: dict[str, str] | None = None) -> Any:
    return parse_pod({"apiVersion": "v1", "kind": "Pod",
                      "metadata": {"name": "web", "namespace": "ns", "uid": "u1", "labels": labels or {}},
                      "spec": {"containers": [{"name": "a", "image": "busybox", "volumeMounts": [
                          {"name": v["name"], "mountPath": f"/{v['name']}"} for v in volumes]}],
                               "volumes": volumes}})


def test_refresh_rewrites_changed_volumes_and_keeps_those_it_cannot_make(tmp_path: Path) -> None:
    pod = pod_with([{"name": "conf", "configMap": {"name": "c"}}, {"name": "tls", "secret": {"secretName": "s"}}])
    vh = PodVolumeHost(pod, plan_volumes(pod, str(tmp_path / "pod")))
    vh.ensure(VolumeSources(config_maps={"c": {"k": b"1"}}, secrets={"s": {"key": b"pem"}}))
    conf, tls = Path(vh.volumes.volumes["conf"].path), Path(vh.volumes.volumes["tls"].path)
    # the ConfigMap changed, the Secret is gone: conf rewritten, tls kept as it was
    assert vh.refresh(VolumeSources(config_maps={"c": {"k": b"2", "k2": b"3"}})) == ["conf"]
    assert ((conf / "k").read_text(), (conf / "k2").read_text()) == ("2", "3")
    assert (tls / "key").read_text() == "pem"
    assert vh.refresh(VolumeSources(config_maps={"c": {"k": b"2", "k2": b"3"}}, secrets={"s": {"key": b"pem"}})) == []


def test_refresh_once_reads_the_objects_and_the_pods_labels_when_a_file_shows_them(tmp_path: Path) -> None:
    downward = {"name": "info", "downwardAPI": {"items": [{"path": "labels",
                                                          "fieldRef": {"fieldPath": "metadata.labels"}}]}}
    pod = pod_with([downward, {"name": "conf", "configMap": {"name": "c"}}], labels={"tier": "a"})
    vh = PodVolumeHost(pod, plan_volumes(pod, str(tmp_path / "pod")))
    assert vh.refreshable and vh.reads_pod_metadata
    vh.ensure(VolumeSources(config_maps={"c": {"k": b"1"}}))
    info = Path(vh.volumes.volumes["info"].path)
    assert (info / "labels").read_text() == 'tier="a"'
    server = {("pods", "web"): {"metadata": {"name": "web", "labels": {"tier": "b", "x": "1"}}},
              ("configmaps", "c"): {"metadata": {"name": "c"}, "data": {"k": "1"}}}
    asked: list[tuple[str, str, str]] = []

    async def get(resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        asked.append((resource, namespace, name))
        return server.get((resource, name))

    async def inline(fn: Any, *args: Any) -> list[str]:
        return list(fn(*args))

    assert asyncio.run(refresh_once(vh, get, inline)) == ["info"]
    assert (info / "labels").read_text() == 'tier="b"\nx="1"'
    assert sorted(asked) == [("configmaps", "ns", "c"), ("pods", "ns", "web")]


def test_with_metadata_takes_only_labels_and_annotations() -> None:
    pod = pod_with([], labels={"a": "1"})
    assert with_metadata(pod, {"metadata": {"labels": {"a": "1"}}}) is pod
    changed = with_metadata(pod, {"metadata": {"name": "other", "labels": {"a": "2"}, "annotations": {"n": "v"}}})
    assert changed.metadata.name == "web" and changed.metadata.labels == {"a": "2"}
    assert changed.metadata.annotations == {"n": "v"}
    assert with_metadata(pod, {"metadata": None}) is pod
