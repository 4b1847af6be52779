"""The pure parts of eviction/wakeups.py: where the kernel notifications are armed (the lines in
kubepods usage terms), when they move, and which mechanisms an operator selected."""

from __future__ import annotations

import pytest

from nodeagent.agent.config.thresholds import parse_thresholds
from nodeagent.agent.eviction.observations import Observation
from nodeagent.agent.eviction.wakeups import MECHANISMS, kubepods_lines, moved, parse_mechanisms, spent

MI = 1 << 20
GI = 1 << 30


def thresholds(hard: dict[str, str], soft: dict[str, str] | None = None) -> list:
    grace = dict.fromkeys(soft or {}, "10s")
    return parse_thresholds(hard, soft, grace, None)


def test_memory_available_line_is_usage_plus_headroom() -> None:
    """available 900Mi, threshold 100Mi: pods may grow 800Mi more before it is met."""
    obs = {"memory.available": Observation(available=900 * MI, capacity=4 * GI)}
    assert kubepods_lines(thresholds({"memory.available": "100Mi"}), obs, 300 * MI, None) == [1100 * MI]


def test_percentage_threshold_uses_the_node_capacity() -> None:
    obs = {"memory.available": Observation(available=1 * GI, capacity=4 * GI)}
    # 10% of 4Gi, with the kubelet's float32 percentage: int64(4Gi * float64(float32(0.1)))
    line = kubepods_lines(thresholds({"memory.available": "10%"}), obs, 0, None)
    assert line == [GI - 429496736]


def test_already_met_threshold_gives_a_line_at_or_below_usage_never_zero() -> None:
    obs = {"memory.available": Observation(available=50 * MI, capacity=4 * GI)}
    assert kubepods_lines(thresholds({"memory.available": "100Mi"}), obs, 300 * MI, None) == [250 * MI]
    assert kubepods_lines(thresholds({"memory.available": "100Mi"}), obs, 10 * MI, None) == [1]


def test_allocatable_line_moves_up_with_page_cache() -> None:
    """allocatableMemory.available = enforced - (usage - inactive_file): inactive file pages in
    kubepods do not count, so the line in usage terms sits higher by that much."""
    ts = thresholds({"allocatableMemory.available": "100Mi"})
    assert kubepods_lines(ts, {}, 500 * MI, 1000 * MI) == [900 * MI]
    assert kubepods_lines(ts, {}, 500 * MI, 1000 * MI, pods_inactive_file=30 * MI) == [930 * MI]
    assert kubepods_lines(ts, {}, 500 * MI, None) == []  # no enforced allocatable: no such line


def test_soft_and_hard_lines_and_non_memory_signals() -> None:
    ts = thresholds({"memory.available": "100Mi", "nodefs.available": "10%"}, {"memory.available": "300Mi"})
    obs = {"memory.available": Observation(available=900 * MI, capacity=4 * GI),
           "nodefs.available": Observation(available=GI, capacity=10 * GI)}
    assert kubepods_lines(ts, obs, 0, None) == [600 * MI, 800 * MI]  # nodefs has no memory line


def test_moved_needs_more_than_the_slack_or_a_different_count() -> None:
    assert not moved([100 * MI], [100 * MI + 2 * MI])
    assert moved([100 * MI], [100 * MI + 2 * MI + 1])
    assert moved([100 * MI], [100 * MI - 3 * MI])
    assert moved([100 * MI], [100 * MI, 200 * MI])
    assert not moved([100 * MI], [100 * MI + MI], slack=MI)
    assert moved([100 * MI], [100 * MI + MI + 1], slack=MI)


@pytest.mark.parametrize(
    ("old", "new", "usage", "expected"),
    [
        ([100], [101], 100, True),   # usage passed the armed line, the real one is still ahead: re-arm
        ([100], [101], 99, False),   # not passed yet: the armed line still fires on the way up
        ([100], [100], 100, False),  # passed and the threshold is at the line: the pass evicts, no re-arm
        ([100], [90], 100, False),   # the real line is below usage: met, not spent
        ([100, 200], [102, 201], 101, True),  # any one spent line re-arms
        ([100], [101, 201], 150, False),  # a different set of lines: `moved` re-arms anyway
    ],
)
def test_spent_line(old: list[int], new: list[int], usage: int, expected: bool) -> None:
    assert spent(old, new, usage) is expected


def test_parse_mechanisms() -> None:
    assert parse_mechanisms(None) == MECHANISMS
    assert parse_mechanisms("") == MECHANISMS
    assert parse_mechanisms("all") == MECHANISMS
    assert parse_mechanisms("none") == frozenset()
    assert parse_mechanisms(" psi , memcg ") == {"psi", "memcg"}
    with pytest.raises(ValueError, match=r"NODEAGENT_EVICTION_WAKEUPS: unknown mechanism\(s\) \['eventfd'\]"):
        parse_mechanisms("psi,eventfd")
