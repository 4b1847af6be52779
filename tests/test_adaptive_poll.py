"""Adaptive polling (pure): the interval, the fill-rate estimate, and the manager's next_interval;
then the other pure helpers of nodeagent.agent.eviction.notify (trigger lines, inotify parsing...).

The property that matters for the 100 ms reaction goal is checked by simulation: a hog filling
no faster than the assumed floor is seen within min_s of crossing the threshold.
"""

from __future__ import annotations

import math
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeagent.agent.config.thresholds import parse_thresholds
from nodeagent.agent.eviction.notify.adaptive import (
    DEFAULT_MIN_S,
    DEFAULT_RATE_FLOOR,
    NOTIFIED_RATE_FLOOR,
    AdaptivePoll,
    FillRate,
    next_interval,
    rate_floor,
)
from nodeagent.agent.eviction.notify.memcg_v1 import validate_thresholds
from nodeagent.agent.eviction.notify.memory_events import IN_DELETE, IN_MODIFY, increased, parse_inotify
from nodeagent.agent.eviction.notify.psi import trigger_line, unprivileged_trigger
from nodeagent.agent.eviction.observations import Observation
from nodeagent.agent.node.procfs import has_cap_sys_resource

MI = 1 << 20
GI = 1 << 30


@pytest.mark.parametrize(
    ("available", "threshold", "fill_rate", "kwargs", "expected"),
    [
        # at or below the line: as often as allowed
        (100 * MI, 100 * MI, 0.0, {}, DEFAULT_MIN_S),
        (50 * MI, 100 * MI, 0.0, {}, DEFAULT_MIN_S),
        # calm node: the floor rate decides (1 GiB headroom at 1 GiB/s, half of it)
        (GI + 100 * MI, 100 * MI, 0.0, {}, 0.5),
        (10 * GI + 100 * MI, 100 * MI, 0.0, {}, 5.0),
        (100 * GI, 100 * MI, 0.0, {}, 10.0),  # capped at max_s (the housekeeping interval)
        (100 * GI, 100 * MI, 0.0, {"max_s": 2.0}, 2.0),
        # a fill faster than the floor shortens it
        (GI + 100 * MI, 100 * MI, 4.0 * GI, {}, 0.125),
        (GI + 100 * MI, 100 * MI, 100.0 * GI, {}, DEFAULT_MIN_S),  # clamped to min_s
        (GI + 100 * MI, 100 * MI, math.inf, {}, DEFAULT_MIN_S),
        # memory being freed (negative fill) is no reason to wait longer than the floor allows
        (GI + 100 * MI, 100 * MI, -5.0 * GI, {}, 0.5),
        # the knobs
        (GI + 100 * MI, 100 * MI, 0.0, {"safety": 1.0}, 1.0),
        (GI + 100 * MI, 100 * MI, 0.0, {"rate_floor": 512 * MI}, 1.0),
        (GI + 100 * MI, 100 * MI, 0.0, {"rate_floor": 64 * GI, "min_s": 0.1}, 0.1),
    ],
)
def test_next_interval(available: int, threshold: int, fill_rate: float, kwargs: dict, expected: float) -> None:
    kwargs = {"max_s": 10.0, **kwargs}
    assert next_interval(available, threshold, fill_rate, **kwargs) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"min_s": 0}, "min_s"),
        ({"min_s": -1.0}, "min_s"),
        ({"max_s": math.inf}, "max_s"),
        ({"max_s": 0.01, "min_s": 0.05}, "max_s"),
        ({"safety": 0}, "safety"),
        ({"safety": 1.5}, "safety"),
        ({"rate_floor": 0}, "rate_floor"),
        ({"fill_rate": math.nan}, "fill_rate"),
    ],
)
def test_next_interval_rejects_bad_input(kwargs: dict, field: str) -> None:
    args = {"available": GI, "threshold": 0, "fill_rate": 0.0, "max_s": 10.0, **kwargs}
    with pytest.raises(ValueError, match=f"^{field}:"):
        next_interval(**args)


@given(
    headroom=st.integers(min_value=-GI, max_value=64 * GI),
    less=st.integers(min_value=0, max_value=64 * GI),
    rate=st.floats(min_value=0, max_value=1e12),
    faster=st.floats(min_value=0, max_value=1e12),
)
def test_less_headroom_or_faster_fill_never_waits_longer(headroom: int, less: int, rate: float, faster: float) -> None:
    base = next_interval(GI + headroom, GI, rate, max_s=10.0)
    assert DEFAULT_MIN_S <= base <= 10.0
    assert next_interval(GI + headroom - less, GI, rate, max_s=10.0) <= base
    assert next_interval(GI + headroom, GI, rate + faster, max_s=10.0) <= base


# ---- the fill-rate estimate --------------------------------------------------------------------


