"""The committed state both backends serve reads and watches from, in memory.

The latest version of every key (Keyspace), the events of recent revisions (History), the watchers
(PrefixWaiters), the revision and the compacted revision. A backend calls `publish` once revisions are
durable; until then nothing here shows them. Reads at an old revision are rebuilt from the history
when it reaches back that far, else asked of `older` (the SQLite log); the in-memory backend keeps
all history since the last compaction, so it never needs `older`.
"""

from __future__ import annotations

import heapq
from collections.abc import AsyncIterator, Iterator, Sequence
from itertools import islice
from typing import Protocol

from nodeagent.cluster.storage.history import History
from nodeagent.cluster.storage.interface import (
    Compacted,
    Event,
    FutureRevision,
    KeyValue,
    RangeResult,
    StoreClosed,
    StoreError,
)
from nodeagent.cluster.storage.keyspace import Keyspace, bounds
from nodeagent.cluster.storage.watch import PrefixWaiters, Watch


class OlderReads(Protocol):
    """Reads of revisions older than the history holds (the SQLite log)."""

    async def range_at(self, lo: str, hi: str | None, revision: int, limit: int) -> tuple[list[KeyValue], int]:
        """The live kvs of [lo, hi) at `revision` (at most `limit`, 0: all) and how many there are."""
        ...

    async def batches(self, start: int, stop: int) -> Sequence[tuple[Event, ...]]:
        """The events of revisions [start, stop), one tuple per revision."""
        ...


class Mvcc:
    def __init__(self, revision: int = 0, compacted: int = 0, history_size: int | None = None,
                 older: OlderReads | None = None) -> None:
        self.keyspace = Keyspace()
        self._history = History(revision + 1)
        self.hub = PrefixWaiters()
        self._revision = revision
        self._compacted = compacted
        self._history_size = history_size  # None: keep everything since the last compaction
        self._older = older
        self._closed = False

    # -- what watchers read (watch.Source)

    @property
    def revision(self) -> int:
        return self._revision

    @property
    def compacted_revision(self) -> int:
        return self._compacted

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def history(self) -> History:
        return self._history

    async def older_batches(self, start: int, stop: int) -> Sequence[tuple[Event, ...]]:
        if self._older is None:
            raise AssertionError(f"revision {start} is older than the history and there is no log")
        out = await self._older.batches(start, stop)
        if len(out) != stop - start:
            raise StoreError(f"the log lacks revisions in [{start}, {stop})")
        return out

    # -- state changes

    def publish(self, batches: Sequence[tuple[Event, ...]]) -> None:
        """The next len(batches) revisions are durable: show them to readers and watchers."""
        first = self._revision + 1
        keyspace, history = self.keyspace, self._history
        for events in batches:
            self._revision += 1
            history.append(self._revision, events)
            for ev in events:
                if ev.type == "PUT":
                    keyspace.put(ev.kv)
                else:
                    keyspace.delete(ev.kv.key)
        if self._history_size is not None:
            history.trim(self._history_size)
        self.hub.notify(first, batches)

    def check_compact(self, revision: int) -> None:
        """etcd's rules: a revision already compacted is Compacted, one not yet written FutureRevision."""
        if revision <= self._compacted:
            raise Compacted(revision, self._compacted)
        if revision > self._revision:
            raise FutureRevision(revision, self._revision)

    def compact(self, revision: int) -> None:
        self.check_compact(revision)
        self._compacted = revision
        self._history.drop_through(revision)

    def close(self) -> None:
        self._closed = True
        self.hub.close()

    # -- reads

    def check_open(self) -> None:
        if self._closed:
            raise StoreClosed()

    def _check_read(self, revision: int) -> int:
        self.check_open()
        if revision < 0:
            raise ValueError(f"revision: must be >= 0, got {revision}")
        if revision == 0:
            return self._revision
        if revision > self._revision:
            raise FutureRevision(revision, self._revision)
        if revision < self._compacted:
            raise Compacted(revision, self._compacted)
        return revision

    async def get(self, key: str, revision: int = 0) -> tuple[KeyValue | None, int]:
        rev = self._check_read(revision)
        if rev == self._revision:
            return self.keyspace.get(key), rev
        if self._history.covers(rev):
            changed = self._history.changed_since(rev, key.__eq__)
            return (changed[key] if key in changed else self.keyspace.get(key)), rev
        assert self._older is not None
        kvs, _ = await self._older.range_at(key, key + "\0", rev, 1)
        return (kvs[0] if kvs else None), rev

    async def range(self, prefix: str, revision: int = 0, limit: int = 0, start_key: str = "") -> RangeResult:
        rev = self._check_read(revision)
        if limit < 0:
            raise ValueError(f"limit: must be >= 0, got {limit}")
        lo, hi = bounds(prefix, start_key)
        if hi is not None and lo >= hi:
            return RangeResult((), rev, False, 0)
        keyspace = self.keyspace
        if rev == self._revision:
            count = keyspace.count(lo, hi)
            kvs = keyspace.first(lo, hi, limit) if count else []  # admission lists empty kinds on every create
            return RangeResult(tuple(kvs), rev, len(kvs) < count, count)
        if not self._history.covers(rev):
            assert self._older is not None
            old, count = await self._older.range_at(lo, hi, rev, limit)
            return RangeResult(tuple(old), rev, len(old) < count, count)
        changed = self._history.changed_since(rev, lambda k: k >= lo and (hi is None or k < hi))
        count = keyspace.count(lo, hi)
        for key, then in changed.items():
            count += (then is not None) - (keyspace.get(key) is not None)
        kvs = _merge(keyspace.iter(lo, hi), changed, limit)
        return RangeResult(tuple(kvs), rev, len(kvs) < count, count)

    def watch(self, prefix: str, start_revision: int) -> AsyncIterator[Event]:
        self.check_open()
        if start_revision < 0:
            raise ValueError(f"start_revision: must be >= 0, got {start_revision}")
        start = start_revision or self._revision + 1
        if start <= self._compacted:
            raise Compacted(start, self._compacted)
        return Watch(self, self.hub, prefix, start)


def _merge(now: Iterator[KeyValue], changed: dict[str, KeyValue | None], limit: int) -> list[KeyValue]:
    """The range as it was: the live kvs not written since, and the written keys as they were."""
    then = sorted((kv for kv in changed.values() if kv is not None), key=lambda kv: kv.key)
    kept = (kv for kv in now if kv.key not in changed)
    merged = heapq.merge(kept, then, key=lambda kv: kv.key)
    return list(islice(merged, limit)) if limit else list(merged)
