"""Accessors over objects as plain dicts shaped like the Kubernetes JSON (what the informer caches
hold), and metav1 times. Missing fields read as Kubernetes' zero values, never raise."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from nodeagent.core.timefmt import rfc3339

Obj = dict[str, Any]


def meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    m = obj.get("metadata")
    if type(m) is dict:  # what the informers hold: no ABC check (the controllers call this ~40 times per event)
        return m
    return m if isinstance(m, Mapping) else {}


def spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    s = obj.get("spec")
    return s if type(s) is dict or isinstance(s, Mapping) else {}


def status(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    s = obj.get("status")
    return s if type(s) is dict or isinstance(s, Mapping) else {}


def name(obj: Mapping[str, Any]) -> str:
    return str(meta(obj).get("name") or "")


def namespace(obj: Mapping[str, Any]) -> str:
    return str(meta(obj).get("namespace") or "")


def uid(obj: Mapping[str, Any]) -> str:
    return str(meta(obj).get("uid") or "")


def key(obj: Mapping[str, Any]) -> str:
    """The cache key `namespace/name` (just `name` for cluster-scoped objects)."""
    ns = namespace(obj)
    return f"{ns}/{name(obj)}" if ns else name(obj)


def labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    v = meta(obj).get("labels")
    return v if isinstance(v, Mapping) else {}


def annotations_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    v = meta(obj).get("annotations")
    return v if isinstance(v, Mapping) else {}


def finalizers(obj: Mapping[str, Any]) -> list[str]:
    v = meta(obj).get("finalizers")
    return [str(f) for f in v] if isinstance(v, list) else []


def generation(obj: Mapping[str, Any]) -> int:
    return int(meta(obj).get("generation") or 0)


def resource_version(obj: Mapping[str, Any]) -> str:
    return str(meta(obj).get("resourceVersion") or "")


def being_deleted(obj: Mapping[str, Any]) -> bool:
    return bool(meta(obj).get("deletionTimestamp"))


def owner_references(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    v = meta(obj).get("ownerReferences")
    if not v:
        return []
    return [r for r in v if isinstance(r, Mapping)] if isinstance(v, list) else []


def controller_ref(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """metav1.GetControllerOf: the owner reference with controller=true, if any."""
    for ref in owner_references(obj):
        if ref.get("controller") is True:
            return ref
    return None


def is_controlled_by(obj: Mapping[str, Any], owner_uid: str) -> bool:
    ref = controller_ref(obj)
    return ref is not None and str(ref.get("uid") or "") == owner_uid


def new_controller_ref(owner: Mapping[str, Any], api_version: str, kind: str) -> Obj:
    """metav1.NewControllerRef: controller and blockOwnerDeletion true."""
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name(owner),
        "uid": uid(owner),
        "controller": True,
        "blockOwnerDeletion": True,
    }


@lru_cache(maxsize=65536)
def _parse(text: str) -> float | None:
    try:
        t = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=_dt.UTC)
    return t.timestamp()


def parse_time(value: object) -> float | None:
    """metav1.Time / MicroTime (RFC 3339, with or without fractions) to epoch seconds; None if unset
    or unreadable (Kubernetes' zero time)."""
    return _parse(value) if isinstance(value, str) and value else None


def format_time(epoch: float) -> str:
    """metav1.Time on the wire: whole seconds, UTC."""
    return rfc3339(epoch)


def creation_time(obj: Mapping[str, Any]) -> float | None:
    return parse_time(meta(obj).get("creationTimestamp"))


def int_field(value: object, default: int = 0) -> int:
    """An int32 field as stored JSON gives it (bools and junk read as the default)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return default
    return int(value)