def test_fill_rate_follows_a_steady_fill_and_decays_after() -> None:
    r = FillRate(half_life_s=2.0)
    assert r.update(0.0, 10 * GI) == 0.0  # one point: no rate yet
    assert r.update(0.1, 10 * GI - 100 * MI) == pytest.approx(1000 * MI)
    assert r.update(0.2, 10 * GI - 200 * MI) == pytest.approx(1000 * MI)
    # the fill stops: the peak decays by half per half-life, not at once
    assert r.update(2.2, 10 * GI - 200 * MI) == pytest.approx(500 * MI)
    assert r.update(4.2, 10 * GI - 200 * MI) == pytest.approx(250 * MI)
    # a burst takes over at once
    assert r.update(4.3, 10 * GI - 1200 * MI) == pytest.approx(10_000 * MI)


def test_fill_rate_ignores_freed_memory_and_time_going_nowhere() -> None:
    r = FillRate(half_life_s=1.0)
    r.update(0.0, GI)
    assert r.update(1.0, 2 * GI) == 0.0  # memory freed: rate 0, never negative
    assert r.update(1.0, GI) == 0.0  # same timestamp: only the reference moves
    assert r.update(2.0, GI - 64 * MI) == pytest.approx(64 * MI)  # measured from the new reference
    assert r.update(1.5, 0) == pytest.approx(64 * MI)  # going back in time changes nothing


def test_fill_rate_needs_a_positive_half_life() -> None:
    with pytest.raises(ValueError, match="^half_life_s:"):
        FillRate(half_life_s=0)


# ---- the manager's next_interval(observations) ---------------------------------------------------


def thresholds(**soft: str):  # type: ignore[no-untyped-def]
    return parse_thresholds(
        {"memory.available": "100Mi", "nodefs.available": "10%"},
        soft or None,
        dict.fromkeys(soft, "30s") or None,
        None,
        enforce_node_allocatable=["pods"],
    )


def test_adaptive_poll_takes_the_tightest_memory_signal() -> None:
    poll = AdaptivePoll(thresholds(), max_s=10.0)
    obs = {
        "memory.available": Observation(10 * GI, 16 * GI, 1.0),  # 9.9 GiB above 100Mi: 4.95 s
        "allocatableMemory.available": Observation(GI + 100 * MI, 12 * GI, 1.0),  # 1 GiB above: 0.5 s
        "nodefs.available": Observation(1, 10**12, 1.0),  # disk is not this poller's business
    }
    assert poll(obs) == pytest.approx(0.5)


def test_adaptive_poll_uses_the_highest_threshold_of_a_signal() -> None:
    poll = AdaptivePoll(thresholds(**{"memory.available": "1100Mi"}), max_s=10.0)
    # the soft line at 1100Mi is 1 GiB closer than the hard one: its grace period must start on time
    assert poll({"memory.available": Observation(2 * GI + 76 * MI, 16 * GI, 1.0)}) == pytest.approx(0.5)


def test_adaptive_poll_learns_the_fill_rate_from_observation_times() -> None:
    poll = AdaptivePoll(thresholds(), max_s=10.0)
    assert poll({"memory.available": Observation(8 * GI, 16 * GI, 10.0)}) == pytest.approx(3.95, abs=0.01)
    # 4 GiB gone in 1 s: the next look comes in (4 GiB - 100Mi) / 4 GiB/s * 0.5
    assert poll({"memory.available": Observation(4 * GI, 16 * GI, 11.0)}) == pytest.approx((4096 - 100) / 4096 * 0.5)


def test_adaptive_poll_without_memory_thresholds_or_times() -> None:
    poll = AdaptivePoll(parse_thresholds({"nodefs.available": "10%"}, None, None, None), max_s=7.0)
    assert poll({"memory.available": Observation(GI, 16 * GI, 1.0)}) == 7.0
    timeless = AdaptivePoll(thresholds(), max_s=10.0)
    timeless({"memory.available": Observation(8 * GI, 16 * GI, 0.0)})
    assert timeless({"memory.available": Observation(GI, 16 * GI, 0.0)}) == pytest.approx(0.45, abs=0.01)
    assert timeless.rates["memory.available"].rate == 0.0  # time 0 = unknown: no rate from it


def test_adaptive_poll_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="^max_s:"):
        AdaptivePoll(thresholds(), max_s=0.01)


def seconds_to_notice(start_available: int, rate: float, *, quiet_s: float = 30.0) -> float:
    """Simulate: a calm node, then a hog filling at `rate` from time quiet_s; how long after the
    line (100Mi) is crossed does a poll first see it?"""
    line = 100 * MI
    poll = AdaptivePoll(thresholds(), max_s=10.0)
    crossing = quiet_s + (start_available - line) / rate
    t = 0.0
    for _ in range(100_000):
        available = start_available - max(0.0, t - quiet_s) * rate
        if available < line:
            return t - crossing
        t += poll({"memory.available": Observation(int(available), 16 * GI, t)})
    raise AssertionError("never noticed")


@given(
    start=st.integers(min_value=200 * MI, max_value=15 * GI),
    rate=st.floats(min_value=1 * MI, max_value=DEFAULT_RATE_FLOOR),
    quiet=st.floats(min_value=0.0, max_value=60.0),
)
def test_a_hog_no_faster_than_the_floor_is_noticed_within_min_s(start: int, rate: float, quiet: float) -> None:
    assert seconds_to_notice(start, rate, quiet_s=quiet) <= DEFAULT_MIN_S + 1e-9


