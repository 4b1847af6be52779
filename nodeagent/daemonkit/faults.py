"""Fault points: where a test makes the real daemon SIGKILL itself, to prove what a 2xx promised.

`NODEAGENT_FAULT=<point>[:<n>][,<point>[:<n>]...]` (read once, at import) names points at which
the process kills itself with SIGKILL on the n-th hit (default the first). Unset, `hit()` is one
dict lookup and does nothing: production code calls it on its durable paths at the instants a
crash would break a promise (after a record is fsynced and before the answer, after a spawn and
before its pid is recorded...). Every hit is counted, so a test can also read how often a point
was passed.
"""

from __future__ import annotations

import os
import signal

ENV = "NODEAGENT_FAULT"


def _parse(value: str) -> dict[str, int]:
    """"a,b:3" -> {"a": 1, "b": 3}; ValueError naming a bad entry."""
    armed: dict[str, int] = {}
    for item in filter(None, (p.strip() for p in value.split(","))):
        point, _, n = item.partition(":")
        try:
            count = int(n) if n else 1
        except ValueError:
            raise ValueError(f"{ENV}: {item!r}: the count after ':' must be an integer") from None
        if not point or count < 1:
            raise ValueError(f"{ENV}: {item!r}: want <point>[:<n>] with n >= 1")
        armed[point] = count
    return armed


_armed: dict[str, int] = _parse(os.environ.get(ENV, ""))
hits: dict[str, int] = {}


def arm(value: str) -> None:
    """Re-read the armed points from a value (tests of this module; the daemon uses the env)."""
    global _armed
    _armed = _parse(value)
    hits.clear()


def hit(point: str) -> None:
    """Pass the fault point `point`: SIGKILL this process if it is armed for this hit."""
    if not _armed:
        return
    n = hits[point] = hits.get(point, 0) + 1
    if _armed.get(point) == n:
        os.kill(os.getpid(), signal.SIGKILL)
