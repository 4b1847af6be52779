"""Image garbage collection as the kubelet's ImageGCManager decides it (pure).

`plan_gc` is one GarbageCollect pass (pkg/kubelet/images/image_gc_manager.go):

1. imageMaximumGCAge (0: off): every unused image not used for longer than it goes, whatever
   the disk says;
2. if imagefs usage (capacity - available, in percent of capacity) is at or above
   imageGCHighThresholdPercent, free `capacity * (100 - low) / 100 - available` bytes: unused
   images, least recently used first (then first seen), until that much is freed;
3. never an image in use, and never one first seen less than imageMinimumGCAge ago.

`plan_reclaim` is what the eviction manager asks for on imagefs pressure before it evicts pods
(the kubelet's DeleteUnusedImages): unused images in the same order until `bytes_needed` are freed.

Unlike the kubelet, an image frees only what no remaining image shares: a layer two images use is
counted when the second of them goes. The kubelet counts each image's full size, so it stops early
and frees less than planned when images share layers.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

DEFAULT_HIGH_PERCENT = 85
DEFAULT_LOW_PERCENT = 80
DEFAULT_MIN_AGE_S = 120.0
DEFAULT_MAX_AGE_S = 0.0
GC_PERIOD_S = 300.0  # the kubelet's ImageGCPeriod


@dataclass(frozen=True)
class GCPolicy:
    high_percent: int = DEFAULT_HIGH_PERCENT
    low_percent: int = DEFAULT_LOW_PERCENT
    min_age: float = DEFAULT_MIN_AGE_S
    max_age: float = DEFAULT_MAX_AGE_S  # 0: off

    def __post_init__(self) -> None:
        for name, value in (("imageGCHighThresholdPercent", self.high_percent),
                            ("imageGCLowThresholdPercent", self.low_percent)):
            if not 0 <= value <= 100:
                raise ValueError(f"{name}: {value} must be between 0 and 100, inclusive")
        if self.low_percent >= self.high_percent:
            raise ValueError(f"imageGCLowThresholdPercent: {self.low_percent} must be less than "
                             f"imageGCHighThresholdPercent {self.high_percent}")
        if self.max_age and self.max_age <= self.min_age:
            raise ValueError(f"imageMaximumGCAge: {self.max_age}s must be greater than imageMinimumGCAge "
                             f"{self.min_age}s")


@dataclass(frozen=True)
class ImageUsage:
    """One image as GC sees it: `items` are the pieces on disk (blob or layer key -> bytes)."""

    id: str
    items: Mapping[str, int]
    in_use: bool
    first_seen: float
    last_used: float


@dataclass(frozen=True)
class GCPlan:
    remove: tuple[str, ...]  # image ids, in order
    bytes_to_free: int  # the goal (0 when only age removals)
    bytes_freed: int  # what removing them frees, shared pieces counted once
    reason: str  # "max-age", "threshold", "reclaim", "" (nothing to do)

    @property
    def satisfied(self) -> bool:
        return self.bytes_freed >= self.bytes_to_free


def usage_percent(capacity: int, available: int) -> int:
    """Integer percent used, as the kubelet computes it (truncated)."""
    if capacity <= 0:
        return 0
    return (capacity - available) * 100 // capacity


def _order(images: Sequence[ImageUsage]) -> list[ImageUsage]:
    return sorted(images, key=lambda i: (i.last_used, i.first_seen, i.id))


def _free(images: Sequence[ImageUsage], candidates: Sequence[ImageUsage], goal: int | None) -> tuple[list[str], int]:
    """Remove candidates in order until `goal` bytes are freed (None: all of them)."""
    refs: Counter[str] = Counter()
    for image in images:
        refs.update(image.items.keys())
    removed: list[str] = []
    freed = 0
    for image in candidates:
        if goal is not None and freed >= goal:
            break
        removed.append(image.id)
        for key, size in image.items.items():
            refs[key] -= 1
            if refs[key] == 0:
                freed += size
    return removed, freed


def _eligible(images: Sequence[ImageUsage], now: float, policy: GCPolicy) -> list[ImageUsage]:
    return [i for i in _order(images) if not i.in_use and now - i.first_seen >= policy.min_age]


def plan_gc(images: Sequence[ImageUsage], capacity: int, available: int, now: float, policy: GCPolicy) -> GCPlan:
    """One periodic pass: max-age removals, then the threshold rule on what is left."""
    removed: list[str] = []
    freed = 0
    reason = ""
    remaining = list(images)
    if policy.max_age > 0:
        old = [i for i in _eligible(images, now, policy) if now - i.last_used > policy.max_age]
        if old:
            removed, freed = _free(images, old, None)
            reason = "max-age"
            remaining = [i for i in images if i.id not in set(removed)]
    available_after = available + freed
    if usage_percent(capacity, available_after) < policy.high_percent:
        return GCPlan(tuple(removed), 0, freed, reason)
    goal = capacity * (100 - policy.low_percent) // 100 - available_after
    more, more_freed = _free(remaining, _eligible(remaining, now, policy), goal)
    return GCPlan(tuple(removed + more), goal, freed + more_freed, "threshold" if more else reason)


def plan_reclaim(images: Sequence[ImageUsage], bytes_needed: int, now: float, policy: GCPolicy) -> GCPlan:
    """What to remove to free `bytes_needed` (eviction on imagefs pressure); it may fall short."""
    if bytes_needed <= 0:
        return GCPlan((), 0, 0, "")
    removed, freed = _free(images, _eligible(images, now, policy), bytes_needed)
    return GCPlan(tuple(removed), bytes_needed, freed, "reclaim" if removed else "")


__all__ = ["DEFAULT_HIGH_PERCENT", "DEFAULT_LOW_PERCENT", "DEFAULT_MAX_AGE_S", "DEFAULT_MIN_AGE_S", "GC_PERIOD_S",
           "GCPlan", "GCPolicy", "ImageUsage", "plan_gc", "plan_reclaim", "usage_percent"]
