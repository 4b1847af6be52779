"""Recent events (evictions, admission refusals, ...), Kubernetes Event-shaped, newest last.

A bounded ring in memory: the API serves it at /api/v1/events, and every event is also a
structured log line, which is the durable record (journald).
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import Any

import structlog

from nodeagent.core.clock import Clock
from nodeagent.core.timefmt import rfc3339

log = structlog.get_logger(__name__)


class EventRecorder:
    def __init__(self, clock: Clock, node_name: str, capacity: int = 1000) -> None:
        self.clock = clock
        self.node_name = node_name
        self._events: deque[dict[str, Any]] = deque(maxlen=capacity)
        self._seq = itertools.count(1)

    def record(self, reason: str, message: str, *, kind: str = "Pod", namespace: str = "",
               name: str = "", uid: str = "", type_: str = "Warning", field_path: str = "",
               **context: Any) -> dict[str, Any]:
        """Add one event and log it as `event_recorded reason=... object=ns/name ...`.

        `field_path`: the part of the object it is about, e.g. `spec.containers{app}` (a probe's,
        a hook's events), as involvedObject.fieldPath."""
        now = rfc3339(self.clock.wall())
        involved = {"kind": kind, "namespace": namespace, "name": name, "uid": uid}
        if field_path:
            involved["fieldPath"] = field_path
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{name or self.node_name}.{next(self._seq)}", "namespace": namespace},
            "involvedObject": involved,
            "reason": reason, "message": message, "type": type_,
            "source": {"component": "nodeagent", "host": self.node_name},
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }
        self._events.append(event)
        log.info("event_recorded", reason=reason, object=f"{namespace}/{name}" if namespace else name,
                 message=message, **context)
        return event

    def list(self) -> list[dict[str, Any]]:
        return list(self._events)
