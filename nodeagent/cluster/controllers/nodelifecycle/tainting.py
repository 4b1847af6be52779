"""The per-zone rate-limited queue of nodes to taint NoExecute (RateLimitedTimedQueue over a
flowcontrol token bucket with burst 1), clock injected. In-memory state of the loop."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class TokenBucket:
    qps: float
    burst: int = 1
    tokens: float = 1.0
    last: float | None = None

    def try_accept(self, now: float) -> bool:
        if self.qps <= 0:
            return False  # NewFakeNeverRateLimiter
        if self.last is not None:
            self.tokens = min(float(self.burst), self.tokens + (now - self.last) * self.qps)
        self.last = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False


@dataclass(slots=True)
class ZoneQueue:
    bucket: TokenBucket
    queue: dict[str, float] = field(default_factory=dict)  # node name -> process at

    def add(self, node: str, now: float) -> bool:
        if node in self.queue:
            return False
        self.queue[node] = now
        return True

    def remove(self, node: str) -> bool:
        return self.queue.pop(node, None) is not None

    def swap_rate(self, qps: float, now: float) -> None:
        """SwapLimiter: a new bucket; drained when the old one was empty (burst 1)."""
        if qps == self.bucket.qps:
            return
        empty = not TokenBucket(self.bucket.qps, self.bucket.burst, self.bucket.tokens, self.bucket.last).try_accept(
            now
        )
        self.bucket = TokenBucket(qps)
        if empty and qps > 0:
            self.bucket.try_accept(now)

    def due(self, now: float) -> list[str]:
        """Try: the nodes to taint now, in queue order, while the bucket has tokens."""
        out: list[str] = []
        for node, at in sorted(self.queue.items(), key=lambda kv: kv[1]):
            if at > now or not self.bucket.try_accept(now):
                break
            out.append(node)
        return out
