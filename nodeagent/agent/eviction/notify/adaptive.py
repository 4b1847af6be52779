"""Adaptive polling, the floor under the kernel notifiers (pure: times and bytes in, seconds out).

Like earlyoom: look again before the memory left above a threshold can be used up. The interval
is the time the headroom lasts at the fill rate, times a safety factor, clamped:

    interval = clamp((available - threshold) / max(fill_rate, rate_floor) * safety, min_s, max_s)

The fill rate is observed (a peak that decays with a half-life, so one burst shortens the
interval at once and a calm period lengthens it slowly) but never assumed below `rate_floor`,
the fastest fill we plan for without any notification: one core touching fresh pages.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from nodeagent.agent.config.thresholds import ALLOCATABLE_MEMORY_AVAILABLE, MEMORY_AVAILABLE, Threshold
from nodeagent.agent.eviction.observations import Observation

# At the line: four looks per 100 ms reaction budget, so detection stays well under the time the
# kernel takes to free a victim (measurements: bench/README.md, "Poll floor").
DEFAULT_MIN_S = 0.025
DEFAULT_SAFETY = 0.5
DEFAULT_RATE_FLOOR = 1 << 30  # bytes/s; one core faulting in fresh pages does ~1-4 GiB/s
# With a kernel notification armed at the hard line (memcg eventfd on v1, memory.high +
# memory.events on v2) a fast fill is the kernel's to report, and the poll is the backstop for
# slow drift (page cache moving the real line, soft thresholds): plan for a quarter of the rate,
# which polls a quarter as often at a distance and still at the floor within ~13 MiB of the line
# (idle CPU: bench/README.md, "Rate floor").
NOTIFIED_RATE_FLOOR = 256 << 20
# Near the line, between passes: a look at the memory signals alone every LOOK_S (a pread of
# /proc/meminfo, ~0.3 ms in the UML guest against ~2 ms for a whole pass), whenever the poll
# sleeps LOOK_BELOW_S or less (within ~25 MiB of the line at the notified rate floor, further
# out only while memory fills fast); a threshold newly met ends the sleep. Detection near the
# line is then LOOK_S, not the 25 ms floor; the looks cost a few % of the guest's one core while
# the node sits that close (bench/README.md, "The memory look").
LOOK_S = 0.01
LOOK_BELOW_S = 0.05
DEFAULT_HALF_LIFE_S = 2.0
MEMORY_SIGNALS = (MEMORY_AVAILABLE, ALLOCATABLE_MEMORY_AVAILABLE)


def _check_positive(field: str, value: float) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{field}: must be a positive finite number, got {value!r}")


def next_interval(
    available: int,
    threshold: int,
    fill_rate: float,
    *,
    max_s: float,
    min_s: float = DEFAULT_MIN_S,
    safety: float = DEFAULT_SAFETY,
    rate_floor: float = DEFAULT_RATE_FLOOR,
) -> float:
    """Seconds until the next look; min_s once the threshold is reached."""
    _check_positive("min_s", min_s)
    _check_positive("max_s", max_s)
    _check_positive("rate_floor", rate_floor)
    if max_s < min_s:
        raise ValueError(f"max_s: {max_s} is below min_s {min_s}")
    if not 0 < safety <= 1:
        raise ValueError(f"safety: must be in (0, 1], got {safety!r}")
    if math.isnan(fill_rate):
        raise ValueError("fill_rate: must be a number, got nan")
    headroom = available - threshold
    if headroom <= 0:
        return min_s
    seconds = headroom / max(fill_rate, rate_floor) * safety
    return min(max_s, max(min_s, seconds))


def look_slices(seconds: float, look_s: float = LOOK_S, below_s: float = LOOK_BELOW_S) -> list[float]:
    """How a poll sleep of `seconds` is cut: a look after each slice but the last, which ends in
    the pass. One slice (no look) for a sleep longer than `below_s` or not longer than `look_s`."""
    if seconds > below_s or seconds <= look_s:
        return [max(0.0, seconds)]
    looks = math.ceil(seconds / look_s - 1e-9) - 1
    return [look_s] * looks + [seconds - looks * look_s]


def rate_floor(notified_at_line: bool) -> float:
    """The fill rate the poll plans for: lower once the kernel watches the line itself."""
    return NOTIFIED_RATE_FLOOR if notified_at_line else DEFAULT_RATE_FLOOR


class FillRate:
    """How fast available memory shrinks, in bytes/s (>= 0): a peak hold with exponential decay."""

    def __init__(self, half_life_s: float = DEFAULT_HALF_LIFE_S) -> None:
        _check_positive("half_life_s", half_life_s)
        self.half_life_s = half_life_s
        self.rate = 0.0
        self._last: tuple[float, int] | None = None

    def update(self, t: float, available: int) -> float:
        """Feed one observation (time in seconds, available bytes); the current estimate.

        An observation not later than the previous one only replaces the reference point."""
        last = self._last
        self._last = (t, available)
        if last is None or t <= last[0]:
            return self.rate
        dt = t - last[0]
        instant = max(0.0, (last[1] - available) / dt)
        decayed = self.rate * 0.5 ** (dt / self.half_life_s)
        self.rate = max(instant, decayed)
        return self.rate


class AdaptivePoll:
    """The manager's `next_interval(observations)`: the shortest interval any memory threshold needs.

    Per memory signal it tracks a FillRate and uses the highest threshold on that signal (the
    one reached first; soft thresholds count: their grace period should start on time).
    Signals without a memory threshold or without an observation leave max_s.
    """

    def __init__(
        self,
        thresholds: Iterable[Threshold],
        *,
        max_s: float,
        min_s: float = DEFAULT_MIN_S,
        safety: float = DEFAULT_SAFETY,
        rate_floor: float = DEFAULT_RATE_FLOOR,
        half_life_s: float = DEFAULT_HALF_LIFE_S,
    ) -> None:
        next_interval(1, 0, 0.0, max_s=max_s, min_s=min_s, safety=safety, rate_floor=rate_floor)  # validate
        self.thresholds = [t for t in thresholds if t.signal in MEMORY_SIGNALS]
        self.max_s, self.min_s, self.safety, self.rate_floor = max_s, min_s, safety, rate_floor
        self.rates = {s: FillRate(half_life_s) for s in MEMORY_SIGNALS}

    def __call__(self, observations: Mapping[str, Observation]) -> float:
        best = self.max_s
        for signal in MEMORY_SIGNALS:
            obs = observations.get(signal)
            if obs is None:
                continue
            rate = self.rates[signal].update(obs.time, obs.available) if obs.time > 0 else self.rates[signal].rate
            values = [t.value_for(obs.capacity) for t in self.thresholds if t.signal == signal]
            if not values:
                continue
            best = min(best, next_interval(obs.available, max(values), rate, max_s=self.max_s, min_s=self.min_s,
                                           safety=self.safety, rate_floor=self.rate_floor))
        return best
