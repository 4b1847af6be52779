"""HPA normalization: stabilization windows, behavior policies (Pods/Percent, Max/Min/Disabled), min/max."""

from __future__ import annotations

import pytest

from nodeagent.cluster.autoscaling.hpa.normalize import (
    History,
    Recommendation,
    ScaleEvent,
    convert_with_behavior_rate,
    convert_with_rules,
    normalize_with_behavior,
    normalize_without_behavior,
    record_initial,
    scale_down_limit_with_rules,
    scale_up_limit_with_rules,
    stabilize,
    stabilize_with_behavior,
    store_scale_event,
)
from nodeagent.cluster.autoscaling.hpa.spec import Behavior, ScalingPolicy, ScalingRules

NOW = 5000.0


def recs(*pairs: tuple[int, float]) -> History:
    return History(recommendations=tuple(Recommendation(r, NOW - age) for r, age in pairs))


def rules(window: int | None = 0, select: str = "Max", *policies: tuple[str, int, int]) -> ScalingRules:
    return ScalingRules(window, select, tuple(ScalingPolicy(t, v, p) for t, v, p in policies))  # type: ignore[arg-type]


@pytest.mark.parametrize(("history", "new", "expected", "stored"), [
    (recs((3, 30), (4, 45)), 2, 4, 3),  # within a 60 s window: the highest wins
    (recs((7, 120), (4, 45)), 5, 5, 2),  # the old sample is replaced, not counted
    (recs((7, 120), (8, 180)), 3, 3, 2),  # all outside
    (History(), 3, 3, 1),
])
def test_stabilize_without_behavior(history: History, new: int, expected: int, stored: int) -> None:
    got, h = stabilize(history, new, 60.0, NOW)
    assert got == expected
    assert len(h.recommendations) == stored
    assert Recommendation(new, NOW) in h.recommendations
    assert sum(1 for r in h.recommendations if r.timestamp < NOW - 60.0) <= 1


@pytest.mark.parametrize(("current", "desired", "lo", "hi", "expected", "reason"), [
    (2, 4, 1, 10, 4, "DesiredWithinRange"),
    (2, 1, 2, 10, 2, "TooFewReplicas"),
    (10, 12, 1, 10, 10, "TooManyReplicas"),
    (3, 20, 1, 100, 6, "ScaleUpLimit"),  # 2x current
    (1, 20, 1, 100, 4, "ScaleUpLimit"),  # at least 4
    (3, 20, 1, 5, 5, "TooManyReplicas"),  # max below the 2x limit
])
def test_convert_with_rules(current: int, desired: int, lo: int, hi: int, expected: int, reason: str) -> None:
    got, r, _ = convert_with_rules(current, desired, lo, hi)
    assert (got, r) == (expected, reason)


@pytest.mark.parametrize(("current", "desired", "lo", "hi", "history", "expected", "able", "limited", "lreason"), [
    (2, 4, 1, 10, recs((4, 0)), 4, "ReadyForNewScale", False, "DesiredWithinRange"),
    (5, 3, 1, 10, recs((4, 60), (3, 0)), 4, "ScaleDownStabilized", False, "DesiredWithinRange"),
    (2, 1, 2, 10, recs((1, 0)), 2, "ReadyForNewScale", True, "TooFewReplicas"),
    (10, 12, 1, 10, recs((12, 0)), 10, "ReadyForNewScale", True, "TooManyReplicas"),
])
def test_normalize_without_behavior(current: int, desired: int, lo: int, hi: int, history: History, expected: int,
                                    able: str, limited: bool, lreason: str) -> None:
    n = normalize_without_behavior(history, current, desired, lo, hi, NOW, 300.0)
    assert (n.replicas, n.able_reason, n.limited, n.limited_reason) == (expected, able, limited, lreason)


UP_300_DOWN_600 = Behavior(rules(300, "Max", ("Percent", 100, 15)), rules(600, "Max", ("Percent", 100, 15)))


@pytest.mark.parametrize(("history", "current", "desired", "expected", "reason"), [
    (recs((8, 120), (7, 240)), 5, 10, 7, "ScaleUpStabilized"),  # the lowest in the up window
    (recs((5, 300), (4, 480)), 8, 3, 5, "ScaleDownStabilized"),  # the highest in the down window
    (recs((5, 100)), 5, 5, 5, "ScaleUpStabilized"),
    (recs((9, 400)), 5, 10, 10, "ScaleUpStabilized"),  # 9 left the 300 s up window
])
def test_stabilize_with_behavior(history: History, current: int, desired: int, expected: int, reason: str) -> None:
    got, r, _, _ = stabilize_with_behavior(history, current, desired, UP_300_DOWN_600, NOW)
    assert (got, r) == (expected, reason)


def events(*pairs: tuple[int, float]) -> tuple[ScaleEvent, ...]:
    return tuple(ScaleEvent(c, NOW - age) for c, age in pairs)


