"""`metadata.managedFields`: decoding the entries into per-manager field sets and encoding them back
in kube-apiserver's order.

A manager is identified, as upstream, by its name, operation (Apply or Update) and subresource,
plus the apiVersion for Update entries (an applier keeps one entry across versions). Entries are
written sorted by operation, time (seconds), manager, apiVersion and subresource; at most
MAX_UPDATE_MANAGERS Update entries are kept, the oldest merged into one "ancient-changes" entry
(upstream's capManagers).
"""

from __future__ import annotations

import datetime
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from nodeagent.cluster.patch.fieldpath import FieldSet
from nodeagent.core.errors import FieldError

APPLY = "Apply"
UPDATE = "Update"
FIELDS_V1 = "FieldsV1"
MAX_UPDATE_MANAGERS = 10
ANCIENT_CHANGES = "ancient-changes"


@dataclass(frozen=True, slots=True, order=True)
class ManagerKey:
    manager: str
    operation: str
    subresource: str = ""
    api_version: str = ""  # only for Update entries

    @classmethod
    def of(cls, manager: str, operation: str, api_version: str, subresource: str = "") -> ManagerKey:
        return cls(manager, operation, subresource, api_version if operation == UPDATE else "")

    def display(self, api_version: str) -> str:
        """As kube-apiserver names a manager in a conflict: `"kubectl"`, `"x" using apps/v1`,
        `"x" with subresource "status"`."""
        text = f'"{self.manager}"'
        if self.subresource:
            text += f' with subresource "{self.subresource}"'
        if self.operation == UPDATE:
            text += f" using {api_version}"
        return text


@dataclass(frozen=True, slots=True)
class ManagedEntry:
    fields: FieldSet
    api_version: str
    time: str | None = None


Managers = dict[ManagerKey, ManagedEntry]


def decode_managed_fields(raw: Any) -> Managers:
    """The entries of `metadata.managedFields`; FieldError names the entry and field at fault.
    A list read before is answered from a cache by its text (every write of an object decodes
    the entries the last write left); the caller gets a dict of its own (the entries are frozen)."""
    if raw is None:
        return {}
    if not isinstance(raw, list):
        raise FieldError("metadata.managedFields", "must be a list of ManagedFieldsEntry")
    try:
        text = orjson.dumps(raw)
    except TypeError:  # beyond orjson (non-string keys, huge integers): decoded each time
        return _decode_entries(raw)
    hit = _DECODED.pop(text, None)
    if hit is None:
        hit = _decode_entries(raw)  # a FieldError is not remembered
        if len(_DECODED) >= DECODED_REMEMBERED:
            del _DECODED[next(iter(_DECODED))]
    _DECODED[text] = hit
    return dict(hit)


DECODED_REMEMBERED = 1024
_DECODED: dict[bytes, Managers] = {}


def _decode_entries(raw: list[Any]) -> Managers:
    out: Managers = {}
    for i, entry in enumerate(raw):
        where = f"metadata.managedFields[{i}]"
        if not isinstance(entry, dict):
            raise FieldError(where, "must be an object")
        manager = entry.get("manager", "")
        operation = entry.get("operation")
        api_version = entry.get("apiVersion", "")
        subresource = entry.get("subresource", "")
        time = entry.get("time")
        fields_type = entry.get("fieldsType")
        for name, value in (("manager", manager), ("apiVersion", api_version), ("subresource", subresource)):
            if not isinstance(value, str):
                raise FieldError(f"{where}.{name}", "must be a string")
        if operation not in (APPLY, UPDATE):
            raise FieldError(
                f"{where}.operation", f'Unsupported value: {_q(operation)}: supported values: "Apply", "Update"'
            )
        if fields_type != FIELDS_V1:
            raise FieldError(
                f"{where}.fieldsType", f'Unsupported value: {_q(fields_type)}: supported values: "FieldsV1"'
            )
        if time is not None and (not isinstance(time, str) or _seconds(time) is None):
            raise FieldError(f"{where}.time", "must be an RFC 3339 time")
        try:
            fields = FieldSet.from_fields_v1(entry.get("fieldsV1", {}))
        except ValueError as e:
            raise FieldError(f"{where}.fieldsV1", str(e)) from None
        key = ManagerKey.of(manager, operation, api_version, subresource)
        if key in out:
            raise FieldError(where, f"duplicate entries for manager {key.display(api_version)}")
        out[key] = ManagedEntry(fields, api_version, time)
    return out


def _q(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) else str(value)


def _seconds(time: str | None) -> int | None:
    if time is None:
        return 0
    return _parsed_seconds(time)


@functools.lru_cache(maxsize=1024)
def _parsed_seconds(time: str) -> int | None:
    """Cached: every write decodes and sorts its object's entries, whose times repeat."""
    try:
        return int(datetime.datetime.fromisoformat(time).timestamp())
    except ValueError:
        return None


def encode_managed_fields(managers: Mapping[ManagerKey, ManagedEntry]) -> list[dict[str, Any]]:
    """The entries as `metadata.managedFields` holds them, in upstream's order."""
    entries = []
    for key, entry in capped(managers).items():
        if entry.fields.empty:
            continue
        out: dict[str, Any] = {"manager": key.manager, "operation": key.operation, "apiVersion": entry.api_version}
        if entry.time is not None:
            out["time"] = entry.time
        out["fieldsType"] = FIELDS_V1
        out["fieldsV1"] = entry.fields.to_fields_v1()
        if key.subresource:
            out["subresource"] = key.subresource
        entries.append(out)
    entries.sort(
        key=lambda e: (
            e["operation"],
            _seconds(e.get("time")) or 0,
            e["manager"],
            e["apiVersion"],
            e.get("subresource", ""),
        )
    )
    return entries


def capped(managers: Mapping[ManagerKey, ManagedEntry]) -> Managers:
    """At most MAX_UPDATE_MANAGERS Update entries: the oldest ones merged into "ancient-changes"."""
    updaters = [k for k in managers if k.operation == UPDATE]
    if len(updaters) <= MAX_UPDATE_MANAGERS:
        return dict(managers)
    out = dict(managers)
    updaters.sort(key=lambda k: (_seconds(managers[k].time) or 0, k))
    while sum(1 for k in out if k.operation == UPDATE) > MAX_UPDATE_MANAGERS:
        oldest = next(k for k in updaters if k in out and k.manager != ANCIENT_CHANGES)
        entry = out.pop(oldest)
        ancient = ManagerKey.of(ANCIENT_CHANGES, UPDATE, entry.api_version)
        previous = out.get(ancient)
        out[ancient] = ManagedEntry(
            entry.fields if previous is None else previous.fields.union(entry.fields),
            entry.api_version,
            previous.time if previous is not None else entry.time,
        )
    return out
