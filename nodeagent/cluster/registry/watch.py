"""Watch fan-out: one store watch per resource, each change decoded once for every watcher.

A WatchHub follows `store.watch(prefix)` from the revision it started at and keeps a ring of recent
changes, so a watcher resuming from any revision the ring still holds is served from memory; an
older revision gets a watch of its own on the store (which answers Compacted, the API's 410
Expired, when it is too old). Each watcher has a filter (namespace, name, label and field
selectors) applied to both sides of a change, as kube-apiserver's cacher does: an object leaving a
watcher's selection is DELETED for it (its previous state at the new revision), one entering it is
ADDED. A Change caches its encodings (`encoded`), so the HTTP layer serializes each event once per
output format, not once per watcher, and watchers with equal filters share the item made for a
change. A watcher that falls more than `max_queue` events behind is closed (the client re-watches),
so one slow client holds no memory. Only the newest `HOT` changes of the ring keep their decoded
objects and encodings; older ones keep the stored bytes and decode again for a watcher resuming
that far back. With 10,000 pods a ring of decoded pods (~9 KB of Python objects each, against ~4 KB
of bytes) was ~35 MiB of the server's RSS, nearly all of it versions nobody would read again
(bench/README.md).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncIterator, Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Literal

import structlog

from nodeagent.cluster.registry import errors
from nodeagent.cluster.storage.interface import Compacted, Event, Store, StoreError

log = structlog.get_logger(__name__)

Obj = dict[str, Any]
EventType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"]
Decode = Callable[[bytes, int], Obj]
RING = 4096
HOT = 256  # the newest changes of a ring that keep their decoded objects
MAX_QUEUE = 10_000


class Change:
    """One store event, decoded lazily and at most once (new state, previous state)."""

    __slots__ = ("_decode", "_event", "_new", "_prev", "encoded", "key", "revision")

    def __init__(self, event: Event, decode: Decode) -> None:
        self._event, self._decode = event, decode
        self.key = event.kv.key
        self.revision = event.kv.mod_revision
        self._new: Obj | None = None
        self._prev: Obj | None = None
        self.encoded: dict[Hashable, bytes] = {}

    def release(self) -> None:
        """Forget the decoded objects and encodings (the watchers given them keep theirs); they
        are made again from the bytes if asked for."""
        self._new = self._prev = None
        self.encoded = {}

    @property
    def deleted(self) -> bool:
        return self._event.type == "DELETE"

    @property
    def new(self) -> Obj | None:
        """The object after a PUT (None for a DELETE)."""
        if self._event.type == "DELETE":
            return None
        if self._new is None:
            self._new = self._decode(self._event.kv.value, self.revision)
        return self._new

    @property
    def prev(self) -> Obj | None:
        """The object before the change, at this change's revision (what DELETED carries)."""
        prev = self._event.prev_kv
        if prev is None:
            return None
        if self._prev is None:
            self._prev = self._decode(prev.value, self.revision)
        return self._prev


@dataclass(frozen=True, slots=True)
class WatchItem:
    type: EventType
    object: Obj
    change: Change | None = None  # None for synthetic events (initial state, bookmarks, errors)


Selector = Callable[[Obj], bool]


@dataclass(frozen=True)
class WatchFilter:
    """Which objects one watcher sees: a key prefix (namespace, or one object's key) and a predicate."""

    key_prefix: str
    exact_key: str = ""
    predicate: Selector | None = None

    def _ok(self, key: str, obj: Obj | None) -> bool:
        if obj is None:
            return False
        if self.exact_key and key != self.exact_key:
            return False
        if not key.startswith(self.key_prefix):
            return False
        return self.predicate is None or self.predicate(obj)

    def item(self, change: Change) -> WatchItem | None:
        if self.exact_key and change.key != self.exact_key:
            return None
        if not change.key.startswith(self.key_prefix):
            return None
        if change.deleted:
            prev = change.prev
            return WatchItem("DELETED", prev, change) if prev is not None and self._ok(change.key, prev) else None
        new = change.new
        assert new is not None
        new_ok = self._ok(change.key, new)
        if self.predicate is None:
            return WatchItem("MODIFIED" if change._event.prev_kv is not None else "ADDED", new, change) \
                if new_ok else None
        old_ok = self._ok(change.key, change.prev)
        if new_ok:
            return WatchItem("MODIFIED" if old_ok else "ADDED", new, change)
        if old_ok:
            prev = change.prev
            assert prev is not None
            return WatchItem("DELETED", prev, change)
        return None


