"""Checkpoint store on real temp dirs: round trip, atomicity, corruption, crash leftovers."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from nodeagent.agent.pods.checkpoint import (
    CheckpointStore,
    ContainerCheckpoint,
    PodCheckpoint,
    filename_for,
)
from nodeagent.core.errors import FieldError

WALL = 1_700_000_000.0  # 2023-11-14T22:13:20Z

MANIFEST = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"containers": [{"name": "app", "image": "x", "command": ["sleep", "9"]}]}}


def record(ns: str = "default", name: str = "web") -> PodCheckpoint:
    return PodCheckpoint(
        namespace=ns, name=name, uid="0f8e-uid", manifest=MANIFEST,
        containers=(ContainerCheckpoint("app", pid=4242, start_time=12345.67, restart_count=2,
                                    last_state={"terminated": {"exitCode": 137,
                                                               "reason": "OOMKilled"}}),),
    )


@pytest.fixture
def store(tmp_path: Path) -> CheckpointStore:
    return CheckpointStore.open(tmp_path, wall=lambda: WALL)


def test_the_constructor_does_no_io_the_factory_makes_the_directory(tmp_path: Path) -> None:
    CheckpointStore(tmp_path / "state")
    assert list(tmp_path.iterdir()) == []
    store = CheckpointStore.open(tmp_path / "state")
    assert store.directory.is_dir() and store.directory.stat().st_mode & 0o777 == 0o700


def test_round_trip_and_layout(store: CheckpointStore, tmp_path: Path) -> None:
    path = store.save(record())
    assert path == tmp_path / "checkpoints" / "default_web.json"
    assert store.load("default", "web") == record()
    records, problems = store.load_all()
    assert records == [record()] and problems == []
    # nothing but the checkpoint in the directory: the temp file was renamed, not copied
    assert sorted(p.name for p in store.directory.iterdir()) == ["default_web.json"]


def test_save_replaces(store: CheckpointStore) -> None:
    store.save(record())
    updated = replace(record(), containers=(ContainerCheckpoint("app", pid=99, start_time=1.0, restart_count=3),
                                            ContainerCheckpoint("sidecar", pid=100)))
    store.save(updated)
    loaded = store.load("default", "web")
    assert loaded is not None
    assert [c.name for c in loaded.containers] == ["app", "sidecar"]
    assert loaded.container("app") == ContainerCheckpoint("app", 99, 1.0, 3, {})
    assert loaded.container("nope") is None


def test_delete(store: CheckpointStore) -> None:
    store.save(record())
    assert store.delete("default", "web") is True
    assert store.delete("default", "web") is False
    assert store.load("default", "web") is None
    assert store.load_all() == ([], [])


@pytest.mark.parametrize("ns,name", [
    ("../etc", "web"), ("default", "../../passwd"), ("default", "a/b"), ("Default", "web"),
    ("default", ""), ("default", "web_x"), ("a" * 64, "web"), ("default", "-web"),
])
def test_keys_are_validated(store: CheckpointStore, ns: str, name: str) -> None:
    with pytest.raises(FieldError) as e:
        store.save(record(ns, name))
    assert e.value.path in ("metadata.namespace", "metadata.name")
    assert list(store.directory.iterdir()) == []


def test_long_names_fit_name_max() -> None:
    long_name = ".".join(["a" * 63] * 3) + "." + "b" * 61  # 253 chars
    fname = filename_for("n" * 63, long_name)
    assert len(fname) <= 255 and fname.endswith(".json")
    assert fname != filename_for("n" * 63, long_name[:-1] + "c")


@pytest.mark.parametrize("content,reason", [
    (b'{"version": 1, "checksum": "ab", "da', "not valid JSON"),        # truncated
    (b"\x00\xff\xfe garbage", "not valid JSON"),
    (b"[1, 2, 3]", "unsupported format"),
    (b"", "not valid JSON"),
])
def test_corrupt_file_is_reported_and_moved_aside(store: CheckpointStore, content: bytes,
                                                   reason: str) -> None:
    store.save(record("default", "good"))
    bad = store.directory / "default_bad.json"
    bad.write_bytes(content)
    with capture_logs() as logs:
        records, problems = store.load_all()
    assert [r.name for r in records] == ["good"]
    assert len(problems) == 1
    p = problems[0]
    assert p.path == bad and reason in p.reason
    assert p.moved_to == store.directory / "default_bad.json.corrupt-20231114T221320Z"
    assert p.moved_to.read_bytes() == content and not bad.exists()
    assert {"event": "checkpoint_corrupt", "path": str(bad), "error": p.reason,
            "log_level": "error"} in logs
    # moved aside: the next start is clean, and the evidence is kept
    assert store.load_all() == (records, [])


def test_bit_flip_is_caught_by_checksum(store: CheckpointStore) -> None:
    path = store.save(record())
    doc = json.loads(path.read_bytes())
    doc["data"]["containers"][0]["pid"] = 1  # valid JSON, wrong content
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="checksum mismatch"):
        store.load("default", "web")
    records, problems = store.load_all()
    assert records == [] and "checksum mismatch" in problems[0].reason


def test_file_name_must_match_content(store: CheckpointStore) -> None:
    path = store.save(record("default", "web"))
    os.rename(path, store.directory / "default_other.json")
    records, problems = store.load_all()
    assert records == [] and "does not match" in problems[0].reason


def test_repeated_corruption_gets_distinct_names(store: CheckpointStore) -> None:
    for _ in range(2):
        (store.directory / "default_x.json").write_bytes(b"{")
        _, problems = store.load_all()
    names = sorted(p.name for p in store.directory.iterdir())
    assert names == ["default_x.json.corrupt-20231114T221320Z",
                     "default_x.json.corrupt-20231114T221320Z-1"]


def test_crash_leftover_temp_file_is_ignored_and_cleaned(store: CheckpointStore) -> None:
    store.save(record())
    # a crash between mkstemp/write and rename leaves a partial temp file behind
    leftover = store.directory / ".tmp-abc123"
    leftover.write_bytes(b'{"version": 1, "data": {"namesp')
    records, problems = store.load_all()
    assert records == [record()] and problems == []
    assert not leftover.exists()


def test_failed_write_keeps_old_file_and_leaves_no_temp(store: CheckpointStore,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    store.save(record())
    before = (store.directory / "default_web.json").read_bytes()

    def boom(fd: int) -> None:
        raise OSError(5, "simulated EIO")

    monkeypatch.setattr(os, "fsync", boom)
    changed = replace(record(), containers=(ContainerCheckpoint("app", pid=1),))
    with pytest.raises(OSError):
        store.save(changed)
    monkeypatch.undo()
    assert (store.directory / "default_web.json").read_bytes() == before
    assert sorted(p.name for p in store.directory.iterdir()) == ["default_web.json"]


def test_unrelated_files_are_left_alone(store: CheckpointStore) -> None:
    (store.directory / "README").write_text("hi")
    (store.directory / "x.json.corrupt-1").write_text("{")
    assert store.load_all() == ([], [])
    assert (store.directory / "README").exists()
