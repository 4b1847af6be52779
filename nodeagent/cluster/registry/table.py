"""Server-side printing: the meta.k8s.io/v1 Table kubectl asks for (`as=Table`).

A kind's strategy names its columns (priority 1 = shown by `-o wide` only) and computes a row's
cells; this module builds the Table around them, with each row's object as PartialObjectMetadata,
the whole object, or nothing (includeObject=Metadata|Object|None), which is what lets
`kubectl get -A`, `--show-labels` and `-L` work.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from nodeagent.core.duration import human_duration as human_duration
from nodeagent.core.timefmt import parse_rfc3339

IncludeObject = Literal["Metadata", "Object", "None"]
TABLE_API_VERSION = "meta.k8s.io/v1"


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type: str = "string"  # string, integer, number, boolean, date
    format: str = ""  # "name" for the first column
    description: str = ""
    priority: int = 0  # 1: only with -o wide

    def definition(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type, "format": self.format,
                "description": self.description, "priority": self.priority}


NAME = Column("Name", format="name", description="Name must be unique within a namespace.")
AGE = Column("Age", description="CreationTimestamp is a timestamp representing the server time when this "
                                "object was created.")
DEFAULT_COLUMNS = (NAME, AGE)
Cells = Callable[[Mapping[str, Any], float], list[Any]]


def since(timestamp: object, now_wall: float) -> str:
    """translateTimestampSince: the age of an RFC 3339 time, "<unknown>" when unset."""
    when = parse_rfc3339(timestamp)
    if when is None:
        return "<unknown>"
    return human_duration(now_wall - when)


def age(obj: Mapping[str, Any], now_wall: float) -> str:
    return since((obj.get("metadata") or {}).get("creationTimestamp"), now_wall)


def name_age(obj: Mapping[str, Any], now_wall: float) -> list[Any]:
    return [(obj.get("metadata") or {}).get("name", ""), age(obj, now_wall)]


def partial_metadata(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {"kind": "PartialObjectMetadata", "apiVersion": TABLE_API_VERSION, "metadata": obj.get("metadata") or {}}


def row(obj: Mapping[str, Any], cells: list[Any], include: IncludeObject) -> dict[str, Any]:
    out: dict[str, Any] = {"cells": cells}
    if include == "Metadata":
        out["object"] = partial_metadata(obj)
    elif include == "Object":
        out["object"] = obj
    return out


def table(columns: Sequence[Column] | None, rows: Iterable[dict[str, Any]], resource_version: str,
          continue_token: str = "", remaining: int | None = None) -> dict[str, Any]:
    """The Table object; `columns` None leaves columnDefinitions out (watch events after the first)."""
    meta: dict[str, Any] = {"resourceVersion": resource_version}
    if continue_token:
        meta["continue"] = continue_token
    if remaining is not None:
        meta["remainingItemCount"] = remaining
    return {"kind": "Table", "apiVersion": TABLE_API_VERSION, "metadata": meta,
            "columnDefinitions": [c.definition() for c in columns] if columns is not None else [],
            "rows": list(rows)}
