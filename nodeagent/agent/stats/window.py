"""The sample window of one cumulative counter, and its rate (pure).

A CPU rate (the Summary API's usageNanoCores) is the growth of a cgroup's CPU-time counter over
the last `window` seconds. The window holds the newest point and, behind it, every point back to
the *reference*: the newest point at least `window - tolerance` seconds older than the newest.
The rate is (newest - reference) / (their time apart). So:

- with a 1 s window sampled every 1 s (tolerance: half an interval) the rate spans the last two
  samples, and a sample that comes 20 ms early does not double the span;
- a gap (a pass that came late, a read that failed) makes the span longer, never wrong: the rate
  is the average over the time that really passed;
- while the history is shorter than the window, the rate spans what there is (two points at least);
- a counter that goes down was reset (its cgroup was made anew): what it counts since then is
  added on top of the value before, as Prometheus' rate() does. The new cgroup can only have
  counted after the previous read, so that is exact up to what the old one ran in between;
- a point that is not newer than the newest (a duplicate read) is ignored.

Times are monotonic seconds; values are integers (nanoseconds), so no precision is lost.
"""

from __future__ import annotations

from collections import deque


class CounterWindow:
    """Points (monotonic time, counter) of one series, trimmed to what the rate needs."""

    __slots__ = ("_last_raw", "_offset", "_points", "tolerance", "window")

    def __init__(self, window: float, tolerance: float = 0.0) -> None:
        if window <= 0:
            raise ValueError(f"window must be positive, got {window}")
        if not 0 <= tolerance < window:
            raise ValueError(f"tolerance must be in [0, window), got {tolerance}")
        self.window = window
        self.tolerance = tolerance
        self._points: deque[tuple[float, int]] = deque()
        self._offset = 0  # the sum of the values the counter had before each reset
        self._last_raw: int | None = None

    def add(self, t: float, value: int) -> bool:
        """Record a read; False if it was ignored (not newer than the newest point)."""
        if value < 0:
            raise ValueError(f"a counter cannot be negative, got {value}")
        points = self._points
        if points and t <= points[-1][0]:
            return False
        if self._last_raw is not None and value < self._last_raw:
            self._offset += self._last_raw
        self._last_raw = value
        points.append((t, value + self._offset))
        edge = t - (self.window - self.tolerance)
        # drop every point older than the reference (the newest point at or before the edge)
        while len(points) >= 3 and points[1][0] <= edge:
            points.popleft()
        return True

    def rate(self) -> float | None:
        """Counter units per second over the window; None with fewer than two points."""
        points = self._points
        if len(points) < 2:
            return None
        (t0, v0), (t1, v1) = points[0], points[-1]
        return (v1 - v0) / (t1 - t0)

    def span(self) -> float:
        """Seconds between the reference and the newest point (0 with fewer than two)."""
        points = self._points
        return points[-1][0] - points[0][0] if len(points) >= 2 else 0.0

    def __len__(self) -> int:
        return len(self._points)


__all__ = ["CounterWindow"]
