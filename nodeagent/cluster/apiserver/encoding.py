"""Responses: objects, lists, Tables and watch events as JSON bytes (orjson), and warnings.

Watch events are encoded once per change and output format and shared by every watcher
(Change.encoded); lists are serialized in one call over the decoded items.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import orjson
from aiohttp import web

from nodeagent.cluster.apiserver.negotiation import JSON
from nodeagent.cluster.registry.store import GenericStore, ListResult
from nodeagent.cluster.registry.table import IncludeObject, row, table
from nodeagent.cluster.registry.watch import WatchItem

INITIAL_EVENTS_END = "k8s.io/initial-events-end"


def json_response(obj: Any, status: int = 200, warnings: Sequence[str] = (),
                  content_type: str = JSON) -> web.Response:
    resp = web.Response(body=orjson.dumps(obj), status=status, headers={"Content-Type": content_type})
    add_warnings(resp, warnings)
    return resp


def add_warnings(resp: web.StreamResponse, warnings: Sequence[str]) -> None:
    """`Warning: 299 - "<text>"` headers (RFC 7234 warn-code 299, agent "-"), as kube-apiserver sends."""
    for text in dict.fromkeys(warnings):
        escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\r", " ").replace("\n", " ")
        resp.headers.add("Warning", f'299 - "{escaped}"')


def list_object(gs: GenericStore, result: ListResult) -> dict[str, Any]:
    meta: dict[str, Any] = {"resourceVersion": str(result.revision)}
    if result.continue_token:
        meta["continue"] = result.continue_token
    if result.remaining is not None:
        meta["remainingItemCount"] = result.remaining
    return {"kind": gs.info.list_kind, "apiVersion": gs.info.api_version, "metadata": meta, "items": result.items}


def raw_list(gs: GenericStore, result: ListResult, items: Sequence[bytes]) -> bytes:
    """A list from items already encoded (GenericStore.list_raw), in one join."""
    head = list_object(gs, result)
    del head["items"]
    prefix = orjson.dumps(head)[:-1]  # the list object without its closing brace
    return prefix + b',"items":[' + b",".join(items) + b"]}"


def table_object(gs: GenericStore, objs: Sequence[dict[str, Any]], resource_version: str, now_wall: float,
                 include: IncludeObject, version: str = "v1", *, columns: bool = True,
                 continue_token: str = "", remaining: int | None = None) -> dict[str, Any]:
    cells = gs.strategy.cells
    rows = [row(o, cells(o, now_wall), include) for o in objs]
    out = table(gs.strategy.columns if columns else None, rows, resource_version, continue_token, remaining)
    if version != "v1":
        out["apiVersion"] = f"meta.k8s.io/{version}"
    return out


def table_row_bytes(gs: GenericStore, obj: dict[str, Any], now_wall: float, include: IncludeObject) -> bytes:
    """One row of a listed Table, encoded at once (GenericStore.list_as): the object is dropped
    right after, so a Table of 10,000 pods never holds 10,000 decoded pods (~110 MB of small
    objects, whose freed memory stayed in the server's RSS)."""
    return orjson.dumps(row(obj, gs.strategy.cells(obj, now_wall), include))


def table_list(gs: GenericStore, rows: Sequence[bytes], resource_version: str, version: str = "v1", *,
               continue_token: str = "", remaining: int | None = None) -> bytes:
    """table_object's JSON, from rows already encoded (table_row_bytes), in one join."""
    out = table(gs.strategy.columns, [], resource_version, continue_token, remaining)
    if version != "v1":
        out["apiVersion"] = f"meta.k8s.io/{version}"
    head = orjson.dumps(out)
    assert head.endswith(b'"rows":[]}')
    return head[:-2] + b",".join(rows) + b"]}"


def event_line(event_type: str, obj: Any) -> bytes:
    return b'{"type":"' + event_type.encode() + b'","object":' + orjson.dumps(obj) + b"}\n"


def bookmark(gs: GenericStore, revision: int, *, initial_end: bool = False) -> bytes:
    meta: dict[str, Any] = {"resourceVersion": str(revision)}
    if initial_end:
        meta["annotations"] = {INITIAL_EVENTS_END: "true"}
    return event_line("BOOKMARK", {"kind": gs.info.kind, "apiVersion": gs.info.api_version, "metadata": meta})


class WatchEncoder:
    """One watcher's output format; the bytes of a change are computed once per format."""

    def __init__(self, gs: GenericStore, table_version: str | None, include: IncludeObject,
                 now_wall: Any) -> None:
        self.gs, self.table_version, self.include, self.now_wall = gs, table_version, include, now_wall
        self._columns_sent = False

    def _encode(self, item: WatchItem, columns: bool) -> bytes:
        if self.table_version is None:
            return event_line(item.type, item.object)
        obj = item.object
        t = table_object(self.gs, [obj], obj["metadata"].get("resourceVersion", ""), self.now_wall(), self.include,
                         self.table_version, columns=columns)
        return event_line(item.type, t)

    def encode(self, item: WatchItem) -> bytes:
        columns = self.table_version is not None and not self._columns_sent
        self._columns_sent = self._columns_sent or columns
        if item.change is None or columns:
            return self._encode(item, columns)
        key: Hashable = (item.type, self.table_version, self.include)
        line = item.change.encoded.get(key)
        if line is None:
            line = item.change.encoded[key] = self._encode(item, False)
        return line
