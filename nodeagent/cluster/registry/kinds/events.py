"""Events: core/v1 and events.k8s.io/v1 are one stored resource (core/v1's shape, under
/registry/core/events/), served in either version with kube's field mapping between them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from nodeagent.cluster.registry.catalog import ResourceInfo
from nodeagent.cluster.registry.strategy import Obj, Strategy, text
from nodeagent.cluster.registry.table import Column, since
from nodeagent.core.errors import FieldError
from nodeagent.core.names import invalid

# events.k8s.io/v1 field -> core/v1 field
V1_TO_CORE = {"regarding": "involvedObject", "note": "message", "reportingController": "reportingComponent",
              "deprecatedSource": "source", "deprecatedFirstTimestamp": "firstTimestamp",
              "deprecatedLastTimestamp": "lastTimestamp", "deprecatedCount": "count"}
CORE_TO_V1 = {v: k for k, v in V1_TO_CORE.items()}
TYPES = ("Normal", "Warning")
_REF_FIELDS = ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")


def _last_seen(ev: Mapping[str, Any], now_wall: float) -> str:
    for k in ("lastTimestamp", "eventTime", "firstTimestamp"):
        v = ev.get(k)
        if isinstance(v, str) and v:
            return since(v[:19] + "Z" if len(v) > 20 else v, now_wall)
    return since((ev.get("metadata") or {}).get("creationTimestamp"), now_wall)


class EventStrategy(Strategy):
    info: ClassVar[ResourceInfo] = ResourceInfo("", "v1", "Event", "events", "event", True, short_names=("ev",))
    allow_create_on_update = True
    field_labels = frozenset({f"involvedObject.{f}" for f in _REF_FIELDS}
                             | {"reason", "reportingComponent", "source", "type"})
    columns = (Column("Last Seen", description="Time when this Event was last observed."),
               Column("Type", description="Type of this event (Normal, Warning), new types could be added in the "
                                          "future."),
               Column("Reason", description="This should be a short, machine understandable string that gives the "
                                            "reason for this event being generated."),
               Column("Object", description="The object that this event is about."),
               Column("Subobject", priority=1, description="The subobject of the object."),
               Column("Source", priority=1, description="The component reporting this event."),
               Column("Message", description="A human-readable description of the status of this operation."),
               Column("First Seen", priority=1, description="The time at which the event was first recorded."),
               Column("Count", type="integer", priority=1, description="The number of times this event has "
                                                                       "occurred."),
               Column("Name", format="name", priority=1, description="Name must be unique within a namespace."))

    def validate(self, obj: Obj) -> list[FieldError]:
        errs = []
        ref = obj.get("involvedObject")
        if ref is not None and not (isinstance(ref, dict) and all(isinstance(ref.get(f), (str, type(None)))
                                                                  for f in _REF_FIELDS)):
            errs.append(FieldError("involvedObject", invalid(str(ref)[:60], "must be an object reference")))
        t = obj.get("type")
        if t not in (None, "") and t not in TYPES:
            errs.append(FieldError("type", f"Unsupported value: {t!r}: supported values: \"Normal\", \"Warning\""))
        count = obj.get("count")
        if count is not None and (isinstance(count, bool) or not isinstance(count, int)):
            errs.append(FieldError("count", invalid(count, "must be an integer")))
        for f in ("reason", "message", "reportingComponent", "reportingInstance", "action"):
            if obj.get(f) is not None and not isinstance(obj[f], str):
                errs.append(FieldError(f, invalid(str(obj[f])[:60], "must be a string")))
        return errs

    def fields(self, obj: Mapping[str, Any]) -> dict[str, str]:
        out = super().fields(obj)
        ev = self.to_storage(dict(obj)) if "regarding" in obj or "note" in obj else obj
        ref = ev.get("involvedObject") or {}
        for f in _REF_FIELDS:
            out[f"involvedObject.{f}"] = text(ref.get(f))
            out[f"regarding.{f}"] = out[f"involvedObject.{f}"]
        out["reason"] = text(ev.get("reason"))
        out["type"] = text(ev.get("type"))
        out["reportingComponent"] = text(ev.get("reportingComponent"))
        out["reportingController"] = out["reportingComponent"]
        out["source"] = text((ev.get("source") or {}).get("component"))
        return out

    def cells(self, obj: Mapping[str, Any], now_wall: float) -> list[Any]:
        ev = self.to_storage(dict(obj)) if "regarding" in obj or "note" in obj else obj
        ref = ev.get("involvedObject") or {}
        kind, name = str(ref.get("kind") or "").lower(), ref.get("name") or ""
        src = ev.get("source") or {}
        source = ", ".join(str(x) for x in (src.get("component"), src.get("host")) if x) or \
            text(ev.get("reportingComponent"))
        first = ev.get("firstTimestamp")
        return [_last_seen(ev, now_wall), text(ev.get("type")), text(ev.get("reason")),
                f"{kind}/{name}" if kind else name, text(ref.get("fieldPath")), source, text(ev.get("message")),
                since(first, now_wall) if first else "<unknown>", ev.get("count") or 1,
                (ev.get("metadata") or {}).get("name", "")]


class EventV1Strategy(EventStrategy):
    """events.k8s.io/v1: the same objects, renamed fields (regarding, note, reportingController...)."""

    info: ClassVar[ResourceInfo] = ResourceInfo("events.k8s.io", "v1", "Event", "events", "event", True,
                                                short_names=("ev",), storage_group="", storage_resource="events")
    field_labels = EventStrategy.field_labels | frozenset(
        {f"regarding.{f}" for f in _REF_FIELDS} | {"reportingController"})

    def validate(self, obj: Obj) -> list[FieldError]:
        errs = super().validate(self.to_storage(dict(obj)))
        return [FieldError(CORE_TO_V1.get(e.path.split(".")[0], e.path.split(".")[0])
                           + e.path[len(e.path.split(".")[0]):], e.message) for e in errs]

    def to_storage(self, obj: Obj) -> Obj:
        out = {V1_TO_CORE.get(k, k): v for k, v in obj.items()}
        out["apiVersion"], out["kind"] = "v1", "Event"
        return out

    def from_storage(self, obj: Obj) -> Obj:
        return {CORE_TO_V1.get(k, k): v for k, v in obj.items()}
