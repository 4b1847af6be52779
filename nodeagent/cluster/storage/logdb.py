"""The SQLite revision log: kine's shape, blocking calls (run them off the event loop).

One row per write, as k3s's kine keeps it: the row id is the revision (packed with the write's
index in its transaction, `revision << 20 | i`, because one etcd revision may write several keys),
the key's name, create_revision and version, a deletion flag, the revision of the version it
replaced, and the value. The latest row of a name is its current state (absent if deleted); the
state at revision R is the latest row of each name with id below (R + 1) << 20; an event's prev_kv
is the row of (name, prev_revision). The index on (name, id) serves those lookups.

Durability: WAL with synchronous=FULL, so a commit returns after the WAL is fsynced (survives
power loss, not only SIGKILL). A batch of rows up to MAX_ROWS is one INSERT statement in
autocommit mode (one implicit transaction, one call into SQLite: the GIL is taken back once per
batch, not once per row); a larger batch is BEGIN IMMEDIATE ... COMMIT. Either way a batch is on
disk whole or not at all.

A known limit: if a commit's fsync fails after its frames reached the WAL file, SQLite reports
the failure (the batch's txns fail) and the frames stay invisible; the next successful commit
overwrites them, but should the process die before one, SQLite's recovery at the next open may
find them whole and valid, and the failed batch appears (whole: never half). A disk that is full
fails the write of the frames, before any of this.

Compaction deletes, for the revisions in a range, the versions they superseded and their own
deletion rows (kine deletes superseded and deleted rows up to the compact revision); the latest
version at or below the compact revision of every live key stays, so the state at the compacted
revision can still be read. The compacted revision is kept in `meta` with the same transaction.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from nodeagent.cluster.storage.interface import Compacted, Event, KeyValue, StoreError
from nodeagent.cluster.storage.txn import MAX_WRITES, tombstone

SHIFT = 20
assert 1 << SHIFT == MAX_WRITES
SCHEMA_VERSION = 1
# SQLite binds at most 32766 parameters per statement (SQLITE_MAX_VARIABLE_NUMBER since 3.32)
_COLUMNS = 7
MAX_ROWS = 32766 // _COLUMNS

Row = tuple[int, str, int, int, int, int, bytes]  # id, name, create_revision, version, deleted, prev_revision, value

_SCHEMA = """
CREATE TABLE IF NOT EXISTS log (
    id INTEGER PRIMARY KEY,             -- revision << 20 | index of the write in its transaction
    name TEXT NOT NULL,
    create_revision INTEGER NOT NULL,   -- 0 for a deletion
    version INTEGER NOT NULL,           -- 0 for a deletion
    deleted INTEGER NOT NULL,
    prev_revision INTEGER NOT NULL,     -- mod_revision of the version this write replaced, 0: none
    value BLOB NOT NULL);
