"""Timestamps on the wire: metav1.Time is RFC 3339 in UTC with whole seconds ("2024-05-01T12:00:00Z")."""

from __future__ import annotations

import calendar
import functools
import time
from typing import overload

_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


@overload
def rfc3339(epoch: float) -> str: ...
@overload
def rfc3339(epoch: None) -> None: ...
@overload
def rfc3339(epoch: float | None) -> str | None: ...


def rfc3339(epoch: float | None) -> str | None:
    """Epoch seconds as metav1.Time's wire form; None (an unset time) stays None."""
    if epoch is None:
        return None
    return _format(int(epoch))


@functools.lru_cache(maxsize=64)
def _format(second: int) -> str:
    """Cached: every write stamps the current second several times (creationTimestamp, the
    managedFields entry, a condition, an Event), ~3 us of strftime each."""
    return time.strftime(_FORMAT, time.gmtime(second))


def parse_rfc3339(text: object) -> float | None:
    """The inverse of rfc3339 for what we write; None for anything else."""
    if not isinstance(text, str):
        return None
    return _parse(text)


@functools.lru_cache(maxsize=4096)
def _parse(text: str) -> float | None:
    """Cached: strptime costs ~10 us, and a Table of 10,000 pods made within a few minutes asks for
    each creationTimestamp's second thousands of times (the AGE column)."""
    try:
        return float(calendar.timegm(time.strptime(text, _FORMAT)))
    except ValueError:
        return None
