"""CheckpointJournal on real temp dirs: group commit, torn tails, corrupt entries, failed batches
cut back, compaction, and what a restart reads."""

from __future__ import annotations

import asyncio
import errno
import os
import threading
import time
from pathlib import Path

import pytest

from nodeagent.agent.pods.checkpoint import CheckpointStore, ContainerCheckpoint, Deletion, PodCheckpoint
from nodeagent.agent.pods.journal import JOURNAL, CheckpointJournal

MANIFEST = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default"},
            "spec": {"containers": [{"name": "app", "command": ["sleep", "9"]}]}}


def record(name: str, pid: int | None = None, deletion: Deletion | None = None) -> PodCheckpoint:
    return PodCheckpoint(namespace="default", name=name, uid=f"uid-{name}", manifest=MANIFEST,
                         containers=(ContainerCheckpoint("app", pid=pid, start_time=1.0 if pid else None,
                                                         backoff=(20.0, 1_700_000_000.0)),),
                         deletion=deletion)


def reopen(tmp_path: Path) -> tuple[list[PodCheckpoint], list[str]]:
    records, problems = CheckpointJournal(CheckpointStore.open(tmp_path)).load_all()
    return sorted(records, key=lambda r: r.name), [p.reason for p in problems]


async def test_concurrent_commits_share_one_fdatasync(tmp_path: Path) -> None:
    syncs: list[int] = []

    def slow_sync(fd: int) -> None:  # a disk that takes 50 ms: whoever comes meanwhile joins the next batch
        time.sleep(0.05)
        os.fdatasync(fd)
        syncs.append(threading.get_ident())

    j = CheckpointJournal(CheckpointStore.open(tmp_path), sync=slow_sync)
    j.load_all()
    await asyncio.gather(*(j.put(record(f"p{i}")) for i in range(40)))
    assert j.stats.commits == 40
    assert j.stats.batches == len(syncs) <= 2, j.stats.sizes
    await j.close()
    records, problems = reopen(tmp_path)
    assert [r.name for r in records] == sorted(f"p{i}" for i in range(40)) and problems == []


async def test_a_commit_returns_only_once_synced(tmp_path: Path) -> None:
    seen: list[bytes] = []
    path = tmp_path / "checkpoints" / JOURNAL

    def sync(fd: int) -> None:
        os.fdatasync(fd)
        seen.append(path.read_bytes())

    j = CheckpointJournal(CheckpointStore.open(tmp_path), sync=sync)
    j.load_all()
    await j.put(record("a", deletion=Deletion(30.0, 1_700_000_030.0)))
    assert len(seen) == 1 and b'"a"' in seen[0]
    assert j.read()[("default", "a")].deletion == Deletion(30.0, 1_700_000_030.0)
    await j.delete("default", "a")
    assert j.read() == {}
    await j.close()


async def test_roundtrip_keeps_backoff_and_deletion(tmp_path: Path) -> None:
    j = CheckpointJournal(CheckpointStore.open(tmp_path))
    j.load_all()
    r = record("a", pid=42, deletion=Deletion(5.0, 1_700_000_005.0, remove=False, reason="Evicted", message="m"))
    await j.put(r)
    await j.close()
    assert reopen(tmp_path) == ([r], [])


async def test_torn_tail_is_dropped_and_corrupt_entry_reported_alone(tmp_path: Path) -> None:
    j = CheckpointJournal(CheckpointStore.open(tmp_path))
    j.load_all()
    for name in ("a", "b", "c"):
        await j.put(record(name))
    await j.close()
    path = tmp_path / "checkpoints" / JOURNAL
    lines = path.read_bytes().split(b"\n")
    lines[1] = lines[1].replace(b'"uid-b"', b'"uid-X"')  # b's entry no longer matches its checksum
    path.write_bytes(b"\n".join(lines) + b'{"c":"torn')  # and a half-written last line
    records, problems = reopen(tmp_path)
    assert [r.name for r in records] == ["a", "c"]
    assert len(problems) == 1 and "journal entry 2: checksum mismatch" in problems[0]
    assert list((tmp_path / "checkpoints").glob(f"{JOURNAL}.corrupt-*")), "the bad journal is kept aside"
    assert reopen(tmp_path) == (records, []), "compacted: the next start reads the same, clean"


async def test_a_failed_batch_is_cut_back_and_never_replayed(tmp_path: Path) -> None:
    fail = {"on": False}

    def sync(fd: int) -> None:
        if fail["on"]:
            raise OSError(errno.ENOSPC, "No space left on device")
        os.fdatasync(fd)

    j = CheckpointJournal(CheckpointStore.open(tmp_path), sync=sync)
    j.load_all()
    await j.put(record("kept"))
    fail["on"] = True
    with pytest.raises(OSError, match="No space left"):
        await j.put(record("refused"))
    assert j.stats.failures == 1
    fail["on"] = False
    await j.put(record("after"))
    await j.close()
    records, problems = reopen(tmp_path)
    assert [r.name for r in records] == ["after", "kept"] and problems == []


async def test_compaction_moves_records_to_the_files_and_empties_the_journal(tmp_path: Path) -> None:
    store = CheckpointStore.open(tmp_path)
    j = CheckpointJournal(store, compact_bytes=4096)
    j.load_all()
    for i in range(10):
        await j.put(record(f"p{i}", pid=100 + i))
    await j.delete("default", "p3")
    assert j.stats.compactions >= 2  # one at load, at least one past 4 KiB
    assert (tmp_path / "checkpoints" / JOURNAL).stat().st_size < 4096
    await j.close()
    assert store.load("default", "p0") == record("p0", pid=100)
    records, _ = reopen(tmp_path)
    assert [r.name for r in records] == [f"p{i}" for i in range(10) if i != 3]
