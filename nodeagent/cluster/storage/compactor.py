"""Periodic compaction, the way kube-apiserver runs it against etcd (every 5 minutes by default).

Each period compacts to the revision seen at the previous period, so at least one period of history
is always kept: a watcher that reconnects within it resumes from its resourceVersion without a 410.
The composition root owns the task (`run`); `tick` is one period, tested with a fake clock.
"""

from __future__ import annotations

import asyncio

import structlog

from nodeagent.cluster.storage.interface import Compacted, Store, StoreError
from nodeagent.core.clock import Clock, SystemClock

log = structlog.get_logger(__name__)

INTERVAL = 300.0  # kube-apiserver's --etcd-compaction-interval default


class Compactor:
    def __init__(self, store: Store, interval: float = INTERVAL, clock: Clock | None = None) -> None:
        if interval <= 0:
            raise ValueError(f"interval: must be > 0 seconds, got {interval}")
        self._store = store
        self._interval = interval
        self._clock = clock or SystemClock()
        self._next = self._clock.now() + interval
        self._seen = 0  # the revision at the previous period

    async def tick(self) -> int | None:
        """If a period has passed: compact to the revision seen a period ago. The revision compacted to."""
        now = self._clock.now()
        if now < self._next:
            return None
        self._next = now + self._interval
        target, self._seen = self._seen, self._store.revision
        if target <= self._store.compacted_revision:
            return None
        try:
            await self._store.compact(target)
        except Compacted:  # someone compacted further meanwhile
            return None
        return target

    async def run(self) -> None:
        """Tick every period until cancelled; a failed compaction is logged and tried next period."""
        while True:
            await asyncio.sleep(max(0.0, self._next - self._clock.now()))
            try:
                await self.tick()
            except StoreError as e:
                log.warning("store_compaction_failed", error=str(e))
