"""Turning a metrics proposal into the replica count to set: stabilization, scaling rates, min/max.

Upstream keeps, per HPA, the recent unstabilized recommendations and the recent scale events in
memory (horizontal.go); here they are an immutable History passed in and returned, so a step is a
pure function and a server restart loses what upstream loses (the windows start again).

Without spec.behavior (normalizeDesiredReplicas): the recommendation is the highest of those within
the downscale stabilization window (300 s), then clamped to [minReplicas, min(maxReplicas,
max(2 * current, 4))] (ScaleUpLimit / TooManyReplicas / TooFewReplicas).

With spec.behavior (normalizeDesiredReplicasWithBehaviors): the recommendation is clamped between
the lowest recommendation in the scale-up window and the highest in the scale-down window
(ScaleUpStabilized / ScaleDownStabilized), then limited by the policies: each policy allows, from
the replicas at the start of its period (current - added + removed within it), Pods: +/- value,
Percent: ceil(start * (1 + v/100)) up, int(start * (1 - v/100)) down; selectPolicy Max takes the
most permissive, Min the least, Disabled forbids that direction.

Comparisons against window cut-offs are strict, as Go's time.After / time.Before.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from nodeagent.cluster.autoscaling.hpa.spec import Behavior, ScalingRules

MAX_INT32 = 2**31 - 1
MIN_INT32 = -(2**31)
SCALE_UP_LIMIT_FACTOR = 2.0
SCALE_UP_LIMIT_MINIMUM = 4.0
DEFAULT_DOWNSCALE_STABILIZATION = 300.0  # --horizontal-pod-autoscaler-downscale-stabilization


@dataclass(frozen=True, slots=True)
class Recommendation:
    replicas: int
    timestamp: float


@dataclass(frozen=True, slots=True)
class ScaleEvent:
    change: int  # absolute replica change, >= 0
    timestamp: float
    outdated: bool = False


@dataclass(frozen=True, slots=True)
class History:
    """What upstream keeps per HPA between syncs."""

    recommendations: tuple[Recommendation, ...] = ()
    scale_up_events: tuple[ScaleEvent, ...] = ()
    scale_down_events: tuple[ScaleEvent, ...] = ()
    steady_recommendations: tuple[Recommendation, ...] = ()  # the fast path's long-window proposals (hpa.fast)


@dataclass(frozen=True, slots=True)
class Normalized:
    replicas: int
    able_reason: str  # AbleToScale=True reason: ReadyForNewScale, ScaleUpStabilized, ScaleDownStabilized
    able_message: str
    limited: bool  # ScalingLimited status
    limited_reason: str
    limited_message: str
    history: History = field(default_factory=History)


READY_FOR_NEW_SCALE = ("ReadyForNewScale", "recommended size matches current size")


def record_initial(history: History, current_replicas: int, now: float) -> History:
    """recordInitialRecommendation: the current size is the first recommendation."""
    if history.recommendations:
        return history
    return replace(history, recommendations=(Recommendation(current_replicas, now),))


def _store(recs: tuple[Recommendation, ...], old_index: int | None, new: Recommendation) -> tuple[Recommendation, ...]:
    if old_index is None:
        return (*recs, new)
    out = list(recs)
    out[old_index] = new
    return tuple(out)


def stabilize(history: History, desired: int, window: float, now: float) -> tuple[int, History]:
    """stabilizeRecommendation: the highest recommendation not older than the window."""
    highest = desired
    cutoff = now - window
    old_index = None
    for i, rec in enumerate(history.recommendations):
        if rec.timestamp < cutoff:
            old_index = i
        elif rec.replicas > highest:
            highest = rec.replicas
    recs = _store(history.recommendations, old_index, Recommendation(desired, now))
    return highest, replace(history, recommendations=recs)


def scale_up_limit(current_replicas: int) -> int:
    return int(max(SCALE_UP_LIMIT_FACTOR * current_replicas, SCALE_UP_LIMIT_MINIMUM))


def convert_with_rules(current: int, desired: int, min_replicas: int, max_replicas: int) -> tuple[int, str, str]:
    """convertDesiredReplicasWithRules: min/max and the 2x (at least 4) scale-up cap."""
    limit = scale_up_limit(current)
    if max_replicas > limit:
        maximum, reason, message = (
            limit,
            "ScaleUpLimit",
            "the desired replica count is increasing faster than the maximum scale rate",
        )
    else:
        maximum, reason, message = (
            max_replicas,
            "TooManyReplicas",
            "the desired replica count is more than the maximum replica count",
        )
    if desired < min_replicas:
        return min_replicas, "TooFewReplicas", "the desired replica count is less than the minimum replica count"
    if desired > maximum:
        return maximum, reason, message
    return desired, "DesiredWithinRange", "the desired count is within the acceptable range"


def normalize_without_behavior(
    history: History,
    current: int,
    desired: int,
    min_replicas: int,
    max_replicas: int,
    now: float,
    downscale_window: float = DEFAULT_DOWNSCALE_STABILIZATION,
) -> Normalized:
    stabilized, history = stabilize(history, desired, downscale_window, now)
    if stabilized != desired:
        able = (
            "ScaleDownStabilized",
            "recent recommendations were higher than current one, applying the highest recent recommendation",
        )
    else:
        able = READY_FOR_NEW_SCALE
    replicas, reason, message = convert_with_rules(current, stabilized, min_replicas, max_replicas)
    return Normalized(replicas, able[0], able[1], replicas != stabilized, reason, message, history)


def stabilize_with_behavior(
    history: History, current: int, desired: int, behavior: Behavior, now: float
) -> tuple[int, str, str, History]:
    """stabilizeRecommendationWithBehaviors: clamp(current, min(up window), max(down window))."""
    up_window = behavior.scale_up.stabilization_window_seconds or 0
    down_window = behavior.scale_down.stabilization_window_seconds or 0
    up_cutoff = now - up_window
    down_cutoff = now - down_window
    up_rec = down_rec = desired
    old_index = None
    for i, rec in enumerate(history.recommendations):
        if rec.timestamp > up_cutoff:
            up_rec = min(rec.replicas, up_rec)
        if rec.timestamp > down_cutoff:
            down_rec = max(rec.replicas, down_rec)
        if rec.timestamp < up_cutoff and rec.timestamp < down_cutoff:
            old_index = i
    recommendation = current
    if recommendation < up_rec:
        recommendation = up_rec
    if recommendation > down_rec:
        recommendation = down_rec
    recs = _store(history.recommendations, old_index, Recommendation(desired, now))
    if desired >= current:
        reason, message = (
            "ScaleUpStabilized",
            ("recent recommendations were lower than current one, applying the lowest recent recommendation"),
        )
    else:
        reason, message = (
            "ScaleDownStabilized",
            ("recent recommendations were higher than current one, applying the highest recent recommendation"),
        )
    return recommendation, reason, message, replace(history, recommendations=recs)


def _change_in_period(period_seconds: int, events: tuple[ScaleEvent, ...], now: float) -> int:
    cutoff = now - period_seconds
    return sum(e.change for e in events if e.timestamp > cutoff)


def scale_up_limit_with_rules(
    current: int,
    up_events: tuple[ScaleEvent, ...],
    down_events: tuple[ScaleEvent, ...],
    rules: ScalingRules,
    now: float,
) -> int:
    """calculateScaleUpLimitWithScalingRules: the most replicas the policies allow now."""
    if rules.select_policy == "Disabled":
        return current
    pick = min if rules.select_policy == "Min" else max
    result = MAX_INT32 if rules.select_policy == "Min" else MIN_INT32
    for policy in rules.policies:
        added = _change_in_period(policy.period_seconds, up_events, now)
        removed = _change_in_period(policy.period_seconds, down_events, now)
        start = current - added + removed
        if policy.type == "Pods":
            proposed = start + policy.value
        else:
            proposed = math.ceil(start * (1 + policy.value / 100))
        result = pick(result, proposed)
    return result


def scale_down_limit_with_rules(
    current: int,
    up_events: tuple[ScaleEvent, ...],
    down_events: tuple[ScaleEvent, ...],
    rules: ScalingRules,
    now: float,
) -> int:
    """calculateScaleDownLimitWithBehaviors: the fewest replicas the policies allow now."""
    if rules.select_policy == "Disabled":
        return current
    pick = max if rules.select_policy == "Min" else min
    result = MIN_INT32 if rules.select_policy == "Min" else MAX_INT32
    for policy in rules.policies:
        added = _change_in_period(policy.period_seconds, up_events, now)
        removed = _change_in_period(policy.period_seconds, down_events, now)
        start = current - added + removed
        if policy.type == "Pods":
            proposed = start - policy.value
        else:
            proposed = int(start * (1 - policy.value / 100))
        result = pick(result, proposed)
    return result


def convert_with_behavior_rate(
    history: History, current: int, desired: int, min_replicas: int, max_replicas: int, behavior: Behavior, now: float
) -> tuple[int, str, str]:
    """convertDesiredReplicasWithBehaviorRate: the policies' rate limits, then min/max."""
    if desired > current:
        limit = scale_up_limit_with_rules(
            current, history.scale_up_events, history.scale_down_events, behavior.scale_up, now
        )
        limit = max(limit, current)  # no further scale-up until old events leave the periods
        if max_replicas > limit:
            maximum, reason, message = (
                limit,
                "ScaleUpLimit",
                "the desired replica count is increasing faster than the maximum scale rate",
            )
        else:
            maximum, reason, message = (
                max_replicas,
                "TooManyReplicas",
                "the desired replica count is more than the maximum replica count",
            )
        if desired > maximum:
            return maximum, reason, message
    elif desired < current:
        limit = scale_down_limit_with_rules(
            current, history.scale_up_events, history.scale_down_events, behavior.scale_down, now
        )
        limit = min(limit, current)
        if min_replicas < limit:
            minimum, reason, message = (
                limit,
                "ScaleDownLimit",
                "the desired replica count is decreasing faster than the maximum scale rate",
            )
        else:
            minimum, reason, message = (
                min_replicas,
                "TooFewReplicas",
                "the desired replica count is less than the minimum replica count",
            )
        if desired < minimum:
            return minimum, reason, message
    return desired, "DesiredWithinRange", "the desired count is within the acceptable range"