@dataclass(eq=False)
class Subscription:
    """One watcher's queue. `next()` gives the next item, None on timeout; closed -> StopAsyncIteration."""

    filter: WatchFilter
    after: int
    max_queue: int = MAX_QUEUE
    queue: asyncio.Queue[WatchItem | None] = field(default_factory=asyncio.Queue)
    last_revision: int = 0
    closed: bool = False
    error: errors.StatusError | None = None
    on_close: Callable[[Subscription], None] | None = None
    progress: Callable[[], int] | None = None  # the source's latest processed revision

    def offer(self, change: Change, shared: dict[WatchFilter, WatchItem | None] | None = None) -> None:
        """Queue what `change` is for this watcher; `shared` holds the items already made for this
        change by filter, so watchers with equal filters (no predicate) share one."""
        if self.closed or change.revision <= self.after:
            return
        flt = self.filter
        if shared is None or flt.predicate is not None:
            item = flt.item(change)
        elif flt in shared:
            item = shared[flt]
        else:
            item = shared[flt] = flt.item(change)
        if item is None:
            return
        if self.queue.qsize() >= self.max_queue:
            log.warning("watch_overflow", prefix=self.filter.key_prefix, queued=self.queue.qsize())
            self.close()
            return
        self.queue.put_nowait(item)

    def push(self, item: WatchItem) -> None:
        if not self.closed:
            self.queue.put_nowait(item)

    def fail(self, error: errors.StatusError) -> None:
        self.error = error
        self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.queue.put_nowait(None)
            if self.on_close is not None:
                self.on_close(self)

    async def next(self, wait: float | None) -> WatchItem | None:
        """The next item; None when `wait` seconds passed first; StopAsyncIteration once closed."""
        if not self.queue.empty():  # no timer to arm and cancel
            item = self.queue.get_nowait()
        else:
            try:
                async with asyncio.timeout(wait):
                    item = await self.queue.get()
            except TimeoutError:
                return None
        if item is None:
            self.queue.put_nowait(None)  # stay closed for later calls
            raise StopAsyncIteration
        if item.change is not None:
            self.last_revision = max(self.last_revision, item.change.revision)
        return item

    def bookmark_revision(self) -> int:
        """A revision every change up to which this watcher has been given (when its queue is empty)."""
        rev = max(self.after, self.last_revision)
        if self.progress is not None and self.queue.empty():
            rev = max(rev, self.progress())
        return rev


class WatchHub:
    """The shared watch of one resource (one GenericStore): started lazily, restarted on failure."""

    def __init__(self, store: Store, prefix: str, decode: Decode, *, ring: int = RING,
                 max_queue: int = MAX_QUEUE, hot: int = HOT) -> None:
        self.store, self.prefix, self.decode = store, prefix, decode
        self.ring: collections.deque[Change] = collections.deque(maxlen=ring)
        self.hot = min(hot, ring)
        self.max_queue = max_queue
        self.subs: set[Subscription] = set()
        self.floor = 0  # every change after this revision is in the ring or still to come
        self.last = 0
        self._task: asyncio.Task[None] | None = None
        self._direct: set[asyncio.Task[None]] = set()

    def _ensure(self) -> None:
        """Start following the store (at its current revision) unless already following."""
        if self._task is None or self._task.done():
            self.ring.clear()
            self.floor = self.last = self.store.revision
            self._task = asyncio.create_task(self._run(self.floor), name=f"watch-hub:{self.prefix}")

    async def _run(self, start: int) -> None:
        watch = self.store.watch(self.prefix, start + 1)
        try:
            async for ev in watch:
                change = Change(ev, self.decode)
                ring = self.ring
                if len(ring) == ring.maxlen:
                    self.floor = ring[0].revision
                if len(ring) >= self.hot:
                    ring[-self.hot].release()  # it leaves the hot end
                ring.append(change)
                self.last = change.revision
                shared: dict[WatchFilter, WatchItem | None] = {}
                for sub in list(self.subs):
                    sub.offer(change, shared)
        except StoreError as e:
            log.warning("watch_hub_failed", prefix=self.prefix, error=str(e))
            for sub in list(self.subs):
                sub.fail(errors.internal(f"watch failed: {e}"))
        finally:
            with contextlib.suppress(Exception):
                await watch.aclose()  # type: ignore[attr-defined]

    def subscribe(self, after: int, flt: WatchFilter) -> Subscription:
        """Changes after revision `after` that pass `flt`. Raises StatusError (410, 504) up front."""
        current = self.store.revision
        if after > current:
            raise errors.too_large(after, current)
        if after < self.store.compacted_revision:
            raise errors.too_old(after, self.store.compacted_revision)
        self._ensure()
        sub = Subscription(flt, after, self.max_queue, last_revision=after)
        if after >= self.floor:
            for change in self.ring:
                sub.offer(change)
            sub.on_close = self.subs.discard
            sub.progress = lambda: self.last
            self.subs.add(sub)
            return sub
        task = asyncio.create_task(self._direct_run(sub), name=f"watch:{self.prefix}@{after}")
        self._direct.add(task)
        task.add_done_callback(self._direct.discard)
        def stop(_sub: Subscription) -> None:
            if not task.done():
                task.cancel()

        sub.on_close = stop
        return sub

    async def _direct_run(self, sub: Subscription) -> None:
        """A watcher older than the ring: its own store watch, until it closes."""
        watch: AsyncIterator[Event] = self.store.watch(self.prefix, sub.after + 1)
        try:
            async for ev in watch:
                sub.offer(Change(ev, self.decode))
                if sub.closed:
                    break
        except StoreError as e:
            if isinstance(e, Compacted):
                sub.fail(errors.too_old(e.requested, e.compacted))
            else:
                sub.fail(errors.internal(f"watch failed: {e}"))
        finally:
            with contextlib.suppress(Exception):
                await watch.aclose()  # type: ignore[attr-defined]

    async def close(self) -> None:
        for sub in list(self.subs):
            sub.close()
        tasks = [t for t in (self._task, *self._direct) if t is not None]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
