"""Container log layout, copy-truncate rotation, pruning of old runs and tail."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nodeagent.agent.runtime import logs
from nodeagent.core.errors import FieldError


def write(path: Path, text: str) -> None:
    with open(path, "a") as f:
        f.write(text)


def test_layout_is_the_kubelets(tmp_path: Path) -> None:
    d = logs.container_log_dir(str(tmp_path), "default", "web", "u-1", "app")
    assert d == f"{tmp_path}/pods/default_web_u-1/app"
    assert logs.run_log_path(d, 0) == f"{d}/0.log"
    assert logs.run_log_path(d, 3) == f"{d}/3.log"


@pytest.mark.parametrize("bad", ["", "..", "a/b", "x\0y"])
def test_layout_rejects_escaping_names(tmp_path: Path, bad: str) -> None:
    with pytest.raises(FieldError):
        logs.container_log_dir(str(tmp_path), "default", "web", "u-1", bad)
    with pytest.raises(FieldError, match="metadata.name"):
        logs.pod_log_dir(str(tmp_path), "default", bad, "u-1")


def test_no_rotation_at_or_below_the_cap(tmp_path: Path) -> None:
    p = tmp_path / "0.log"
    assert not logs.rotate(str(p), max_size=10)  # missing file
    write(p, "x" * 10)
    assert not logs.rotate(str(p), max_size=10)
    assert not (tmp_path / "0.log.1").exists()


def test_rotation_copies_then_truncates(tmp_path: Path) -> None:
    p = tmp_path / "0.log"
    write(p, "one\ntwo\n")
    assert logs.rotate(str(p), max_size=4)
    assert (tmp_path / "0.log.1").read_text() == "one\ntwo\n"
    assert p.read_text() == ""
    assert not (tmp_path / "0.log.1.tmp").exists()


def test_older_copies_shift_and_the_count_is_capped(tmp_path: Path) -> None:
    p = tmp_path / "0.log"
    for i in range(7):
        write(p, f"gen{i}\n" * 3)
        assert logs.rotate(str(p), max_size=1, max_files=3)
    assert p.read_text() == ""
    assert (tmp_path / "0.log.1").read_text().startswith("gen6")
    assert (tmp_path / "0.log.2").read_text().startswith("gen5")
    assert not (tmp_path / "0.log.3").exists()
    assert logs.rotated_files(str(p)) == [f"{p}.1", f"{p}.2"]


def test_lowering_max_files_drops_the_extra_copies(tmp_path: Path) -> None:
    p = tmp_path / "0.log"
    for _ in range(5):
        write(p, "data\n")
        logs.rotate(str(p), max_size=1, max_files=6)
    assert len(logs.rotated_files(str(p))) == 5
    write(p, "data\n")
    logs.rotate(str(p), max_size=1, max_files=2)
    assert logs.rotated_files(str(p)) == [f"{p}.1"]


def test_an_append_writer_continues_at_the_start_without_holes(tmp_path: Path) -> None:
    p = tmp_path / "0.log"
    fd = os.open(p, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)  # what the container holds
    try:
        os.write(fd, b"a" * 1000)
        assert logs.rotate(str(p), max_size=100)
        os.write(fd, b"after\n")
    finally:
        os.close(fd)
    assert p.read_bytes() == b"after\n"  # no NUL padding up to the old offset


@pytest.mark.parametrize("size,files,field", [(0, 5, "containerLogMaxSize"), (10, 1, "containerLogMaxFiles")])
def test_bad_limits(tmp_path: Path, size: int, files: int, field: str) -> None:
    with pytest.raises(FieldError, match=field):
        logs.rotate(str(tmp_path / "0.log"), max_size=size, max_files=files)


def test_tail(tmp_path: Path) -> None:
    p = tmp_path / "0.log"
    write(p, "".join(f"line {i}\n" for i in range(10)))
    assert logs.tail(str(p), 3) == ["line 7", "line 8", "line 9"]
    assert logs.tail(str(p), 100) == [f"line {i}" for i in range(10)]
    assert logs.tail(str(p), 0) == []
    write(p, "partial")
    assert logs.tail(str(p), 2) == ["line 9", "partial"]
    assert logs.tail(str(tmp_path / "missing.log"), 5) == []
    with pytest.raises(FieldError):
        logs.tail(str(p), -1)


def test_tail_of_a_large_file_crosses_blocks(tmp_path: Path) -> None:
    p = tmp_path / "0.log"
    write(p, "".join(f"{i:07d}{'x' * 90}\n" for i in range(5000)))  # ~490 KB, many 64 KiB blocks
    got = logs.tail(str(p), 1500)
    assert len(got) == 1500
    assert got[0].startswith("0003500") and got[-1].startswith("0004999")


def test_tail_reaches_into_rotated_copies(tmp_path: Path) -> None:
    p = tmp_path / "0.log"
    write(p, "old1\nold2\n")
    logs.rotate(str(p), max_size=1)
    write(p, "mid1\n")
    logs.rotate(str(p), max_size=1)
    write(p, "new1\nnew2\n")
    assert logs.tail(str(p), 3) == ["mid1", "new1", "new2"]
    assert logs.tail(str(p), 10) == ["old1", "old2", "mid1", "new1", "new2"]


def test_prune_keeps_the_current_and_the_previous_run(tmp_path: Path) -> None:
    for name in ["0.log", "0.log.1", "1.log", "2.log", "2.log.1", "3.log", "notes.txt"]:
        write(tmp_path / name, "x\n")
    removed = logs.prune_runs(str(tmp_path), current_restart=3)
    assert sorted(os.path.basename(r) for r in removed) == ["0.log", "0.log.1", "1.log"]
    assert sorted(os.listdir(tmp_path)) == ["2.log", "2.log.1", "3.log", "notes.txt"]
    assert logs.prune_runs(str(tmp_path / "nope"), 5) == []


def test_remove_pod_dir(tmp_path: Path) -> None:
    d = logs.container_log_dir(str(tmp_path), "ns", "web", "u1", "app")
    logs.prepare_log_dir(d)
    write(Path(d) / "0.log", "x")
    logs.remove_pod_dir(logs.pod_log_dir(str(tmp_path), "ns", "web", "u1"))
    assert not os.path.exists(logs.pod_log_dir(str(tmp_path), "ns", "web", "u1"))


def test_rotating_a_multi_block_file_keeps_every_byte_in_order(tmp_path: Path) -> None:
    """Copy-collapse (ext4/xfs) leaves the partial last block live; copy-truncate moves it all."""
    p = tmp_path / "0.log"
    original = "".join(f"entry {i:05d}\n" for i in range(3000))  # 36 KB, not block aligned
    write(p, original)
    assert logs.rotate(str(p), max_size=1000)
    rotated = (tmp_path / "0.log.1").read_text()
    live = p.read_text()
    assert rotated + live == original
    assert len(live) < os.stat(p).st_blksize or live == ""
    write(p, "entry 03000\n")
    want = [f"entry {i:05d}" for i in range(3001)]
    assert logs.tail(str(p), 3001) == want  # a line cut by the rotation reads whole
    assert logs.tail(str(p), 5) == want[-5:]
