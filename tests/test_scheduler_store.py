"""The SQLite store: WAL, one transaction per change (all or nothing), a revision counter, objects
back as written after a reopen; the async wrapper keeps writes in order and off the event loop."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import threading
from pathlib import Path

import pytest

from nodeagent.cluster.store.sqlite import (
    AsyncStore,
    Delete,
    SchedulerMemoryStore,
    SchedulerPut,
    SchedulerSqliteStore,
    encode,
)


def put(kind: str, key: str, obj: dict, rev: int) -> SchedulerPut:
    return SchedulerPut(kind, key, encode(obj), rev)


def test_roundtrip_and_reopen(tmp_path: Path) -> None:
    db = str(tmp_path / "sub" / "s.db")
    s = SchedulerSqliteStore(db)
    s.apply([put("pods", "ns/a", {"metadata": {"name": "a"}, "n": 1}, 1)])
    s.apply([put("pods", "ns/b", {"metadata": {"name": "b"}}, 2), put("namespaces", "ns", {"x": [1, 2]}, 3)])
    s.apply([put("pods", "ns/a", {"metadata": {"name": "a"}, "n": 2}, 4)])
    s.apply([Delete("pods", "ns/b", 5)])
    s.close()
    snap, rev = SchedulerSqliteStore(db).load()
    assert rev == 5
    assert snap["pods"] == {"ns/a": {"metadata": {"name": "a"}, "n": 2}}
    assert snap["namespaces"] == {"ns": {"x": [1, 2]}}
    assert snap["priorityclasses"] == {} and snap["resourcequotas"] == {} and snap["nodes"] == {}


def test_wal_mode_and_private_file(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    SchedulerSqliteStore(db, sync="full").close()
    assert sqlite3.connect(db).execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert (Path(db).stat().st_mode & 0o777) == 0o600
    with pytest.raises(ValueError, match="storeSync"):
        SchedulerSqliteStore(db, sync="sometimes")


def test_a_failing_change_leaves_nothing_of_its_transaction(tmp_path: Path) -> None:
    s = SchedulerSqliteStore(str(tmp_path / "s.db"))
    s.apply([put("pods", "ns/a", {"v": 1}, 1)])
    bad = SchedulerPut("pods", "ns/b", None, 3)  # type: ignore[arg-type]  # NOT NULL fails mid-transaction
    with pytest.raises(sqlite3.IntegrityError):
        s.apply([put("pods", "ns/a", {"v": 2}, 2), bad])
    snap, rev = s.load()
    assert snap["pods"] == {"ns/a": {"v": 1}} and rev == 1
    s.apply([put("pods", "ns/c", {"v": 3}, 4)])  # the connection is usable after a rollback
    assert set(s.load()[0]["pods"]) == {"ns/a", "ns/c"}


def test_memory_store_keeps_copies() -> None:
    m = SchedulerMemoryStore()
    obj = {"a": [1]}
    m.apply([put("pods", "k", obj, 7)])
    obj["a"].append(2)
    assert m.load() == ({"namespaces": {}, "pods": {"k": {"a": [1]}}, "priorityclasses": {},
                         "resourcequotas": {}, "nodes": {}}, 7)


async def test_async_store_writes_in_order_on_one_thread(tmp_path: Path) -> None:
    threads: set[int] = set()

    class Recording(SchedulerSqliteStore):
        def apply(self, changes: list) -> None:  # type: ignore[override]
            threads.add(threading.get_ident())
            super().apply(changes)

    a = AsyncStore(Recording(str(tmp_path / "s.db")))
    a.load()
    obj = {"metadata": {"name": "p"}, "n": 0}
    futures = []
    for i in range(200):
        obj["n"] = i
        futures.append(a.put("pods", "ns/p", obj))  # encoded now: later changes do not leak in
    futures.append(a.put("pods", "ns/q", {"metadata": {}}))
    futures.append(a.delete("pods", "ns/q"))
    await asyncio.gather(*futures)
    assert threads and threading.get_ident() not in threads and len(threads) == 1
    a.close()
    snap, rev = SchedulerSqliteStore(str(tmp_path / "s.db")).load()
    assert snap["pods"] == {"ns/p": {"metadata": {"name": "p", "resourceVersion": "200"}, "n": 199}}
    assert rev == 202


async def test_async_store_continues_the_revision_after_reopen(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    a = AsyncStore(SchedulerSqliteStore(db))
    a.load()
    await a.put("namespaces", "x", {"metadata": {"name": "x"}})
    await a.put("namespaces", "y", {"metadata": {"name": "y"}})
    a.close()
    b = AsyncStore(SchedulerSqliteStore(db))
    snap = b.load()
    assert b.revision == 2
    obj = {"metadata": {"name": "z"}}
    await b.put("namespaces", "z", obj)
    assert obj["metadata"]["resourceVersion"] == "3"
    assert json.loads(encode(snap["namespaces"]["y"]))["metadata"]["resourceVersion"] == "2"
    b.close()


async def test_write_failure_reaches_the_awaiting_caller(tmp_path: Path) -> None:
    class Broken(SchedulerMemoryStore):
        def apply(self, changes: list) -> None:  # type: ignore[override]
            raise OSError("disk full")

    a = AsyncStore(Broken())
    a.load()
    with pytest.raises(OSError, match="disk full"):
        await a.put("pods", "k", {})
    a.close()


# ---- the writer process (nodeagent/scheduler/writer.py) ----

from nodeagent.cluster.store import writer as writer_mod  # noqa: E402
from nodeagent.cluster.store.writer import ProcessStore, decode_frame, encode_frame  # noqa: E402


def test_frames_roundtrip() -> None:
    batch = [[put("pods", "ns/ä", {"x": "ü" * 3}, 7)], [Delete("pods", "ns/b", 8), put("nodes", "n", {}, 9)], []]
    assert decode_frame(encode_frame(batch)[4:]) == batch


async def test_process_store_writes_in_order_and_survives_a_reopen(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    ps = ProcessStore(db)
    assert ps.load() == {"namespaces": {}, "pods": {}, "priorityclasses": {}, "resourcequotas": {}, "nodes": {}}
    await ps.start()
    child = ps._proc
    assert child is not None and child.pid != os.getpid()
    obj = {"metadata": {"name": "p"}, "n": 0}
    futures = []
    for i in range(500):
        obj["n"] = i
        futures.append(ps.put("pods", "ns/p", obj))
    futures.append(ps.put("pods", "ns/q", {"metadata": {}}))
    futures.append(ps.delete("pods", "ns/q"))
    await asyncio.gather(*futures)
    assert ps.handoffs == 1  # one frame for everything queued in one turn of the loop
    await ps.aclose()
    assert child.returncode == 0
    snap, rev = SchedulerSqliteStore(db).load()
    assert snap["pods"] == {"ns/p": {"metadata": {"name": "p", "resourceVersion": "500"}, "n": 499}}
    assert rev == 502
    again = ProcessStore(db)
    again.load()
    assert again.revision == 502


async def test_a_dead_writer_fails_the_writes_and_reports(tmp_path: Path) -> None:
    failures: list[str] = []
    ps = ProcessStore(str(tmp_path / "s.db"), on_failure=failures.append)
    ps.load()
    await ps.start()
    await ps.put("pods", "a", {})
    assert ps._proc is not None
    ps._proc.kill()
    await ps._proc.wait()
    with pytest.raises(OSError, match="writer"):
        await ps.put("pods", "b", {})
    await asyncio.sleep(0.05)
    assert failures and "exited" in failures[0]
    await ps.aclose()


async def test_load_waits_for_the_previous_writer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = str(tmp_path / "s.db")
    first = ProcessStore(db)
    first.load()
    await first.start()
    await first.put("pods", "a", {})  # the child holds the lock once it has started
    monkeypatch.setattr(writer_mod, "LOCK_TIMEOUT", 0.2)
    with pytest.raises(OSError, match="writer.lock"):
        await asyncio.to_thread(ProcessStore(db).load)
    await first.aclose()
    assert (await asyncio.to_thread(ProcessStore(db).load))["pods"] == {"a": {"metadata": {"resourceVersion": "1"}}}
