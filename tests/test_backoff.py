"""The kubelet's crash back-off: 10 s doubling to 5 min, first restart immediate, reset after 10 min."""

from __future__ import annotations

import pytest

from nodeagent.agent.runtime.backoff import BACKOFF_PERIOD_S, MAX_CONTAINER_BACKOFF_S, CrashBackoff
from nodeagent.agent.runtime.state import crash_loop_message
from nodeagent.core.clock import FakeClock
from nodeagent.core.duration import format_go_duration


def crash_loop(clock: FakeClock, b: CrashBackoff, runs: int, run_for: float = 0.0) -> list[float]:
    """Waits before each restart of a container that crashes after `run_for` seconds, `runs` times."""
    waits = []
    for _ in range(runs):
        clock.advance(run_for)
        finished = clock.now()
        wait = b.remaining(finished)
        waits.append(wait)
        clock.advance(wait)
        assert b.remaining(finished) == 0
        b.restarted(finished)
    return waits


def test_kubelet_constants() -> None:
    assert (BACKOFF_PERIOD_S, MAX_CONTAINER_BACKOFF_S) == (10.0, 300.0)


def test_first_restart_is_immediate_then_doubles_to_the_cap() -> None:
    clock = FakeClock()
    b = CrashBackoff(clock=clock)
    assert crash_loop(clock, b, 9) == [0, 10, 20, 40, 80, 160, 300, 300, 300]


def test_current_is_the_delay_the_message_shows() -> None:
    clock = FakeClock()
    b = CrashBackoff(clock=clock)
    assert b.current() == 0
    crash_loop(clock, b, 3)  # restarts after 0, 10, 20: the entry is now 40
    assert b.current() == 40
    msg = crash_loop_message(format_go_duration(b.current()), "app", "web", "default", "u-1")
    assert msg == "back-off 40s restarting failed container=app pod=web_default(u-1)"
    crash_loop(clock, b, 2)
    assert format_go_duration(b.current()) == "2m40s"


def test_wait_counts_from_the_exit_not_from_now() -> None:
    clock = FakeClock()
    b = CrashBackoff(clock=clock)
    crash_loop(clock, b, 2)  # entry 20 s
    clock.advance(5)
    finished = clock.now()
    clock.advance(4)  # the agent noticed 4 s late
    assert b.remaining(finished) == pytest.approx(16)
    assert b.remaining(finished) > 0
    clock.advance(16)
    assert b.remaining(finished) == 0


def test_a_long_run_after_a_crash_still_backs_off_if_under_ten_minutes() -> None:
    clock = FakeClock()
    b = CrashBackoff(clock=clock)
    crash_loop(clock, b, 3)  # entry 40 s, last restart now
    clock.advance(599)
    assert b.remaining(clock.now()) == 40


def test_running_ten_minutes_resets_the_curve() -> None:
    clock = FakeClock()
    b = CrashBackoff(clock=clock)
    crash_loop(clock, b, 6)  # entry 300 s
    assert b.current() == 300
    waits = crash_loop(clock, b, 3, run_for=600.5)  # > 2 x max since the last restart
    assert waits == [0, 0, 0]
    assert b.current() == 10
    assert crash_loop(clock, b, 2) == [10, 20]


def test_exactly_ten_minutes_is_not_yet_a_reset() -> None:
    clock = FakeClock()
    b = CrashBackoff(clock=clock)
    crash_loop(clock, b, 2)  # entry 20 s
    clock.advance(600)
    assert b.remaining(clock.now()) == 20


def test_reset_and_snapshot_restore() -> None:
    clock = FakeClock()
    b = CrashBackoff(clock=clock)
    crash_loop(clock, b, 4)
    snap = b.snapshot()
    other = CrashBackoff(clock=clock)
    other.restore(snap)
    assert other.current() == b.current() == 80
    b.reset()
    assert b.current() == 0 and b.remaining(clock.now()) == 0


def test_custom_small_curve() -> None:
    clock = FakeClock()
    b = CrashBackoff(initial=0.05, maximum=0.2, clock=clock)
    assert crash_loop(clock, b, 5) == pytest.approx([0, 0.05, 0.1, 0.2, 0.2])


@pytest.mark.parametrize("initial,maximum", [(0, 300), (-1, 300), (10, 5)])
def test_bad_parameters(initial: float, maximum: float) -> None:
    with pytest.raises(ValueError):
        CrashBackoff(initial=initial, maximum=maximum, clock=FakeClock())
