"""Errors that name the field they are about, so operators see `path: message`."""

from __future__ import annotations

from collections.abc import Iterable


class FieldError(ValueError):
    """One invalid field: `path` is dotted with list indexes, e.g. spec.containers[1].name."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path
        self.message = message


class ValidationErrors(ValueError):
    """Several FieldErrors at once; str() gives one line per error."""

    def __init__(self, errors: Iterable[FieldError]) -> None:
        self.errors = list(errors)
        super().__init__("\n".join(str(e) for e in self.errors))


def format_loc(loc: Iterable[object]) -> str:
    """Turn a pydantic-style location tuple into `a.b[1].c`."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out
