"""The scheduler's desired state on disk: a small SchedulerStore protocol, SQLite behind it, async
writers. (The `Scheduler` prefix tells these apart from the API server's storage, cluster/storage/.)

The scheduler keeps every object in memory (it is the only writer) and writes each change
through: `SchedulerStore.apply(changes)` is one transaction, so a change (a pod with its binding, a
quota, a cordon) is on disk whole or not at all. Objects are Kubernetes-shaped JSON documents keyed
by (kind, key); `resourceVersion` is a cluster-wide revision counter, as in etcd, assigned by the
caller in change order. An etcd-backed SchedulerStore needs the same calls (`load`, `apply`,
`apply_many`, `close`); nothing in the scheduling code touches SQL.

SQLite: WAL journal, one connection, `synchronous=NORMAL` by default: a commit is in the WAL file
(the OS has it) before its future resolves, so a killed scheduler (SIGKILL, OOM) loses nothing;
only a power failure or kernel crash can roll back the last commits (never corrupt). `full`
fsyncs each commit as well. A single-object change is one statement (its own implicit
transaction); a change of several objects is BEGIN IMMEDIATE ... COMMIT.

Off the event loop: the scheduler hands its writes to a child process (writer.py, ProcessStore);
`AsyncStore` does the same with a thread of this process (tests, other SchedulerStore
implementations).
Both queue the writes of one event-loop turn and hand them over together, in order; callers await
a write's future only where they must answer after it (an API create), and go on otherwise.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

log = structlog.get_logger(__name__)

Object = dict[str, Any]
SchedulerSnapshot = dict[str, dict[str, Object]]  # kind -> key -> object
KINDS = ("namespaces", "pods", "priorityclasses", "resourcequotas", "nodes")


@dataclass(frozen=True, slots=True)
class SchedulerPut:
    kind: str
    key: str
    data: str  # the object as JSON, encoded when the change was made
    revision: int


@dataclass(frozen=True, slots=True)
class Delete:
    kind: str
    key: str
    revision: int


Change = SchedulerPut | Delete


class SchedulerStore(Protocol):
    def load(self) -> tuple[SchedulerSnapshot, int]:
        """Every object by kind and key, and the last revision written."""
        ...

    def apply(self, changes: Sequence[Change]) -> None:
        """Write `changes` in one transaction (all or nothing)."""
        ...

    def apply_many(self, batch: Sequence[Sequence[Change]]) -> list[BaseException | None]:
        """apply() for each item of `batch`, in order, each its own transaction; returns the
        error of each (None: committed). Lets a store take a run of writes in one call."""
        ...

    def close(self) -> None:
        ...


_SCHEMA = """
CREATE TABLE IF NOT EXISTS objects (
    kind TEXT NOT NULL, key TEXT NOT NULL, revision INTEGER NOT NULL, data TEXT NOT NULL,
    PRIMARY KEY (kind, key)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
"""


_UPSERT = "INSERT OR REPLACE INTO objects VALUES (?, ?, ?, ?)"


class SchedulerSqliteStore:
    """The default SchedulerStore: one SQLite file in WAL mode. Use from one thread at a time."""

    def __init__(self, path: str, sync: str = "normal") -> None:
        if sync not in ("normal", "full"):
            raise ValueError(f"storeSync: must be normal or full, got {sync!r}")
        os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
        self.path = path
        # autocommit mode: transactions are explicit (BEGIN IMMEDIATE ... COMMIT)
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        mode = self._db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise OSError(f"{path}: cannot switch SQLite to WAL mode (got {mode})")
        self._db.execute(f"PRAGMA synchronous={sync.upper()}")
        self._db.executescript(_SCHEMA)
        os.chmod(path, 0o600)

    def load(self) -> tuple[SchedulerSnapshot, int]:
        out: SchedulerSnapshot = {kind: {} for kind in KINDS}
        top = 0
        for kind, key, revision, data in self._db.execute("SELECT kind, key, revision, data FROM objects"):
            out.setdefault(kind, {})[key] = json.loads(data)
            top = max(top, revision)
        row = self._db.execute("SELECT value FROM meta WHERE name = 'revision'").fetchone()
        return out, max(top, int(row[0]) if row else 0)

    def apply(self, changes: Sequence[Change]) -> None:
        """One transaction. The revision lives in the rows written; a transaction that deletes
        records it in `meta` too, so that a revision is never handed out twice."""
        if not changes:
            return
        db = self._db
        if len(changes) == 1 and isinstance(changes[0], SchedulerPut):  # the common case: one statement,
            c = changes[0]                                      # its own implicit transaction
            db.execute(_UPSERT, (c.kind, c.key, c.revision, c.data))
            return
        db.execute("BEGIN IMMEDIATE")
        try:
            for change in changes:
                if isinstance(change, SchedulerPut):
                    db.execute(_UPSERT, (change.kind, change.key, change.revision, change.data))
                else:
                    db.execute("DELETE FROM objects WHERE kind = ? AND key = ?", (change.kind, change.key))
            if any(isinstance(c, Delete) for c in changes):
                db.execute("INSERT OR REPLACE INTO meta VALUES ('revision', ?)",
                           (max(c.revision for c in changes),))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def apply_many(self, batch: Sequence[Sequence[Change]]) -> list[BaseException | None]:
        """Each change its own transaction, in order; the error of each (None: committed).
        Runs of single-object puts go through one executemany in autocommit mode: still one
        implicit transaction per row, but one call into sqlite3 for the whole run."""
        out: list[BaseException | None] = []
        i = 0
        while i < len(batch):
            j = i
            while j < len(batch) and len(batch[j]) == 1 and isinstance(batch[j][0], SchedulerPut):
                j += 1
            if j - i > 1:
                rows = [(c.kind, c.key, c.revision, c.data) for changes in batch[i:j] for c in changes
                        if isinstance(c, SchedulerPut)]
                try:
                    self._db.executemany(_UPSERT, rows)
                    out += [None] * (j - i)
                except sqlite3.Error:  # find out which: one at a time (rows already in stay in)
                    out += [_error_of(self.apply, changes) for changes in batch[i:j]]
                i = j
            else:
                out.append(_error_of(self.apply, batch[i]))
                i += 1
        return out

    def close(self) -> None:
        self._db.close()


def _error_of(apply: Callable[[Sequence[Change]], None], changes: Sequence[Change]) -> BaseException | None:
    try:
        apply(changes)
    except Exception as e:  # noqa: BLE001 - the caller gets each transaction's error
        return e
    return None


class SchedulerMemoryStore:
    """A SchedulerStore that keeps nothing on disk (unit tests, the benchmark's store-less baseline)."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, str]] = {kind: {} for kind in KINDS}
        self.revision = 0
        self.transactions = 0

    def load(self) -> tuple[SchedulerSnapshot, int]:
        return {k: {key: json.loads(v) for key, v in b.items()} for k, b in self.objects.items()}, self.revision

    def apply(self, changes: Sequence[Change]) -> None:
        for c in changes:
            bucket = self.objects.setdefault(c.kind, {})
            if isinstance(c, SchedulerPut):
                bucket[c.key] = c.data  # decoded by load(): the writer thread stays cheap
            else:
                bucket.pop(c.key, None)
            self.revision = max(self.revision, c.revision)
        self.transactions += 1

    def apply_many(self, batch: Sequence[Sequence[Change]]) -> list[BaseException | None]:
        return [_error_of(self.apply, changes) for changes in batch]

    def close(self) -> None:
        pass


def encode(obj: Object) -> str:
    """JSON for the store, encoded on the caller's thread: the writer thread never reads the
    live objects, which the event loop keeps changing."""
    return json.dumps(obj, separators=(",", ":"))


class Revisions:
    """What both async stores share: resourceVersions handed out in order, writes queued during
    one turn of the event loop and handed to the writer together (`_handoff`), each still its
    own transaction, and futures that end when their transaction is committed."""

    def __init__(self) -> None:
        self.revision = 0
        self.handoffs = 0
        self._queue: list[tuple[list[Change], asyncio.Future[None]]] = []
        self._outstanding: set[asyncio.Future[None]] = set()

    def next_revision(self) -> int:
        self.revision += 1
        return self.revision

    def put(self, kind: str, key: str, obj: Object) -> asyncio.Future[None]:
        """Stamp obj's resourceVersion and queue its write; the future ends when it is on disk."""
        rev = self.next_revision()
        obj.setdefault("metadata", {})["resourceVersion"] = str(rev)
        return self.submit([SchedulerPut(kind, key, encode(obj), rev)])

    def delete(self, kind: str, key: str) -> asyncio.Future[None]:
        return self.submit([Delete(kind, key, self.next_revision())])

    def submit(self, changes: Sequence[Change]) -> asyncio.Future[None]:
        """Queue one transaction; the future ends when it is committed (or raises its error)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        fut.add_done_callback(self._settled)
        self._outstanding.add(fut)
        if not self._queue:
            loop.call_soon(self._handoff, loop)
        self._queue.append((list(changes), fut))
        return fut

    def _settled(self, fut: asyncio.Future[None]) -> None:
        self._outstanding.discard(fut)
        if not fut.cancelled():
            fut.exception()  # logged by the writer; a caller that does not await it is fine

    def _handoff(self, loop: asyncio.AbstractEventLoop) -> None:
        raise NotImplementedError

    async def start(self) -> None:
        """Start the writer (after load)."""

    async def flush(self) -> None:
        """Wait for every queued write."""
        while self._outstanding:
            await asyncio.gather(*list(self._outstanding), return_exceptions=True)


class AsyncStore(Revisions):
    """Any SchedulerStore, its writes on one thread of this process (tests use it with a
    SchedulerMemoryStore; the scheduler runs SQLite in a process of its own instead, see writer.py
    for why)."""

    def __init__(self, store: SchedulerStore) -> None:
        super().__init__()
        self.store = store
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store-writer")

    def load(self) -> SchedulerSnapshot:
        """Read everything (once, at start, before any write)."""
        snapshot, self.revision = self.store.load()
        return snapshot

    def _handoff(self, loop: asyncio.AbstractEventLoop) -> None:
        batch, self._queue = self._queue, []
        self.handoffs += 1
        work = self._executor.submit(self._apply_all, [changes for changes, _ in batch])
        work.add_done_callback(lambda w: loop.call_soon_threadsafe(self._resolve, batch, w))

    def _apply_all(self, batch: list[list[Change]]) -> list[BaseException | None]:
        out = self.store.apply_many(batch)
        for changes, err in zip(batch, out, strict=False):
            if err is not None:
                log.error("store_write_failed", error=repr(err), changes=[f"{c.kind}/{c.key}" for c in changes])
        return out

    @staticmethod
    def _resolve(batch: list[tuple[list[Change], asyncio.Future[None]]],
                 work: Future[list[BaseException | None]]) -> None:
        try:
            results = work.result()
        except BaseException as e:  # noqa: BLE001 - the executor itself failed (shut down)
            results = [e] * len(batch)
        for (_, fut), err in zip(batch, results, strict=False):
            if fut.done():
                continue
            if err is None:
                fut.set_result(None)
            else:
                fut.set_exception(err)

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        self.store.close()

    async def aclose(self) -> None:
        await self.flush()
        self.close()

