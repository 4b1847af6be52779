"""The error every patch engine raises: what is wrong, and the HTTP code kube-apiserver answers."""

from __future__ import annotations

import json
from typing import Any

BAD_REQUEST = 400
CONFLICT = 409
UNPROCESSABLE = 422


class PatchError(ValueError):
    """A patch that cannot be applied. `code` is 400 (malformed patch) or 422 (a patch that is
    well-formed but cannot apply to this object), as kube-apiserver answers."""

    def __init__(self, message: str, code: int = BAD_REQUEST) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def shown(value: Any, limit: int = 200) -> str:
    """A value in an error message: compact JSON, cut at `limit` characters."""
    try:
        text = json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def kind_of(value: Any) -> str:
    """The JSON kind of a value, for messages ("map", "list", "string", ...)."""
    if isinstance(value, dict):
        return "map"
    if isinstance(value, list):
        return "list"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return type(value).__name__
