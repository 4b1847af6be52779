"""Image GC policy: the kubelet's thresholds, ages and order, shared layers counted once."""

from __future__ import annotations

import pytest

from nodeagent.agent.images.gc import GCPolicy, ImageUsage, plan_gc, plan_reclaim, usage_percent

NOW = 10_000.0
GB = 1 << 30


def img(name: str, size: int, *, last_used: float = 0.0, first_seen: float = 0.0, in_use: bool = False,
        shared: dict[str, int] | None = None) -> ImageUsage:
    items = {f"layer:{name}": size, **(shared or {})}
    return ImageUsage(name, items, in_use, first_seen, last_used)


POLICY = GCPolicy()  # 85 / 80 / 2m / off

CASES = [
    # (name, images, capacity, available, expected removals, expected goal)
    ("below high: nothing", [img("a", GB)], 100 * GB, 16 * GB, (), 0),
    ("at high exactly: frees down to low", [img("a", 3 * GB, last_used=5), img("b", 3 * GB, last_used=1)],
     100 * GB, 15 * GB, ("b", "a"), 5 * GB),
    ("oldest last-used first, stop when enough", [img("new", 6 * GB, last_used=900), img("old", 6 * GB, last_used=100),
                                                  img("mid", 6 * GB, last_used=500)], 100 * GB, 10 * GB, ("old", "mid"), 10 * GB),
    ("in-use images are never removed", [img("used", 50 * GB, in_use=True), img("free", GB, last_used=999)],
     100 * GB, 5 * GB, ("free",), 15 * GB),
    ("younger than imageMinimumGCAge stays", [img("fresh", 20 * GB, first_seen=NOW - 119),
                                              img("ripe", 20 * GB, first_seen=NOW - 120, last_used=NOW - 1)],
     100 * GB, 10 * GB, ("ripe",), 10 * GB),
    ("ties on last used: first seen decides", [img("b", 6 * GB, first_seen=20), img("a", 6 * GB, first_seen=10)],
     100 * GB, 14 * GB, ("a",), 6 * GB),
]


@pytest.mark.parametrize("name, images, capacity, available, removed, goal", CASES, ids=[c[0] for c in CASES])
def test_threshold_cases(name: str, images: list[ImageUsage], capacity: int, available: int,
                         removed: tuple[str, ...], goal: int) -> None:
    plan = plan_gc(images, capacity, available, NOW, POLICY)
    assert plan.remove == removed
    assert plan.bytes_to_free == goal


def test_shared_layers_are_freed_with_the_last_image() -> None:
    base = {"layer:base": 8 * GB}
    images = [img("x", GB, last_used=1, shared=base), img("y", GB, last_used=2, shared=base)]
    plan = plan_gc(images, 100 * GB, 10 * GB, NOW, POLICY)  # goal 10 GiB
    assert plan.remove == ("x", "y")  # x alone frees only its own 1 GiB
    assert plan.bytes_freed == 10 * GB and plan.satisfied


def test_falls_short_when_not_enough_is_eligible() -> None:
    plan = plan_gc([img("a", GB), img("b", 40 * GB, in_use=True)], 100 * GB, 5 * GB, NOW, POLICY)
    assert plan.remove == ("a",)
    assert plan.bytes_freed == GB and not plan.satisfied


def test_maximum_age_removes_whatever_the_disk_says() -> None:
    policy = GCPolicy(max_age=3600)
    images = [img("stale", GB, last_used=NOW - 3601), img("recent", GB, last_used=NOW - 10),
              img("stale-used", GB, last_used=NOW - 9999, in_use=True)]
    plan = plan_gc(images, 100 * GB, 90 * GB, NOW, policy)
    assert plan.remove == ("stale",) and plan.reason == "max-age" and plan.bytes_to_free == 0


def test_maximum_age_counts_towards_the_threshold() -> None:
    policy = GCPolicy(max_age=3600)
    images = [img("stale", 4 * GB, last_used=NOW - 4000), img("lru", 4 * GB, last_used=NOW - 100),
              img("mru", 4 * GB, last_used=NOW - 50)]
    # 86% used; removing the stale one brings it to 82%, below 85: the threshold rule does nothing
    plan = plan_gc(images, 100 * GB, 14 * GB, NOW, policy)
    assert plan.remove == ("stale",)
    # 90% used; after the stale one 86%: the threshold rule frees 6 GiB more to reach 80%
    plan = plan_gc(images, 100 * GB, 10 * GB, NOW, policy)
    assert plan.remove == ("stale", "lru", "mru")
    assert plan.bytes_to_free == 6 * GB and plan.reason == "threshold"


def test_reclaim_frees_what_eviction_asks() -> None:
    images = [img("a", 2 * GB, last_used=3), img("b", 2 * GB, last_used=1), img("c", 2 * GB, last_used=2),
              img("d", 9 * GB, in_use=True)]
    assert plan_reclaim(images, 3 * GB, NOW, POLICY).remove == ("b", "c")
    assert plan_reclaim(images, 0, NOW, POLICY).remove == ()
    everything = plan_reclaim(images, 100 * GB, NOW, POLICY)
    assert everything.remove == ("b", "c", "a") and not everything.satisfied


@pytest.mark.parametrize("kwargs, field", [
    (dict(high_percent=101), "imageGCHighThresholdPercent"),
    (dict(low_percent=-1), "imageGCLowThresholdPercent"),
    (dict(high_percent=80, low_percent=80), "imageGCLowThresholdPercent"),
    (dict(min_age=120, max_age=60), "imageMaximumGCAge"),
])
def test_policy_validation(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        GCPolicy(**kwargs)  # type: ignore[arg-type]


def test_usage_percent_truncates() -> None:
    assert usage_percent(100, 15) == 85
    assert usage_percent(1000, 151) == 84
    assert usage_percent(0, 0) == 0
