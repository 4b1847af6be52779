"""The durable Store: memory serves, a SQLite revision log (logdb.py) remembers.

Reads and watches come from memory (mvcc.py: the latest version of every key and a ring of the
last `history_size` revisions); SQLite is read at open (the live keys, the revision and the
compacted revision: the counter continues) and for reads and watches older than the ring.

Writes, group-committed: `txn` evaluates its compares at once against the committed state plus
every transaction still waiting to commit (the overlay), so transactions are serializable in
submission order; if it writes, it takes the next revision and its writes join the overlay. All
transactions submitted while a commit is in flight form the next batch: one INSERT, one fsync.
When the batch is durable it is published (readers and watchers see it) and its callers return.
If the commit fails, every transaction of the batch and every one queued behind it (they were
evaluated on top of it) fails with StoreError, the overlay is dropped and the revision counter is
back at the last durable revision: nothing of the batch is in memory or in the log (logdb's INSERT
is all or nothing). The store then goes on: the next transaction is a new batch (so after a full
disk is freed, writes succeed again). Only a failure that leaves the log unwritable (corruption,
the writer process gone) makes the store refuse every later write, with the first error.

A read-only transaction returns at once unless transactions are waiting to commit; then it was
evaluated on top of them and returns when they are durable (readers never see a write that is not).

Thread or process for the writes (committer.py): the process is the default. With an idle loop
the two are alike; with a busy loop (request handlers) a writer thread must take the GIL back
from the loop thread at least twice per commit and waits up to the 5 ms switch interval each
time, which the process avoids by construction, given a free core, for its own interpreter's RSS
and a pipe hop per commit. An API server's loop is busy at the targets and the deployed server
does not share its cores with test suites, so: the process; `writer="thread"` is one argument
away. The measurements: see bench/README.md ("The API server's store: a writer process").

Compaction: `compact(R)` forgets revisions <= R in memory at once (reads and watches below raise
Compacted) and deletes the log rows behind, in chunks of COMPACT_CHUNK revisions, one chunk after
each batch of writes so a big compaction never stalls them; close() finishes them. After a crash
the log's compacted revision is the last chunk done.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

import structlog

from nodeagent.cluster.storage import logdb
from nodeagent.cluster.storage.committer import Committer, ProcessCommitter, ThreadCommitter, WriteFailed
from nodeagent.cluster.storage.interface import (
    Compare,
    Event,
    KeyValue,
    Op,
    RangeResult,
    StoreClosed,
    StoreError,
    TxnResult,
)
from nodeagent.cluster.storage.mvcc import Mvcc
from nodeagent.cluster.storage.txn import check, evaluate

log = structlog.get_logger(__name__)

HISTORY_SIZE = 8192  # revisions kept in memory for watchers and old reads
COMPACT_CHUNK = 1000  # revisions per compaction transaction


class _Pending:
    __slots__ = ("events", "future")

    def __init__(self, events: tuple[Event, ...], future: asyncio.Future[None]) -> None:
        self.events = events
        self.future = future


class _Older:
    """mvcc.OlderReads from the log, on a reader thread of its own."""

    def __init__(self, reader: logdb.LogReader) -> None:
        self._reader = reader
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store-read")
        self.reads = 0  # how often memory did not reach back far enough (tests, benchmarks)

    async def range_at(self, lo: str, hi: str | None, revision: int, limit: int) -> tuple[list[KeyValue], int]:
        self.reads += 1
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._reader.range_at, lo, hi, revision, limit)

    async def batches(self, start: int, stop: int) -> Sequence[tuple[Event, ...]]:
        self.reads += 1
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._reader.batches, start, stop)

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._executor, self._reader.close)
        self._executor.shutdown(wait=True)


class SqliteStore:
    def __init__(self, path: str, snapshot: logdb.Snapshot, committer: Committer, older: _Older,
                 lock_fd: int, history_size: int) -> None:
        """Use `await SqliteStore.open(path)`."""
        self.path = path
        self._mvcc = Mvcc(snapshot.revision, snapshot.compacted, history_size, older)
        for kv in snapshot.kvs:
            self._mvcc.keyspace.put(kv)
        self._committer = committer
        self._older = older
        self._lock_fd = lock_fd
        self._overlay: dict[str, tuple[int, KeyValue | None]] = {}  # key -> (revision, state) not yet durable
        self._head = snapshot.revision  # the revision of the last transaction evaluated
        self._queue: list[_Pending] = []
        self._inflight: list[_Pending] | None = None
        self._scheduled = False
        self._compact_target = self._disk_compacted = snapshot.compacted
        self._compact_next = False  # alternate: a compaction chunk after each batch
        self._broken: BaseException | None = None
        self._closing = False
        self._idle: asyncio.Event | None = None
        # figures for benchmarks and tests
        self.batches = 0
        self.batched_txns = 0

    @classmethod
    async def open(cls, path: str, *, history_size: int = HISTORY_SIZE,
                   writer: Literal["thread", "process"] = "process", lock_timeout: float = 30.0) -> SqliteStore:
        """Open (or create) the store at `path`: take its lock, rebuild memory from the log."""
        if writer not in ("thread", "process"):
            raise ValueError(f"writer: must be thread or process, got {writer!r}")
        if history_size < 1:
            raise ValueError(f"history_size: must be >= 1, got {history_size}")
        lock_fd = await asyncio.to_thread(logdb.lock, path, lock_timeout)
        committer: Committer | None = None
        try:
            snapshot = await asyncio.to_thread(logdb.load, path)
            committer = await (ThreadCommitter if writer == "thread" else ProcessCommitter).start(path, lock_fd)
            older = _Older(await asyncio.to_thread(logdb.LogReader, path))
        except BaseException as e:
            if committer is not None:
                await committer.close()
            os.close(lock_fd)
            if isinstance(e, sqlite3.Error | OSError):
                raise StoreError(f"{path}: cannot open the store: {e}") from e
            raise
        log.info("store_opened", path=path, revision=snapshot.revision, compacted=snapshot.compacted,
                 keys=len(snapshot.kvs), writer=writer)
        return cls(path, snapshot, committer, older, lock_fd, history_size)

    @property
    def revision(self) -> int:
        return self._mvcc.revision

    @property
    def compacted_revision(self) -> int:
        return self._mvcc.compacted_revision

    async def get(self, key: str, *, revision: int = 0) -> tuple[KeyValue | None, int]:
        return await self._mvcc.get(key, revision)

    async def range(self, prefix: str, *, revision: int = 0, limit: int = 0,
                    start_key: str = "") -> RangeResult:
        return await self._mvcc.range(prefix, revision, limit, start_key)

    def watch(self, prefix: str, start_revision: int) -> AsyncIterator[Event]:
        return self._mvcc.watch(prefix, start_revision)

    # -- writes

    def _check_writable(self) -> None:
        if self._closing:
            raise StoreClosed()
        if self._broken is not None:
            raise StoreError(f"the store cannot write any more: {self._broken}")

    def _lookup(self, key: str) -> KeyValue | None:
        pending = self._overlay.get(key)
        if pending is not None:
            return pending[1]
        return self._mvcc.keyspace.get(key)

    async def txn(self, compares: Sequence[Compare], success: Sequence[Op],
                  failure: Sequence[Op] = ()) -> TxnResult:
        check(compares, success, failure)
        self._check_writable()
        outcome = evaluate(self._lookup, compares, success, failure, self._head + 1)
        if outcome.events:
            self._head += 1
            overlay, rev = self._overlay, self._head
            for ev in outcome.events:
                overlay[ev.kv.key] = (rev, ev.kv if ev.type == "PUT" else None)
        elif not self._queue and self._inflight is None:
            return TxnResult(outcome.succeeded, self._mvcc.revision, outcome.responses)
        future = asyncio.get_running_loop().create_future()
        self._queue.append(_Pending(outcome.events, future))
        revision = self._head
        self._schedule()
        await future
        return TxnResult(outcome.succeeded, revision, outcome.responses)

    def _schedule(self) -> None:
        if not self._scheduled and self._inflight is None:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._start)

    def _start(self) -> None:
        """Hand the next job to the committer: the queued batch, or a chunk of compaction."""
        self._scheduled = False
        if self._inflight is not None:
            return
        if self._broken is not None:
            self._wake_idle()
            return
        compaction = self._compact_target > self._disk_compacted
        if compaction and (self._compact_next or not self._queue):
            self._compact_next = False
            lo = self._disk_compacted + 1
            hi = min(self._compact_target, lo + COMPACT_CHUNK - 1)
            self._inflight = []
            self._committer.compact(lo, hi).add_done_callback(lambda f: self._compacted(hi, f))
            return
        if not self._queue:
            self._wake_idle()
            return
        batch, self._queue = self._queue, []
        rows = logdb.rows_of(p.events for p in batch if p.events)
        if not rows:  # only read-only transactions, evaluated on durable state: done
            for p in batch:
                if not p.future.done():
                    p.future.set_result(None)
            self._schedule()
            return
        self._inflight = batch
        self._compact_next = compaction
        self.batches += 1
        self.batched_txns += len(batch)
        self._committer.append(rows).add_done_callback(self._committed)

    def _committed(self, done: asyncio.Future[None]) -> None:
        batch, self._inflight = self._inflight or [], None
        error = done.exception()
        if error is None:
            self._mvcc.publish([p.events for p in batch if p.events])
            top, overlay = self._mvcc.revision, self._overlay
            for p in batch:
                for ev in p.events:
                    pending = overlay.get(ev.kv.key)
                    if pending is not None and pending[0] <= top:
                        del overlay[ev.kv.key]
                if not p.future.done():
                    p.future.set_result(None)
        else:
            self._fail(batch, error)
        self._schedule()

    def _fail(self, batch: list[_Pending], error: BaseException) -> None:
        failed = batch + self._queue
        self._queue = []
        self._overlay.clear()
        self._head = self._mvcc.revision
        if not (isinstance(error, WriteFailed) and error.retryable):
            self._broken = error
        log.error("store_commit_failed", path=self.path, error=str(error), txns=len(failed),
                  revision=self._head, writable=self._broken is None)
        for p in failed:
            if not p.future.done():
                p.future.set_exception(StoreError(f"commit failed: {error}"))

    def _compacted(self, hi: int, done: asyncio.Future[int]) -> None:
        self._inflight = None
        error = done.exception()
        if error is None:
            self._disk_compacted = hi
            if hi == self._compact_target:
                log.info("store_compacted", path=self.path, revision=hi)
        else:  # the log keeps rows it could forget; the next compact() tries again
            log.warning("store_compaction_failed", path=self.path, revision=hi, error=str(error))
            self._compact_target = self._disk_compacted
            if isinstance(error, WriteFailed) and not error.retryable:
                self._broken = error
        self._schedule()

    async def compact(self, revision: int) -> None:
        """Forget revisions <= `revision` (Compacted if already, FutureRevision if not yet written)."""
        self._check_writable()
        self._mvcc.compact(revision)
        self._compact_target = revision
        self._schedule()

    def _wake_idle(self) -> None:
        if self._idle is not None:
            self._idle.set()

    async def close(self) -> None:
        """Wait for the transactions already submitted and the compaction under way, then close;
        later calls raise StoreError."""
        if self._closing:
            return
        self._closing = True
        while self._broken is None and (self._inflight is not None or self._queue
                                        or self._compact_target > self._disk_compacted):
            self._idle = asyncio.Event()
            self._schedule()
            await self._idle.wait()
        self._mvcc.close()
        try:
            await self._committer.close()
            await self._older.close()
        finally:
            os.close(self._lock_fd)
        log.info("store_closed", path=self.path, revision=self._mvcc.revision)
