"""The event recorder: `event(obj, type, reason, message)` returns at once; writer tasks put the
correlated events through the registry's events store (PUT, which creates an event that is gone,
as the broadcaster's patch-then-create does). Events are best effort, as upstream: a failed write
is logged and dropped, never retried into a storm. One event name always goes to the same writer,
so its count only grows."""

from __future__ import annotations

import asyncio
import contextlib
import time
import zlib
from typing import Any

import structlog

from nodeagent.cluster.events.correlator import Correlator
from nodeagent.cluster.registry.errors import StatusError
from nodeagent.cluster.registry.options import Context
from nodeagent.cluster.registry.store import GenericStore
from nodeagent.core.clock import Clock
from nodeagent.core.waits import wait_for

log = structlog.get_logger(__name__)

WRITERS = 8
CLOSE_WAIT = 2.0  # seconds
Obj = dict[str, Any]


def object_reference(obj: Obj) -> Obj:
    meta = obj.get("metadata") or {}
    ref = {"kind": obj.get("kind", ""), "apiVersion": obj.get("apiVersion", ""), "name": meta.get("name", "")}
    for k in ("namespace", "uid", "resourceVersion"):
        if meta.get(k):
            ref[k] = meta[k]
    return ref


class EventRecorder:
    def __init__(self, events: GenericStore, clock: Clock, component: str, *, host: str = "",
                 correlator: Correlator | None = None) -> None:
        self.events, self.clock, self.component, self.host = events, clock, component, host
        self.correlator = correlator or Correlator()
        self._queues: list[asyncio.Queue[Obj]] = [asyncio.Queue() for _ in range(WRITERS)]
        self._unfinished = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self.written = self.dropped = self.failed = 0

    def event(self, obj: Obj, type_: str, reason: str, message: str) -> None:
        """Record an event about `obj` (an API object with kind, apiVersion and metadata)."""
        ref = object_reference(obj)
        now_wall = self.clock.wall()
        ns = ref.get("namespace") or "default"
        source = {"component": self.component, **({"host": self.host} if self.host else {})}
        ev: Obj = {"apiVersion": "v1", "kind": "Event",
                   "metadata": {"name": f"{ref['name']}.{time.time_ns():x}", "namespace": ns},
                   "involvedObject": ref, "reason": reason, "message": message, "type": type_,
                   "source": source, "reportingComponent": self.component,
                   "reportingInstance": self.host or self.component}
        out = self.correlator.observe(ev, self.clock.now(), now_wall)
        if out is None:
            self.dropped += 1
            return
        self._unfinished += 1
        self._idle.clear()
        self._queues[zlib.crc32(out["metadata"]["name"].encode()) % WRITERS].put_nowait(out)

    async def flush(self) -> None:
        """Wait until every event recorded so far is written (tests, shutdown)."""
        await self._idle.wait()

    async def run(self) -> None:
        await asyncio.gather(*(self._writer(q) for q in self._queues))

    async def _writer(self, queue: asyncio.Queue[Obj]) -> None:
        ctx = Context(field_manager=self.component, field_validation="Ignore", internal=True)
        while True:
            ev = await queue.get()
            try:
                await self.events.update(ev["metadata"]["namespace"], ev["metadata"]["name"], ev, ctx)
                self.written += 1
            except StatusError as e:
                self.failed += 1
                log.warning("event_write_failed", event=ev["metadata"]["name"], reason=ev.get("reason"),
                            error=e.status.get("message"))
            finally:
                self._unfinished -= 1
                if self._unfinished == 0:
                    self._idle.set()

    async def close(self) -> None:
        """Give the events still queued a moment to be written (shutdown)."""
        with contextlib.suppress(TimeoutError):
            await wait_for(self.flush(), CLOSE_WAIT)
