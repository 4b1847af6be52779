"""An in-memory Store (cluster/storage/interface.py) for the registry's and the API's tests.

It keeps the whole history, so reads at old revisions, watches from any revision and compaction
behave as the contract says; the storage branch's backends are tested against the same contract
by their own conformance tests. Durability is not modelled (nothing here survives the process).
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import AsyncIterator, Sequence

from nodeagent.cluster.storage.interface import (
    Compacted,
    Compare,
    DeleteKey,
    Event,
    FutureRevision,
    Get,
    KeyValue,
    Op,
    Put,
    RangeResult,
    StoreError,
    TxnResult,
)


class MemoryStore:
    def __init__(self) -> None:
        self._rev = 1  # etcd starts at 1
        self._compacted = 0
        self._latest: dict[str, KeyValue] = {}
        self._events: list[Event] = []
        self._revs: list[int] = []
        self._cond = asyncio.Condition()
        self.closed = False
        self.fail_next = False  # a test makes the next txn fail as a broken disk would

    @property
    def revision(self) -> int:
        return self._rev

    @property
    def compacted_revision(self) -> int:
        return self._compacted

    def _state_at(self, revision: int) -> dict[str, KeyValue]:
        if revision == 0 or revision >= self._rev:
            return self._latest
        if revision <= self._compacted:
            raise Compacted(revision, self._compacted)
        state = dict(self._latest)
        for ev in reversed(self._events):
            if ev.kv.mod_revision <= revision:
                break
            if ev.prev_kv is None:
                state.pop(ev.kv.key, None)
            else:
                state[ev.kv.key] = ev.prev_kv
        return state

    def _check(self, revision: int) -> None:
        if self.closed:
            raise StoreError("store closed")
        if revision > self._rev:
            raise FutureRevision(revision, self._rev)

    async def get(self, key: str, *, revision: int = 0) -> tuple[KeyValue | None, int]:
        self._check(revision)
        return self._state_at(revision).get(key), revision or self._rev

    async def range(self, prefix: str, *, revision: int = 0, limit: int = 0, start_key: str = "") -> RangeResult:
        self._check(revision)
        state = self._state_at(revision)
        keys = sorted(k for k in state if k.startswith(prefix) and k >= start_key)
        chosen = keys[:limit] if limit else keys
        return RangeResult(tuple(state[k] for k in chosen), revision or self._rev, len(chosen) < len(keys), len(keys))

    def _compare(self, c: Compare) -> bool:
        kv = self._latest.get(c.key)
        if c.target == "value":
            have: int | bytes = kv.value if kv else b""
        else:
            have = getattr(kv, c.target) if kv else 0
        want = c.value
        return {"=": have == want, "!=": have != want, "<": have < want, ">": have > want}[c.result]  # type: ignore[operator]

    async def txn(self, compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op] = ()) -> TxnResult:
        self._check(0)
        if self.fail_next:
            self.fail_next = False
            raise StoreError("disk I/O error")
        ok = all(self._compare(c) for c in compares)
        ops = success if ok else failure
        writes = any(isinstance(o, (Put, DeleteKey)) for o in ops)
        rev = self._rev + 1 if writes else self._rev
        responses: list[KeyValue | None] = []
        for op in ops:
            prev = self._latest.get(op.key)
            responses.append(prev)
            if isinstance(op, Put):
                kv = KeyValue(op.key, op.value, prev.create_revision if prev else rev, rev, prev.version + 1 if prev else 1)
                self._latest[op.key] = kv
                self._append(Event("PUT", kv, prev))
            elif isinstance(op, DeleteKey) and prev is not None:
                del self._latest[op.key]
                self._append(Event("DELETE", KeyValue(op.key, b"", 0, rev, 0), prev))
            elif isinstance(op, Get):
                pass
        if writes:
            self._rev = rev
            async with self._cond:
                self._cond.notify_all()
        return TxnResult(ok, self._rev, tuple(responses))

    def _append(self, ev: Event) -> None:
        self._events.append(ev)
        self._revs.append(ev.kv.mod_revision)

    async def watch(self, prefix: str, start_revision: int) -> AsyncIterator[Event]:  # type: ignore[override]
        if start_revision <= self._compacted:
            raise Compacted(start_revision, self._compacted)
        pos = bisect.bisect_left(self._revs, start_revision)
        while not self.closed:
            while pos < len(self._events):
                ev = self._events[pos]
                pos += 1
                if ev.kv.key.startswith(prefix):
                    yield ev
            async with self._cond:
                if pos >= len(self._events) and not self.closed:
                    await self._cond.wait()

    async def compact(self, revision: int) -> None:
        if revision <= self._compacted:
            return
        self._compacted = revision  # the history stays in memory; reads and watches below it are refused

    async def close(self) -> None:
        self.closed = True
        async with self._cond:
            self._cond.notify_all()
