"""client-go's EventCorrelator, pure (tools/record/events_cache.go), minus the aggregator. In core
because both daemons record events: the control plane's parts and the agents (as the kubelet,
whose recorder correlates the same way before it writes to the API server).

- Dedupe (eventLogger): an event with the same source, involved object, type, reason and message
  as one recorded before is written as that event again, with count+1, the first timestamp kept
  and lastTimestamp now, so `kubectl describe` shows `(x4 over 2m)` instead of four lines.
- Spam filter (EventSourceObjectSpamFilter): a token bucket per source and involved object, 25
  events of burst, one more every 5 minutes; events beyond it are dropped (a pod failing to
  schedule every 10 s must not write an event every 10 s forever).
The aggregator (10 similar events with different messages combined into one) is left out: our
messages for one object and reason rarely differ.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from nodeagent.core.timefmt import rfc3339

CACHE_SIZE = 4096  # client-go's maxLruCacheEntries
SPAM_BURST = 25  # defaultSpamBurst
SPAM_REFILL_SECONDS = 300.0  # defaultSpamQPS = 1/300

Obj = dict[str, Any]


@dataclass
class _Seen:
    name: str
    count: int
    first: str


@dataclass
class _Bucket:
    tokens: float
    at: float


def event_key(event: Obj) -> tuple[str, ...]:
    """getEventKey: source, involved object (kind, namespace, name, uid, apiVersion, fieldPath), type,
    reason, message."""
    src, ref = event.get("source") or {}, event.get("involvedObject") or {}
    return (str(src.get("component", "")), str(src.get("host", "")), str(ref.get("kind", "")),
            str(ref.get("namespace", "")), str(ref.get("name", "")), str(ref.get("uid", "")),
            str(ref.get("apiVersion", "")), str(ref.get("fieldPath", "")), str(event.get("type", "")),
            str(event.get("reason", "")), str(event.get("message", "")))


def spam_key(event: Obj) -> tuple[str, ...]:
    """getSpamKey: source and involved object only."""
    return event_key(event)[:8]


class Correlator:
    def __init__(self, *, size: int = CACHE_SIZE, burst: int = SPAM_BURST,
                 refill: float = SPAM_REFILL_SECONDS) -> None:
        self.size, self.burst, self.refill = size, burst, refill
        self._seen: OrderedDict[tuple[str, ...], _Seen] = OrderedDict()
        self._buckets: OrderedDict[tuple[str, ...], _Bucket] = OrderedDict()

    def _allowed(self, event: Obj, now: float) -> bool:
        key = spam_key(event)
        b = self._buckets.get(key)
        if b is None:
            b = self._buckets[key] = _Bucket(float(self.burst), now)
            if len(self._buckets) > self.size:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(key)
            b.tokens = min(float(self.burst), b.tokens + (now - b.at) / self.refill)
            b.at = now
        if b.tokens < 1.0:
            return False
        b.tokens -= 1.0
        return True

    def observe(self, event: Obj, now: float, now_wall: float) -> Obj | None:
        """The event to write (a new one with count 1, or the earlier one's name with count+1), or
        None when the spam filter drops it. `event` has metadata.name set for the new case."""
        if not self._allowed(event, now):
            return None
        stamp = rfc3339(now_wall)
        key = event_key(event)
        seen = self._seen.get(key)
        out = {**event, "metadata": dict(event.get("metadata") or {}), "lastTimestamp": stamp}
        if seen is None:
            out.update(count=1, firstTimestamp=stamp)
            self._seen[key] = _Seen(out["metadata"]["name"], 1, stamp)
            if len(self._seen) > self.size:
                self._seen.popitem(last=False)
            return out
        self._seen.move_to_end(key)
        seen.count += 1
        out["metadata"]["name"] = seen.name
        out.update(count=seen.count, firstTimestamp=seen.first)
        return out
