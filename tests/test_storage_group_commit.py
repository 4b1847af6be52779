"""The SQLite store's group commit: batching, what readers see while a commit is in flight, and what a
failed commit takes with it. A gate around the real committer holds or fails chosen commits."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from storage_backends import nothing_more, take

from nodeagent.cluster.storage import logdb
from nodeagent.cluster.storage.committer import Committer, WriteFailed
from nodeagent.cluster.storage.interface import Compacted, Compare, DeleteKey, Event, Get, Put, StoreError
from nodeagent.cluster.storage.logdb import Row
from nodeagent.cluster.storage.sqlite import SqliteStore


class Gate:
    """Wraps the store's committer: each append waits for the test to let it through or fail it."""

    def __init__(self, inner: Committer) -> None:
        self.inner = inner
        self.held: list[tuple[Sequence[Row], asyncio.Future[None]]] = []
        self.arrived = asyncio.Event()

    def append(self, rows: Sequence[Row]) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.held.append((rows, fut))
        self.arrived.set()
        return fut

    def compact(self, lo: int, hi: int) -> asyncio.Future[int]:
        return self.inner.compact(lo, hi)

    async def close(self) -> None:
        await self.inner.close()

    async def next(self) -> tuple[Sequence[Row], asyncio.Future[None]]:
        while not self.held:
            self.arrived.clear()
            await asyncio.wait_for(self.arrived.wait(), 5)
        return self.held.pop(0)

    async def release(self) -> int:
        rows, fut = await self.next()
        try:
            await self.inner.append(rows)
            fut.set_result(None)
        except BaseException as e:
            fut.set_exception(e)
        return len(rows)

    async def fail(self, retryable: bool = True) -> None:
        _, fut = await self.next()
        fut.set_exception(WriteFailed("OperationalError: database or disk is full", retryable))


@pytest.fixture
async def gated(tmp_path: Path) -> AsyncIterator[tuple[SqliteStore, Gate]]:
    store = await SqliteStore.open(str(tmp_path / "s.db"))
    gate = Gate(store._committer)
    store._committer = gate
    yield store, gate
    store._committer = gate.inner  # close() must not wait on a gate nobody opens
    await store.close()


def log_revisions(store: SqliteStore) -> list[int]:
    conn = sqlite3.connect(store.path)
    try:
        return [r[0] >> 20 for r in conn.execute("SELECT id FROM log ORDER BY id")]
    finally:
        conn.close()


async def test_txns_submitted_together_share_one_commit(tmp_path: Path) -> None:
    store = await SqliteStore.open(str(tmp_path / "s.db"))
    try:
        results = await asyncio.gather(*(store.txn([], [Put(f"/k{i}", b"v")]) for i in range(50)))
        assert sorted(r.revision for r in results) == list(range(1, 51))
        assert (store.batches, store.batched_txns) == (1, 50)
    finally:
        await store.close()


async def test_txns_submitted_during_a_commit_join_the_next_and_see_the_pending_state(
        gated: tuple[SqliteStore, Gate]) -> None:
    store, gate = gated
    first = asyncio.ensure_future(store.txn([], [Put("/a", b"1")]))
    await asyncio.sleep(0)
    await gate.arrived.wait()  # revision 1 is in flight
    # evaluated on top of it: the CAS sees /a at revision 1
    second = asyncio.ensure_future(store.txn([Compare("/a", "mod_revision", "=", 1)], [Put("/a", b"2")]))
    read_only = asyncio.ensure_future(store.txn([], [Get("/a")]))
    await asyncio.sleep(0.01)
    assert (await store.get("/a")) == (None, 0)  # readers see only what is durable
    assert not second.done() and not read_only.done()
    assert await gate.release() == 1
    assert (await first).revision == 1
    assert (await store.get("/a"))[0].value == b"1"  # type: ignore[union-attr]
    assert await gate.release() == 1  # the second batch: the CAS (the read-only txn adds no row)
    r2, r3 = await second, await read_only
    assert r2.succeeded and r2.revision == 2
    assert r3.revision == 2 and r3.responses[0].value == b"2"  # type: ignore[union-attr]


async def test_a_failed_commit_fails_its_batch_and_everything_evaluated_on_top(gated: tuple[SqliteStore, Gate]) -> None:
    store, gate = gated
    await asyncio.gather(asyncio.ensure_future(store.txn([], [Put("/base", b"0")])), gate.release())
    watch = store.watch("/", 2)
    first = asyncio.ensure_future(store.txn([], [Put("/a", b"1"), Put("/b", b"1")]))
    await gate.arrived.wait()
    behind = [
        asyncio.ensure_future(store.txn([Compare("/a", "version", "=", 1)], [Put("/c", b"on top of /a")])),
        asyncio.ensure_future(store.txn([], [Put("/base", b"1")])),
        asyncio.ensure_future(store.txn([], [Get("/a")])),  # read-only, but it read the doomed /a
    ]
    await asyncio.sleep(0.01)
    await gate.fail()
    for t in [first, *behind]:
        with pytest.raises(StoreError, match="commit failed: .*disk is full"):
            await t
    assert store.revision == 1 and log_revisions(store) == [1]
    assert [kv.key for kv in (await store.range("/")).kvs] == ["/base"]
    assert await nothing_more(watch)
    # the store goes on from the last durable revision, with no trace of the failed ones
    retry = asyncio.ensure_future(store.txn([Compare("/a", "create_revision", "=", 0)], [Put("/a", b"again")]))
    await gate.release()
    r = await retry
    assert r.succeeded and r.revision == 2 and log_revisions(store) == [1, 2]
    (ev,) = await take(watch, 1)
    assert (ev.kv.key, ev.kv.value, ev.kv.version, ev.prev_kv) == ("/a", b"again", 1, None)


