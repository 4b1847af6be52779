"""Watches: cursors over the shared event history, woken by commits.

A watcher holds no buffer of its own: it is a position (revision, and how many events of that
revision it has yielded) in the store's history, so writers never wait for a watcher and a slow
watcher costs no memory. A watcher that falls behind what memory holds (the SQLite store keeps a
ring of recent revisions) reads the older revisions from the log, in chunks, and rejoins the ring;
a compaction past its position ends it with Compacted, as etcd cancels a compacted watcher (the
API answers 410 Gone and the client re-lists).

Waiting watchers are grouped by prefix: a commit wakes only the groups it has a matching event for,
and tells them the first matching revision, so a woken watcher skips the revisions in between (they
held nothing for it) instead of scanning them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol

from nodeagent.cluster.storage.history import History
from nodeagent.cluster.storage.interface import Compacted, Event, StoreClosed

# revisions read from the log at a time by a watcher behind the ring (kine reads 500 rows at a time)
CHUNK = 500


class Source(Protocol):
    """What a watcher reads: the store's committed state."""

    @property
    def revision(self) -> int: ...

    @property
    def compacted_revision(self) -> int: ...

    @property
    def closed(self) -> bool: ...

    @property
    def history(self) -> History: ...

    async def older_batches(self, start: int, stop: int) -> Sequence[tuple[Event, ...]]:
        """The events of revisions [start, stop), older than the history holds, one tuple each."""
        ...


class _Group:
    __slots__ = ("event", "revision")

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.revision = 0


class PrefixWaiters:
    """The waiting watchers, grouped by prefix; a commit wakes the groups it has events for."""

    def __init__(self) -> None:
        self._waiting: dict[str, _Group] = {}

    async def wait(self, prefix: str) -> int:
        """Wait for a commit with an event under `prefix`; its first such revision."""
        group = self._waiting.get(prefix)
        if group is None:
            group = self._waiting[prefix] = _Group()
        await group.event.wait()
        return group.revision

    def notify(self, first: int, batches: Sequence[tuple[Event, ...]]) -> None:
        """Revisions first, first+1, ... were committed with these events."""
        if not self._waiting:
            return
        for prefix, group in list(self._waiting.items()):
            rev = _first_match(prefix, first, batches)
            if rev:
                group.revision = rev
                group.event.set()
                del self._waiting[prefix]

    def close(self) -> None:
        for group in self._waiting.values():
            group.event.set()
        self._waiting.clear()


def _first_match(prefix: str, first: int, batches: Sequence[tuple[Event, ...]]) -> int:
    for i, events in enumerate(batches):
        for ev in events:
            if ev.kv.key.startswith(prefix):
                return first + i
    return 0


class Watch:
    """Every event from revision `start` on under `prefix`, in order, each once; then new commits.

    An async iterator, not an async generator, so that cancelling a pending __anext__ (a timeout
    for a bookmark, say) keeps the watch where it was: the next __anext__ goes on from there."""

    def __init__(self, source: Source, hub: PrefixWaiters, prefix: str, start: int) -> None:
        self._source = source
        self._hub = hub
        self._prefix = prefix
        self._rev = start  # the revision being delivered, or the next to load
        self._events: tuple[Event, ...] | None = None  # the batch of _rev, once loaded
        self._offset = 0  # events of that batch already looked at
        self._older: Sequence[tuple[Event, ...]] = ()  # a chunk read from the log, from _older_first on
        self._older_first = 0
        self._closed = False

    def __aiter__(self) -> Watch:
        return self

    async def __anext__(self) -> Event:
        prefix = self._prefix
        while True:
            if self._closed:
                raise StopAsyncIteration
            events = self._events
            if events is not None:
                i, n = self._offset, len(events)
                while i < n:
                    ev = events[i]
                    i += 1
                    if ev.kv.key.startswith(prefix):
                        if i < n:
                            self._offset = i
                        else:
                            self._events, self._rev, self._offset = None, self._rev + 1, 0
                        return ev
                self._events, self._rev, self._offset = None, self._rev + 1, 0
            await self._load()

    async def _load(self) -> None:
        """Load the batch of _rev, or wait for it to be committed."""
        source, rev = self._source, self._rev
        if source.closed:
            raise StoreClosed()
        if rev <= source.compacted_revision:
            raise Compacted(rev, source.compacted_revision)
        head = source.revision
        if rev > head:
            matched = await self._hub.wait(self._prefix)
            self._rev = max(self._rev, matched)
            return
        history = source.history
        if rev >= history.first:
            self._events = history.batch(rev)
        elif self._older_first <= rev < self._older_first + len(self._older):
            self._events = self._older[rev - self._older_first]
        else:  # behind the ring: read a chunk from the log, then look again (the store may have moved on)
            self._older = await source.older_batches(rev, min(history.first, rev + CHUNK, head + 1))
            self._older_first = rev
        self._offset = 0

    async def aclose(self) -> None:
        """Stop the watch: __anext__ raises StopAsyncIteration from now on."""
        self._closed = True
        self._events, self._older = None, ()