CREATE UNIQUE INDEX IF NOT EXISTS log_name_id ON log (name, id);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
"""


def row_id(revision: int, index: int = 0) -> int:
    return revision << SHIFT | index


def revision_of(rowid: int) -> int:
    return rowid >> SHIFT


def rows_of(batches: Iterable[tuple[Event, ...]]) -> list[Row]:
    """The log rows of committed-to-be transactions (each batch one revision's events)."""
    rows: list[Row] = []
    for events in batches:
        for i, ev in enumerate(events):
            kv, prev = ev.kv, ev.prev_kv
            prev_rev = prev.mod_revision if prev is not None else 0
            if ev.type == "PUT":
                rows.append((row_id(kv.mod_revision, i), kv.key, kv.create_revision, kv.version, 0, prev_rev, kv.value))
            else:
                rows.append((row_id(kv.mod_revision, i), kv.key, 0, 0, 1, prev_rev, b""))
    return rows


def describe_failure(e: BaseException) -> tuple[str, bool]:
    """A failed write's message, and whether the log is still as before it and writable (a full
    disk, an I/O error: SQLite rolled the transaction back) rather than unusable (corruption)."""
    return f"{type(e).__name__}: {e}", isinstance(e, sqlite3.OperationalError | OSError)


def _connect(path: str) -> sqlite3.Connection:
    # autocommit mode: transactions are explicit (BEGIN IMMEDIATE ... COMMIT) or one statement
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    mode = db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    if str(mode).lower() != "wal":
        db.close()
        raise StoreError(f"{path}: cannot switch SQLite to WAL mode (got {mode})")
    db.execute("PRAGMA synchronous=FULL")
    return db


def lock(path: str, timeout: float) -> int:
    """Take `<path>.lock` (flock, exclusive): one store per file. Waits up to `timeout` seconds for
    a previous holder (a log writer process finishing the batches it had when its parent died)."""
    os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
    fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                raise StoreError(f"{path}: another store holds {path}.lock") from None
            time.sleep(0.02)


@dataclass(frozen=True, slots=True)
class Snapshot:
    revision: int
    compacted: int
    kvs: list[KeyValue]  # every live key, sorted


def load(path: str) -> Snapshot:
    """Create the log if new; read the revision, the compacted revision and every live key."""
    db = _connect(path)
    try:
        db.executescript(_SCHEMA)
        os.chmod(path, 0o600)
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version == 0:
            db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        elif version != SCHEMA_VERSION:
            raise StoreError(f"{path}: log schema version {version}, this store reads {SCHEMA_VERSION}")
        db.execute("BEGIN")
        try:
            compacted = _compacted(db)
            top = db.execute("SELECT MAX(id) FROM log").fetchone()[0]
            kvs = [KeyValue(name, value, create, revision_of(rowid), version)
                   for name, create, rowid, version, value in db.execute(
                       "SELECT l.name, l.create_revision, l.id, l.version, l.value FROM log l "
                       "JOIN (SELECT MAX(id) AS id FROM log GROUP BY name) m ON l.id = m.id "
                       "WHERE l.deleted = 0 ORDER BY l.name")]
        finally:
            db.execute("COMMIT")
        # a compaction can delete the row of the newest revision (a deletion): the counter never goes back
        return Snapshot(max(revision_of(top or 0), compacted), compacted, kvs)
    finally:
        db.close()


def _compacted(db: sqlite3.Connection) -> int:
    row = db.execute("SELECT value FROM meta WHERE name = 'compacted'").fetchone()
    return int(row[0]) if row else 0


class LogWriter:
    """The one writing connection. Use from one thread at a time."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._db = _connect(path)
        self._insert: dict[int, str] = {}

    def _insert_sql(self, n: int) -> str:
        sql = self._insert.get(n)
        if sql is None:
            sql = "INSERT INTO log VALUES " + ",".join(["(?,?,?,?,?,?,?)"] * n)
            if len(self._insert) < 64:
                self._insert[n] = sql
        return sql

    def append(self, rows: Sequence[Row]) -> None:
        """Write `rows` (one batch: several transactions' rows) in one transaction, durably."""
        if not rows:
            return
        db = self._db
        try:
            if len(rows) <= MAX_ROWS:
                db.execute(self._insert_sql(len(rows)), [v for row in rows for v in row])
            else:
                db.execute("BEGIN IMMEDIATE")
                for i in range(0, len(rows), MAX_ROWS):
                    chunk = rows[i:i + MAX_ROWS]
                    db.execute(self._insert_sql(len(chunk)), [v for row in chunk for v in row])
                db.execute("COMMIT")
        except sqlite3.Error:
            self._rollback()
            # an error reported after the commit reached the log (it happens with some I/O errors)
            # must not fail transactions that are in fact durable: the log is the truth
            if self.top() >= rows[-1][0]:
                return
            raise

    def _rollback(self) -> None:
        if self._db.in_transaction:
            try:
                self._db.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # SQLite has rolled back already (it does on some errors)

    def top(self) -> int:
        return int(self._db.execute("SELECT MAX(id) FROM log").fetchone()[0] or 0)

    def compact(self, lo: int, hi: int) -> int:
        """Compact revisions [lo, hi] (everything below lo is compacted already); rows deleted."""
        db = self._db
        try:
            db.execute("BEGIN IMMEDIATE")
            start, stop = row_id(lo), row_id(hi + 1)
            n = db.execute(
                "DELETE FROM log WHERE id IN (SELECT p.id FROM log n JOIN log p ON p.name = n.name "
                f"AND p.id >= (n.prev_revision << {SHIFT}) AND p.id < ((n.prev_revision + 1) << {SHIFT}) "
                "WHERE n.id >= ? AND n.id < ? AND n.prev_revision > 0)", (start, stop)).rowcount
            n += db.execute("DELETE FROM log WHERE id >= ? AND id < ? AND deleted = 1", (start, stop)).rowcount
            db.execute("INSERT OR REPLACE INTO meta VALUES ('compacted', ?)", (hi,))
            db.execute("COMMIT")
            return n
        except sqlite3.Error:
            self._rollback()
            raise

    def close(self) -> None:
        self._db.close()


_KV_COLUMNS = "l.id, l.name, l.create_revision, l.version, l.deleted, l.value"
_PREV_COLUMNS = "p.id, p.create_revision, p.version, p.value"


class LogReader:
    """A reading connection (WAL: reads never wait for the writer). Use from one thread at a time."""

    def __init__(self, path: str) -> None:
        self._db = _connect(path)
        self._db.execute("PRAGMA query_only=1")

    def _begin(self, revision: int, events: bool) -> None:
        """Open a read transaction that can read the state at `revision`, or (events) the events
        from `revision` on, else Compacted."""
        self._db.execute("BEGIN")
        compacted = _compacted(self._db)
        if revision < compacted or (events and revision == compacted):
            self._db.execute("COMMIT")
            raise Compacted(revision, compacted)

    def range_at(self, lo: str, hi: str | None, revision: int, limit: int) -> tuple[list[KeyValue], int]:
        self._begin(revision, events=False)
        try:
            where = "name >= ?" + (" AND name < ?" if hi is not None else "")
            args: tuple[object, ...] = (lo, hi) if hi is not None else (lo,)
            latest = (f"SELECT l.name, l.create_revision, l.id, l.version, l.value FROM log l JOIN "
                      f"(SELECT MAX(id) AS id FROM log WHERE {where} AND id < ? GROUP BY name) m ON l.id = m.id "
                      "WHERE l.deleted = 0")
            args += (row_id(revision + 1),)
            count = self._db.execute(f"SELECT COUNT(*) FROM ({latest})", args).fetchone()[0]
            sql = latest + " ORDER BY l.name" + (" LIMIT ?" if limit else "")
            rows = self._db.execute(sql, (*args, limit) if limit else args).fetchall()
        finally:
            self._db.execute("COMMIT")
        return [KeyValue(name, value, create, revision_of(rowid), version)
                for name, create, rowid, version, value in rows], int(count)

    def batches(self, start: int, stop: int) -> list[tuple[Event, ...]]:
        """The events of revisions [start, stop) with their prev_kv, one tuple per revision."""
        self._begin(start, events=True)
        try:
            rows = self._db.execute(
                f"SELECT {_KV_COLUMNS}, {_PREV_COLUMNS} FROM log l LEFT JOIN log p ON p.name = l.name "
                f"AND p.id >= (l.prev_revision << {SHIFT}) AND p.id < ((l.prev_revision + 1) << {SHIFT}) "
                "AND l.prev_revision > 0 WHERE l.id >= ? AND l.id < ? ORDER BY l.id",
                (row_id(start), row_id(stop))).fetchall()
        finally:
            self._db.execute("COMMIT")
        out: list[list[Event]] = [[] for _ in range(stop - start)]
        for rowid, name, create, version, deleted, value, pid, pcreate, pversion, pvalue in rows:
            rev = revision_of(rowid)
            prev = KeyValue(name, pvalue, pcreate, revision_of(pid), pversion) if pid is not None else None
            if deleted:
                out[rev - start].append(Event("DELETE", tombstone(name, rev), prev))
            else:
                out[rev - start].append(Event("PUT", KeyValue(name, value, create, rev, version), prev))
        if any(not events for events in out):
            raise StoreError(f"the log lacks revisions in [{start}, {stop})")
        return [tuple(events) for events in out]

    def close(self) -> None:
        self._db.close()
