"""CounterWindow: rates from a cumulative counter over a time window, with resets, gaps and edges."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeagent.agent.stats.window import CounterWindow

S = 1_000_000_000  # one second of CPU time in ns


def feed(points: list[tuple[float, int]], window: float = 1.0, tolerance: float = 0.5) -> CounterWindow:
    w = CounterWindow(window, tolerance)
    for t, v in points:
        w.add(t, v)
    return w


@pytest.mark.parametrize("points, window, tolerance, rate, span", [
    # (monotonic s, counter ns): the rate is in ns per s, i.e. nanocores
    ([], 1.0, 0.5, None, 0.0),
    ([(0.0, 0)], 1.0, 0.5, None, 0.0),
    ([(0.0, 0), (1.0, S)], 1.0, 0.5, S, 1.0),  # one core busy
    ([(0.0, 0), (1.0, S // 4)], 1.0, 0.5, S // 4, 1.0),  # 250m
    # 1 s window sampled each second: the rate spans the last two points only
    ([(0.0, 0), (1.0, 0), (2.0, 2 * S)], 1.0, 0.5, 2 * S, 1.0),
    ([(0.0, 0), (1.0, S), (2.0, S), (3.0, S)], 1.0, 0.5, 0, 1.0),
    # a sample 20 ms early still closes the window (tolerance): the span does not double
    ([(0.0, 0), (1.0, S), (1.98, 2 * S)], 1.0, 0.5, S / 0.98, 0.98),
    # ...but one more than the tolerance early leaves the previous point as the reference
    ([(0.0, 0), (1.0, S), (1.4, S + S // 2)], 1.0, 0.5, (S + S // 2) / 1.4, 1.4),
    # edge: a point exactly window - tolerance old is the reference
    ([(0.0, 0), (0.5, S // 2), (1.0, S)], 1.0, 0.5, S, 0.5),
    # history shorter than the window: the rate spans what there is
    ([(0.0, 0), (0.3, 3 * S // 10)], 10.0, 0.5, S, 0.3),
    # 10 s window sampled each second: the reference is the newest point >= 9.5 s back
    ([(float(t), t * S // 2) for t in range(13)], 10.0, 0.5, S // 2, 10.0),
    ([(0.0, 0), *[(float(t), S) for t in range(1, 11)], (11.0, 6 * S)], 10.0, 0.5, 5 * S / 10, 10.0),
    # a gap (reads missed for 5 s): the rate is the average over the time that really passed
    ([(0.0, 0), (1.0, S), (6.0, 6 * S)], 1.0, 0.5, S, 5.0),
    ([(0.0, 0), (1.0, S), (6.0, S)], 1.0, 0.5, 0, 5.0),
    # a reset (the cgroup was made anew): what it counted since then is the growth
    ([(0.0, 0), (1.0, 50 * S), (2.0, S // 2)], 1.0, 0.5, S // 2, 1.0),
    ([(0.0, 0), (1.0, 50 * S), (2.0, 0), (3.0, S)], 1.0, 0.5, S, 1.0),
    # a reset inside a long window keeps the history before it
    ([(0.0, 0), (1.0, S), (2.0, 2 * S), (3.0, S)], 10.0, 0.5, 3 * S / 3, 3.0),
    # a duplicate or out-of-order read is ignored
    ([(0.0, 0), (1.0, S), (1.0, 5 * S)], 1.0, 0.5, S, 1.0),
    ([(0.0, 0), (1.0, S), (0.5, 0)], 1.0, 0.5, S, 1.0),
])
def test_rate(points: list[tuple[float, int]], window: float, tolerance: float, rate: float | None,
              span: float) -> None:
    w = feed(points, window, tolerance)
    if rate is None:
        assert w.rate() is None
    else:
        assert w.rate() == pytest.approx(rate)
    assert w.span() == pytest.approx(span)


def test_the_window_keeps_only_the_reference_and_what_follows() -> None:
    w = feed([(float(t), t * S) for t in range(100)], window=1.0, tolerance=0.5)
    assert len(w) == 2
    w = feed([(float(t), t * S) for t in range(100)], window=10.0, tolerance=0.5)
    assert len(w) == 11  # the reference 10 s back and the ten points after it


def test_add_reports_what_it_ignored() -> None:
    w = CounterWindow(1.0)
    assert w.add(1.0, 5)
    assert not w.add(1.0, 6)
    assert not w.add(0.9, 6)
    assert w.add(1.1, 6)


@pytest.mark.parametrize("window, tolerance, message", [
    (0.0, 0.0, "window must be positive"),
    (-1.0, 0.0, "window must be positive"),
    (1.0, 1.0, "tolerance"),
    (1.0, -0.1, "tolerance"),
])
def test_bad_parameters(window: float, tolerance: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CounterWindow(window, tolerance)


def test_a_negative_counter_is_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        CounterWindow(1.0).add(0.0, -1)


@given(st.lists(st.tuples(st.floats(0.05, 3.0), st.integers(0, 4 * S)), min_size=2, max_size=60),
       st.sampled_from([1.0, 2.5, 10.0]))
def test_rate_is_the_growth_since_the_reference(steps: list[tuple[float, int]], window: float) -> None:
    """Against a direct computation: monotone counter, increasing times; the reference is the
    newest point at least window - tolerance before the newest (else the oldest)."""
    tolerance = 0.25
    points, t, v = [], 0.0, 0
    for dt, dv in steps:
        t, v = t + dt, v + dv
        points.append((t, v))
    w = feed(points, window, tolerance)
    t_new, v_new = points[-1]
    older = [p for p in points[:-1] if p[0] <= t_new - (window - tolerance)]
    ref = older[-1] if older else points[0]
    assert w.rate() == pytest.approx((v_new - ref[1]) / (t_new - ref[0]))
    assert w.rate() >= 0