async def test_a_failure_that_leaves_the_log_unwritable_stops_writes_and_says_so(gated: tuple[SqliteStore, Gate]) -> None:
    store, gate = gated
    await asyncio.gather(asyncio.ensure_future(store.txn([], [Put("/a", b"0")])), gate.release())
    doomed = asyncio.ensure_future(store.txn([], [Put("/a", b"1")]))
    await gate.fail(retryable=False)
    with pytest.raises(StoreError, match="commit failed"):
        await doomed
    with pytest.raises(StoreError, match="cannot write any more"):
        await store.txn([], [Put("/b", b"")])
    with pytest.raises(StoreError, match="cannot write any more"):
        await store.txn([], [Get("/a")])
    assert (await store.get("/a"))[0].value == b"0"  # type: ignore[union-attr]  # reads still answer


async def test_a_cancelled_caller_does_not_undo_its_txn(gated: tuple[SqliteStore, Gate]) -> None:
    store, gate = gated
    t = asyncio.ensure_future(store.txn([], [Put("/a", b"1")]))
    await gate.arrived.wait()
    t.cancel()
    await gate.release()
    await asyncio.sleep(0.01)  # the commit's callback publishes it
    assert (await store.get("/a"))[0] is not None  # like etcd: a cancelled request may have committed


def test_the_log_is_wal_with_synchronous_full_and_private(tmp_path: Path) -> None:
    """What makes a returned txn survive power loss, not only SIGKILL: each commit fsyncs the WAL."""
    path = str(tmp_path / "d" / "s.db")
    fd = logdb.lock(path, 0)
    logdb.load(path)
    writer = logdb.LogWriter(path)
    try:
        assert writer._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert writer._db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    finally:
        writer.close()
        os.close(fd)
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert os.stat(os.path.dirname(path)).st_mode & 0o777 == 0o700


async def test_a_second_store_on_the_same_file_is_refused(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    store = await SqliteStore.open(path)
    try:
        with pytest.raises(StoreError, match="another store holds"):
            await SqliteStore.open(path, lock_timeout=0.1)
    finally:
        await store.close()


@pytest.mark.parametrize("writer", ["thread", "process"])
async def test_a_file_that_is_no_log_is_a_clear_error_and_leaves_nothing_held(tmp_path: Path, writer: str) -> None:
    path = tmp_path / "s.db"
    path.write_bytes(b"this is not a database" * 100)
    for _ in range(2):  # the second time the lock is free again: the same error, not "another store"
        with pytest.raises(StoreError, match="cannot open the store: file is not a database"):
            await SqliteStore.open(str(path), writer=writer)  # type: ignore[arg-type]


async def test_compaction_runs_in_chunks_between_batches_and_deletes_what_it_forgets(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("nodeagent.cluster.storage.sqlite.COMPACT_CHUNK", 3)
    path = str(tmp_path / "s.db")
    store = await SqliteStore.open(path)
    for i in range(30):  # 3 keys, 10 versions each; /k0 deleted at the end
        await store.txn([], [Put(f"/k{i % 3}", str(i).encode())])
    await store.txn([], [DeleteKey("/k0")])  # 31
    state_at_20 = await store.range("/", revision=20)
    await store.compact(20)
    # writes go on while the 7 chunks of compaction interleave with their batches
    await asyncio.gather(*(store.txn([], [Put(f"/n{i}", b"x")]) for i in range(10)))
    await store.close()  # finishes the compaction
    conn = sqlite3.connect(path)
    try:
        rows = [(name, rowid >> 20) for rowid, name in conn.execute("SELECT id, name FROM log ORDER BY id")]
        compacted = conn.execute("SELECT value FROM meta WHERE name = 'compacted'").fetchone()[0]
    finally:
        conn.close()
    assert compacted == 20
    # at or below 20 only the latest version of each key is left: /k0 at 19, /k1 at 20, /k2 at 18
    assert [r for r in rows if r[1] <= 20] == [("/k2", 18), ("/k0", 19), ("/k1", 20)]
    assert [r[1] for r in rows if r[1] > 20] == list(range(21, 42))  # everything above stays
    store = await SqliteStore.open(path)
    try:
        assert store.compacted_revision == 20
        assert await store.range("/", revision=20) == state_at_20
        with pytest.raises(Compacted):
            await store.range("/", revision=19)
        events = [e async for e in _take(store.watch("/k", 21), 11)]
        assert [e.kv.mod_revision for e in events] == list(range(21, 32))
        assert events[0].prev_kv is not None and events[0].prev_kv.mod_revision == 18  # /k2's prev, at 18: kept
    finally:
        await store.close()


async def _take(it: AsyncIterator[Event], n: int) -> AsyncIterator[Event]:
    for _ in range(n):
        yield await asyncio.wait_for(it.__anext__(), 5)