def behavior_with_window(behavior: Behavior, downscale_window: float) -> Behavior:
    """maybeInitScaleDownStabilizationWindow: an unset scale-down window is the controller's flag."""
    if behavior.scale_down.stabilization_window_seconds is not None:
        return behavior
    return replace(
        behavior, scale_down=replace(behavior.scale_down, stabilization_window_seconds=int(downscale_window))
    )


def normalize_with_behavior(
    history: History,
    current: int,
    desired: int,
    min_replicas: int,
    max_replicas: int,
    behavior: Behavior,
    now: float,
    downscale_window: float = DEFAULT_DOWNSCALE_STABILIZATION,
) -> Normalized:
    behavior = behavior_with_window(behavior, downscale_window)
    stabilized, reason, message, history = stabilize_with_behavior(history, current, desired, behavior, now)
    able = (reason, message) if stabilized != desired else READY_FOR_NEW_SCALE
    replicas, lreason, lmessage = convert_with_behavior_rate(
        history, current, stabilized, min_replicas, max_replicas, behavior, now
    )
    return Normalized(replicas, able[0], able[1], replicas != stabilized, lreason, lmessage, history)


def _mark_outdated(events: tuple[ScaleEvent, ...], longest_period: int, now: float) -> list[ScaleEvent]:
    cutoff = now - longest_period
    return [replace(e, outdated=True) if e.timestamp < cutoff else e for e in events]


def store_scale_event(history: History, behavior: Behavior | None, previous: int, new: int, now: float) -> History:
    """storeScaleEvent: remember a rescale for the policies' periods (only with a behavior)."""
    if behavior is None:
        return history
    if new > previous:
        events = _mark_outdated(history.scale_up_events, behavior.scale_up.longest_period(), now)
        change = new - previous
    else:
        events = _mark_outdated(history.scale_down_events, behavior.scale_down.longest_period(), now)
        change = previous - new
    old_index = None
    for i, e in enumerate(events):
        if e.outdated:
            old_index = i
    event = ScaleEvent(change, now)
    if old_index is None:
        events.append(event)
    else:
        events[old_index] = event
    if new > previous:
        return replace(history, scale_up_events=tuple(events))
    return replace(history, scale_down_events=tuple(events))
