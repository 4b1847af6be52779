"""Injectable time, so grace and transition periods are tested without sleeping."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds on a monotonic scale."""
        ...

    def wall(self) -> float:
        """Seconds since the epoch (for timestamps shown to people)."""
        ...


class SystemClock:
    def now(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()


class FakeClock:
    """A clock tests move by hand."""

    def __init__(self, start: float = 1000.0, wall_offset: float = 1_700_000_000.0) -> None:
        self._t = start
        self._offset = wall_offset

    def now(self) -> float:
        return self._t

    def wall(self) -> float:
        return self._t + self._offset

    def advance(self, seconds: float) -> None:
        self._t += seconds
