"""client-go's rate-limited work queue (util/workqueue), clock injected.

A key is queued at most once (dedup); a key being processed is never handed to a second worker:
re-added meanwhile it is marked dirty and queued again when its worker calls `done`. `add_after`
holds a key until its time; `add_rate_limited` asks the rate limiter how long, which is
DefaultControllerRateLimiter: the maximum of a per-key exponential back-off (5 ms doubling to
1000 s, reset by `forget`) and an overall token bucket (10 per second, burst 100).

The bookkeeping is synchronous (`add`, `poll`, `done`), so tests drive it with a fake clock; `get`
is the async wait a worker uses, sleeping only until the next delayed key is due.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Hashable

from nodeagent.core.clock import Clock
from nodeagent.core.waits import wait_for

BASE_DELAY, MAX_DELAY = 0.005, 1000.0
BUCKET_QPS, BUCKET_BURST = 10.0, 100


class ExponentialFailureRateLimiter:
    """ItemExponentialFailureRateLimiter: base * 2^failures, capped; `forget` resets a key."""

    def __init__(self, base: float = BASE_DELAY, cap: float = MAX_DELAY) -> None:
        self.base, self.cap = base, cap
        self._failures: dict[Hashable, int] = {}

    def when(self, key: Hashable, now: float) -> float:
        n = self._failures.get(key, 0)
        self._failures[key] = n + 1
        if n >= 64:  # 2^64 overflows upstream's int64 too: it returns the cap
            return self.cap
        return float(min(self.base * 2.0**n, self.cap))

    def forget(self, key: Hashable) -> None:
        self._failures.pop(key, None)

    def num_requeues(self, key: Hashable) -> int:
        return self._failures.get(key, 0)


class BucketRateLimiter:
    """BucketRateLimiter over golang.org/x/time/rate: each call reserves a token; the delay is how
    long until that token exists."""

    def __init__(self, qps: float = BUCKET_QPS, burst: int = BUCKET_BURST) -> None:
        self.qps, self.burst = qps, burst
        self._tokens = float(burst)
        self._last: float | None = None

    def when(self, key: Hashable, now: float) -> float:
        if self._last is not None:
            self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
        self._last = now
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def forget(self, key: Hashable) -> None:
        return None

    def num_requeues(self, key: Hashable) -> int:
        return 0


class DefaultControllerRateLimiter:
    """MaxOfRateLimiter(exponential per key, overall bucket)."""

    def __init__(self) -> None:
        self.per_key = ExponentialFailureRateLimiter()
        self.bucket = BucketRateLimiter()

    def when(self, key: Hashable, now: float) -> float:
        return max(self.per_key.when(key, now), self.bucket.when(key, now))

    def forget(self, key: Hashable) -> None:
        self.per_key.forget(key)

    def num_requeues(self, key: Hashable) -> int:
        return self.per_key.num_requeues(key)


RateLimiter = ExponentialFailureRateLimiter | BucketRateLimiter | DefaultControllerRateLimiter


class WorkQueue:
    def __init__(self, clock: Clock, rate_limiter: RateLimiter | None = None, name: str = "") -> None:
        self.clock, self.name = clock, name
        self.rate_limiter: RateLimiter = rate_limiter or DefaultControllerRateLimiter()
        self._queue: list[Hashable] = []
        self._dirty: set[Hashable] = set()
        self._processing: set[Hashable] = set()
        self._waiting: list[tuple[float, int, Hashable]] = []  # (ready at, seq, key)
        self._waiting_at: dict[Hashable, float] = {}
        self._seq = 0
        self._wake = asyncio.Event()
        self._shut = False

    # ---- adding ----
    def add(self, key: Hashable) -> None:
        if self._shut or key in self._dirty:
            return
        self._dirty.add(key)
        if key in self._processing:
            return
        self._queue.append(key)
        self._wake.set()

    def add_after(self, key: Hashable, delay: float) -> None:
        """Queue `key` once `delay` seconds have passed; an earlier pending time for it wins."""
        if self._shut:
            return
        if delay <= 0:
            self.add(key)
            return
        at = self.clock.now() + delay
        current = self._waiting_at.get(key)
        if current is not None and current <= at:
            return
        self._waiting_at[key] = at
        self._seq += 1
        heapq.heappush(self._waiting, (at, self._seq, key))
        self._wake.set()

    def add_rate_limited(self, key: Hashable) -> None:
        self.add_after(key, self.rate_limiter.when(key, self.clock.now()))

    def forget(self, key: Hashable) -> None:
        self.rate_limiter.forget(key)

    def num_requeues(self, key: Hashable) -> int:
        return self.rate_limiter.num_requeues(key)

    # ---- taking ----
    def _promote(self, now: float) -> None:
        while self._waiting and self._waiting[0][0] <= now:
            at, _, key = heapq.heappop(self._waiting)
            if self._waiting_at.get(key) == at:
                del self._waiting_at[key]
                self.add(key)

    def next_due(self) -> float | None:
        """When the earliest delayed key is due (clock seconds), if any."""
        while self._waiting and self._waiting_at.get(self._waiting[0][2]) != self._waiting[0][0]:
            heapq.heappop(self._waiting)  # superseded by an earlier time
        return self._waiting[0][0] if self._waiting else None

    def poll(self) -> Hashable | None:
        """A key to process now (marked processing until `done`), or None."""
        self._promote(self.clock.now())
        if not self._queue:
            return None
        key = self._queue.pop(0)
        self._processing.add(key)
        self._dirty.discard(key)
        return key

    def done(self, key: Hashable) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            self._queue.append(key)
            self._wake.set()

    async def get(self) -> Hashable | None:
        """Wait for a key; None once shut down."""
        while not self._shut:
            key = self.poll()
            if key is not None:
                return key
            self._wake.clear()
            due = self.next_due()
            timeout = None if due is None else max(0.0, due - self.clock.now())
            try:
                await wait_for(self._wake.wait(), timeout)
            except TimeoutError:
                pass
        return None

    def shutdown(self) -> None:
        self._shut = True
        self._wake.set()

    def __len__(self) -> int:
        return len(self._queue)

    @property
    def processing(self) -> frozenset[Hashable]:
        return frozenset(self._processing)
