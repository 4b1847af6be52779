"""Heartbeat, Steps and ProgressMonitor with a fake clock: what "making progress" means to the watchdog."""

from __future__ import annotations

import pytest
import structlog

from nodeagent.core.clock import FakeClock
from nodeagent.daemonkit.progress import Heartbeat, ProgressMonitor, Steps


def test_heartbeat_is_stale_only_past_its_bound() -> None:
    clock = FakeClock()
    beat = Heartbeat(clock, "eviction loop", bound=15.0)
    clock.advance(15.0)
    assert beat.stale() == []
    clock.advance(0.5)
    assert beat.stale() == ["eviction loop: no cycle completed for 15.5s (bound 15.0s)"]
    beat.beat()
    assert beat.stale() == []


def test_heartbeat_needs_a_positive_bound() -> None:
    with pytest.raises(ValueError, match="bound"):
        Heartbeat(FakeClock(), "x", 0)


def test_steps_are_overdue_only_while_open_past_their_bound() -> None:
    clock = FakeClock()
    steps = Steps(clock)
    with steps.step("pod a: stop", 40.0):
        with steps.step("pod b: kill leftovers", 10.0):
            clock.advance(10.5)
            assert steps.overdue() == ["pod b: kill leftovers: running for 10.5s (bound 10.0s)"]
        assert steps.overdue() == [] and len(steps) == 1
        clock.advance(30.0)
        assert steps.overdue() == ["pod a: stop: running for 40.5s (bound 40.0s)"]
    assert steps.overdue() == [] and len(steps) == 0


def test_a_step_closes_when_its_block_raises() -> None:
    steps = Steps(FakeClock())
    with pytest.raises(OSError), steps.step("x", 1.0):
        raise OSError("gone")
    assert len(steps) == 0


def test_monitor_is_healthy_only_when_every_component_is_and_logs_changes_once() -> None:
    clock = FakeClock()
    beat = Heartbeat(clock, "eviction loop", bound=5.0)
    steps = Steps(clock)
    monitor = ProgressMonitor()
    monitor.add("eviction", beat.stale)
    monitor.add("pods", steps.overdue)
    assert monitor.healthy()
    with structlog.testing.capture_logs() as logs:
        clock.advance(6.0)
        assert not monitor.healthy()
        assert not monitor.healthy()  # still stalled: logged once
        beat.beat()
        assert monitor.healthy()
    assert [(e["event"], e["component"]) for e in logs] == [("progress_stalled", "eviction"),
                                                            ("progress_resumed", "eviction")]
    assert logs[0]["reasons"] == ["eviction loop: no cycle completed for 6.0s (bound 5.0s)"]


def test_a_check_that_raises_counts_as_no_progress() -> None:
    monitor = ProgressMonitor()

    def broken() -> list[str]:
        raise KeyError("x")

    monitor.add("broken", broken)
    assert monitor.problems() == {"broken": ["progress check failed: KeyError('x')"]}
    assert not monitor.healthy()