def test_a_hog_faster_than_the_floor_can_be_noticed_late_without_notifications() -> None:
    """Why the kernel notifiers exist: 8 GiB/s against a 1 GiB/s floor overshoots the first look."""
    assert seconds_to_notice(15 * GI, 8.0 * GI) > DEFAULT_MIN_S


# ---- the notifiers' own pure helpers (kept here: this is the notify package's unit test file) ---


def test_psi_trigger_line_is_nul_terminated_and_validated() -> None:
    assert trigger_line("some", 100_000, 1_000_000) == b"some 100000 1000000\0"
    assert trigger_line("full", 10_000_000, 10_000_000) == b"full 10000000 10000000\0"
    for args, field in [
        (("avg", 1, 1_000_000), "kind"),
        (("some", 0, 1_000_000), "stall_us"),
        (("some", 2_000_000, 1_000_000), "stall_us"),
        (("some", 100, 499_999), "window_us"),
        (("some", 100, 10_000_001), "window_us"),
        (("some", 1.5, 1_000_000), "stall_us"),
    ]:
        with pytest.raises(ValueError, match=f"^{field}:"):
            trigger_line(*args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("stall", "window", "expected"),
    [
        (100_000, 1_000_000, (200_000, 2_000_000)),  # same 10% of the window
        (150_000, 500_000, (600_000, 2_000_000)),
        (100_000, 2_000_000, (100_000, 2_000_000)),  # already allowed: unchanged
        (1_000_000, 3_000_000, (1_333_334, 4_000_000)),  # rounded up, never below the ratio
        (9_000_000, 9_500_000, (9_473_685, 10_000_000)),  # capped at 10 s
    ],
)
def test_psi_unprivileged_trigger_keeps_the_ratio(stall: int, window: int, expected: tuple[int, int]) -> None:
    assert unprivileged_trigger(stall, window) == expected


def test_cap_sys_resource_is_read_from_capeff() -> None:
    assert has_cap_sys_resource("Name:\tx\nCapEff:\t000001ffffffffff\n")
    assert not has_cap_sys_resource("CapEff:\t000001fffeffffff\n")  # bit 24 clear (our CI machines)
    assert not has_cap_sys_resource("Name:\tx\n")


def test_parse_inotify_reads_events_with_and_without_names() -> None:
    def event(wd: int, mask: int, name: bytes = b"") -> bytes:
        padded = name + b"\0" * (16 - len(name) % 16) if name else b""  # NUL-padded, as the kernel does
        return struct.pack("iIII", wd, mask, 0, len(padded)) + padded

    buf = event(1, IN_MODIFY) + event(2, IN_DELETE, b"kubepods") + event(1, IN_MODIFY)
    assert parse_inotify(buf) == [(1, IN_MODIFY, ""), (2, IN_DELETE, "kubepods"), (1, IN_MODIFY, "")]
    assert parse_inotify(buf[:10]) == []  # a torn header is not an event


def test_increased_counts_only_growth_of_watched_keys() -> None:
    before = {"low": 1, "high": 5, "max": 0, "oom": 0, "oom_kill": 0}
    after = {"low": 9, "high": 7, "max": 0, "oom": 1, "oom_kill": 0, "oom_group_kill": 3}
    assert increased(before, after, ("high", "max", "oom", "oom_kill")) == {"high": 2, "oom": 1}
    assert increased({}, {"high": 1}, ("high",)) == {"high": 1}
    assert increased(after, before, ("high",)) == {}  # a counter never shrinks; if read so, no wake


def test_memcg_thresholds_are_positive_bytes_sorted_and_unique() -> None:
    assert validate_thresholds([3 * MI, MI, 3 * MI]) == (MI, 3 * MI)
    for bad, field in [([], "thresholds"), ([0], r"thresholds\[0\]"), ([MI, -1], r"thresholds\[1\]"), ([True], r"thresholds\[0\]")]:
        with pytest.raises(ValueError, match=f"^{field}:"):
            validate_thresholds(bad)


def test_a_kernel_watched_line_lets_the_poll_plan_for_slower_fills() -> None:
    assert rate_floor(False) == DEFAULT_RATE_FLOOR and rate_floor(True) == NOTIFIED_RATE_FLOOR
    assert NOTIFIED_RATE_FLOOR < DEFAULT_RATE_FLOOR
    # 512 MiB above the line, nothing filling: 0.25 s when polling alone, 1 s when the kernel watches
    assert next_interval(612 * MI, 100 * MI, 0.0, max_s=10.0, rate_floor=rate_floor(False)) == 0.25
    assert next_interval(612 * MI, 100 * MI, 0.0, max_s=10.0, rate_floor=rate_floor(True)) == 1.0
    # near the line both look every DEFAULT_MIN_S
    for notified in (False, True):
        assert next_interval(110 * MI, 100 * MI, 0.0, max_s=10.0, rate_floor=rate_floor(notified)) == DEFAULT_MIN_S
    # an observed fast fill still wins over the lower floor
    assert next_interval(612 * MI, 100 * MI, 2.0 * GI, max_s=10.0, rate_floor=rate_floor(True)) == 0.125
