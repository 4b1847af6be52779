"""The Store in memory: every semantic of the contract, nothing on disk.

For tests and benchmarks of the layers above. A transaction is evaluated and published in one
step (there is nothing to wait for), so it is serializable trivially; all history since the last
compaction stays in memory, so reads at any revision above it and watches from any revision above
it are served from memory. Compact (or run a Compactor) to bound it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from nodeagent.cluster.storage.interface import Compare, Event, KeyValue, Op, RangeResult, TxnResult
from nodeagent.cluster.storage.mvcc import Mvcc
from nodeagent.cluster.storage.txn import check, evaluate


class MemoryStore:
    def __init__(self) -> None:
        self._mvcc = Mvcc()

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

    async def txn(self, compares: Sequence[Compare], success: Sequence[Op],
                  failure: Sequence[Op] = ()) -> TxnResult:
        check(compares, success, failure)
        mvcc = self._mvcc
        mvcc.check_open()
        outcome = evaluate(mvcc.keyspace.get, compares, success, failure, mvcc.revision + 1)
        if outcome.events:
            mvcc.publish((outcome.events,))
        return TxnResult(outcome.succeeded, mvcc.revision, outcome.responses)

    def watch(self, prefix: str, start_revision: int) -> AsyncIterator[Event]:
        return self._mvcc.watch(prefix, start_revision)

    async def compact(self, revision: int) -> None:
        self._mvcc.check_open()
        self._mvcc.compact(revision)

    async def close(self) -> None:
        self._mvcc.close()