@pytest.mark.parametrize(("current", "up", "down", "r", "expected"), [
    (10, (), (), rules(0, "Max", ("Pods", 4, 60), ("Percent", 100, 60)), 20),
    (10, (), (), rules(0, "Min", ("Pods", 4, 60), ("Percent", 100, 60)), 14),
    (10, (), (), rules(0, "Disabled", ("Pods", 4, 60)), 10),
    (10, events((4, 30)), (), rules(0, "Max", ("Pods", 4, 60)), 10),  # 4 already added in this period
    (10, events((4, 90)), (), rules(0, "Max", ("Pods", 4, 60)), 14),  # that event left the period
    (10, events((2, 10)), events((3, 20)), rules(0, "Max", ("Percent", 50, 60)), 17),  # start 11 -> ceil(16.5)
    (1, (), (), rules(0, "Max", ("Percent", 10, 60)), 2),  # rounded up, or a Percent policy never moves 1 pod
])
def test_scale_up_limit(current: int, up: tuple[ScaleEvent, ...], down: tuple[ScaleEvent, ...], r: ScalingRules,
                        expected: int) -> None:
    assert scale_up_limit_with_rules(current, up, down, r, NOW) == expected


@pytest.mark.parametrize(("current", "up", "down", "r", "expected"), [
    (10, (), (), rules(300, "Max", ("Pods", 4, 60), ("Percent", 50, 60)), 5),
    (10, (), (), rules(300, "Min", ("Pods", 4, 60), ("Percent", 50, 60)), 6),
    (10, (), (), rules(300, "Disabled", ("Pods", 4, 60)), 10),
    (10, (), events((2, 30)), rules(300, "Max", ("Pods", 2, 60)), 10),  # the budget is spent
    (10, (), (), rules(300, "Max", ("Percent", 100, 15)), 0),
    (7, (), (), rules(300, "Max", ("Percent", 10, 60)), 6),  # int(6.3) = 6
])
def test_scale_down_limit(current: int, up: tuple[ScaleEvent, ...], down: tuple[ScaleEvent, ...], r: ScalingRules,
                          expected: int) -> None:
    assert scale_down_limit_with_rules(current, up, down, r, NOW) == expected


@pytest.mark.parametrize(("behavior", "current", "desired", "lo", "hi", "expected", "reason"), [
    (Behavior(rules(300, "Max", ("Percent", 200, 60)), rules(300, "Max", ("Percent", 100, 60))), 5, 15, 1, 10, 10,
     "TooManyReplicas"),
    (Behavior(rules(300, "Max", ("Percent", 200, 60)), rules(300, "Max", ("Percent", 50, 60))), 8, 2, 1, 10, 4,
     "ScaleDownLimit"),
    (Behavior(rules(0, "Max", ("Pods", 1, 60)), rules(300, "Max", ("Percent", 50, 60))), 5, 9, 1, 10, 6,
     "ScaleUpLimit"),
    (Behavior(rules(0, "Max", ("Pods", 1, 60)), rules(300, "Max", ("Percent", 90, 60))), 5, 1, 3, 10, 3,
     "TooFewReplicas"),
    (Behavior(rules(0, "Disabled", ("Pods", 1, 60)), rules(300, "Max", ("Percent", 90, 60))), 5, 9, 1, 10, 5,
     "ScaleUpLimit"),
])
def test_convert_with_behavior_rate(behavior: Behavior, current: int, desired: int, lo: int, hi: int, expected: int,
                                    reason: str) -> None:
    got, r, _ = convert_with_behavior_rate(History(), current, desired, lo, hi, behavior, NOW)
    assert (got, r) == (expected, reason)


def test_normalize_with_behavior_fills_the_scale_down_window_from_the_flag() -> None:
    behavior = Behavior(rules(0, "Max", ("Percent", 100, 15)), rules(None, "Max", ("Percent", 100, 15)))
    history = recs((6, 200))  # within the flag's 300 s
    n = normalize_with_behavior(history, 6, 2, 1, 10, behavior, NOW, downscale_window=300.0)
    assert (n.replicas, n.able_reason, n.limited) == (6, "ScaleDownStabilized", False)
    n = normalize_with_behavior(history, 6, 2, 1, 10, behavior, NOW, downscale_window=100.0)
    assert (n.replicas, n.able_reason) == (2, "ReadyForNewScale")


def test_record_initial_and_store_scale_events() -> None:
    h = record_initial(History(), 3, NOW)
    assert h.recommendations == (Recommendation(3, NOW),)
    assert record_initial(h, 9, NOW + 1) is h
    b = Behavior(rules(0, "Max", ("Pods", 4, 60)), rules(300, "Max", ("Percent", 100, 30)))
    h = store_scale_event(History(), b, 5, 10, NOW)
    assert h.scale_up_events == (ScaleEvent(5, NOW),) and h.scale_down_events == ()
    h = store_scale_event(h, b, 10, 4, NOW + 10)
    assert h.scale_down_events == (ScaleEvent(6, NOW + 10),)
    # an event older than the longest period is reused for the next one
    h = store_scale_event(h, b, 4, 6, NOW + 100)
    assert h.scale_up_events == (ScaleEvent(2, NOW + 100),)
    assert store_scale_event(History(), None, 5, 10, NOW) == History()
