"""Reading a run's log forward (runtime/logs.py LogReader, tail_bytes): what `kubectl logs`,
`--tail`, `--limit-bytes` and `-f` read through the agent, across both kinds of rotation."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nodeagent.agent.runtime import logs


def drain(reader: logs.LogReader, step: int = 7) -> bytes:
    out = b""
    while chunk := reader.read(step):
        out += chunk
    return out


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


@pytest.mark.parametrize(("content", "n", "expected"), [
    (b"a\nb\nc\n", 2, b"b\nc\n"),
    (b"a\nb\nc", 2, b"b\nc"),  # a last line without newline counts and stays without one
    (b"a\nb\nc\n", 0, b""),
    (b"a\nb\nc\n", 10, b"a\nb\nc\n"),
    (b"", 3, b""),
])
def test_tail_bytes_is_the_raw_end_and_the_live_size(tmp_path: Path, content: bytes, n: int,
                                                     expected: bytes) -> None:
    path = tmp_path / "0.log"
    path.write_bytes(content)
    assert logs.tail_bytes(str(path), n) == (expected, len(content))


def test_tail_bytes_reaches_into_rotated_copies(tmp_path: Path) -> None:
    path = tmp_path / "0.log"
    (tmp_path / "0.log.1").write_bytes(b"old 1\nold 2\n")
    path.write_bytes(b"new\n")
    assert logs.tail_bytes(str(path), 2) == (b"old 2\nnew\n", 4)


def test_whole_reads_the_rotated_copies_oldest_first(tmp_path: Path) -> None:
    path = tmp_path / "0.log"
    (tmp_path / "0.log.2").write_bytes(b"first\n")
    (tmp_path / "0.log.1").write_bytes(b"second\n")
    path.write_bytes(b"third\n")
    reader = logs.LogReader.whole(str(path), follow=False)
    try:
        assert drain(reader) == b"first\nsecond\nthird\n"
    finally:
        reader.close()


def test_without_follow_the_read_ends_at_the_size_it_began_with(tmp_path: Path) -> None:
    path = tmp_path / "0.log"
    path.write_bytes(b"before\n")
    reader = logs.LogReader.whole(str(path), follow=False)
    append(path, b"after\n")
    try:
        assert drain(reader) == b"before\n"
    finally:
        reader.close()


def test_following_sees_appends_and_a_missing_file_is_empty(tmp_path: Path) -> None:
    path = tmp_path / "0.log"
    reader = logs.LogReader.whole(str(path), follow=True)
    try:
        assert reader.read() == b""
        path.write_bytes(b"one\n")
        assert drain(reader) == b"one\n"
        assert reader.read() == b""
        append(path, b"two\n")
        assert drain(reader) == b"two\n"
    finally:
        reader.close()


@pytest.mark.parametrize("collapse", [True, False], ids=["copy-collapse", "copy-truncate"])
def test_following_across_a_rotation_loses_and_repeats_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               collapse: bool) -> None:
    if not collapse:
        monkeypatch.setattr(logs, "_collapse_head", lambda fd, length: False)
    path = tmp_path / "0.log"
    lines = [f"line {i:05d}\n".encode() for i in range(20000)]  # ~220 KiB: several blocks
    path.write_bytes(b"".join(lines[:10000]))
    reader = logs.LogReader.whole(str(path), follow=True)
    try:
        seen = reader.read(50_000)  # part of it, then the file rotates under the reader
        assert logs.rotate(str(path), max_size=1000, max_files=3)
        append(path, b"".join(lines[10000:]))
        seen += drain(reader, 30_000)
        assert seen == b"".join(lines)
        assert logs.rotate(str(path), max_size=1000, max_files=3)  # a second one, read up to date
        append(path, b"end\n")
        assert drain(reader) == b"end\n"
    finally:
        reader.close()


def test_close_releases_every_descriptor(tmp_path: Path) -> None:
    path = tmp_path / "0.log"
    (tmp_path / "0.log.1").write_bytes(b"x\n")
    path.write_bytes(b"y\n")
    before = len(os.listdir("/proc/self/fd"))
    reader = logs.LogReader.whole(str(path), follow=True)
    reader.read(1)
    reader.close()
    assert len(os.listdir("/proc/self/fd")) == before
