"""CPU usage rate from cumulative counters, the way metrics-server derives it from kubelet scrapes.

An agent reports, per container, pod and node, the cgroup's cumulative CPU time (nanoseconds:
cpu.stat usage_usec * 1000 on v2, cpuacct.usage on v1) with the time it read it. Usage in cores is
the counter's increase divided by the elapsed time. Three things make a pair of samples unusable,
and each gives no rate rather than a wrong one:
- out of order or duplicate (the later sample is not later): no elapsed time;
- a reset (the counter went down, or the container's start time changed): the container restarted
  and its new counter counts from zero, so the difference means nothing (metrics-server drops such
  pairs too);
- a gap longer than `max_gap`: the agent or the scrape was away; an average over the gap would be
  presented as current usage although it may be minutes old.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

NANOS_PER_SECOND = 1_000_000_000
DEFAULT_MAX_GAP = 15.0  # seconds: 15 missed 1 s samples


@dataclass(frozen=True, slots=True)
class CounterSample:
    """One reading of a cumulative CPU counter."""

    timestamp: float  # seconds, on the same scale for every sample of a series
    usage_ns: int  # cumulative CPU time in nanoseconds
    start_time: float | None = None  # when the container (re)started, if known


def pair_usable(prev: CounterSample, cur: CounterSample, max_gap: float = DEFAULT_MAX_GAP) -> bool:
    """Whether the two samples bracket a valid interval (see the module docstring)."""
    elapsed = cur.timestamp - prev.timestamp
    if elapsed <= 0 or elapsed > max_gap:
        return False
    if cur.usage_ns < prev.usage_ns:
        return False
    return not (prev.start_time is not None and cur.start_time is not None and cur.start_time != prev.start_time)


def cpu_rate(prev: CounterSample, cur: CounterSample, max_gap: float = DEFAULT_MAX_GAP) -> float | None:
    """Average usage in cores between the two samples, or None when the pair is unusable."""
    if not pair_usable(prev, cur, max_gap):
        return None
    return (cur.usage_ns - prev.usage_ns) / NANOS_PER_SECOND / (cur.timestamp - prev.timestamp)


def cpu_rate_over(samples: list[CounterSample], max_gap: float = DEFAULT_MAX_GAP) -> tuple[float, float] | None:
    """Usage in cores over consecutive samples (oldest first), skipping unusable pairs.

    Returns (cores, covered seconds), or None when no pair is usable. The rate is the total counter
    increase over the total covered time, so a reset or a gap in the middle drops that interval only.
    """
    used = 0
    covered = 0.0
    for prev, cur in pairwise(samples):
        if pair_usable(prev, cur, max_gap):
            used += cur.usage_ns - prev.usage_ns
            covered += cur.timestamp - prev.timestamp
    if covered <= 0:
        return None
    return used / NANOS_PER_SECOND / covered, covered
